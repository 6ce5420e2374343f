"""Patterns and messages (Elhage et al. 2021): one head's output is A · (X W_OV).

W_QK = W_Q W_Kᵀ decides where the head looks (the pattern A); W_OV = W_V W_O decides what moves
(the messages x_j W_OV). Both are d_model × d_model of rank ≤ d_head, and only these products
matter: W_Q R, W_K R⁻ᵀ (or W_V R, R⁻¹ W_O) give the same head for any invertible R.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechlib import attention
from mechlib.device import median_ms
from mechlib.checks import Check, compare
from mechlib.model import Cache, Transformer

__all__ = ["head_inputs", "Regrouping", "regrouping", "spectra", "non_uniqueness", "scores_from_W_QK", "Messages",
           "messages"]


def head_inputs(model: Transformer, cache: Cache, layer: int) -> tuple[Tensor, Tensor]:
    """What layer ``layer``'s heads read: (query/key input, value input), each [batch pos d_model]."""
    key = f"blocks.{layer}.ln1.hook_normalized" if model.cfg.normalization == "LN" else f"blocks.{layer}.hook_resid_pre"
    v_input = cache[key]
    qk_input = v_input + cache["hook_pos_embed"] if model.cfg.positional == "shortformer" else v_input
    return qk_input, v_input


@dataclass(frozen=True)
class Regrouping:
    check: Check                  # ((A V) W_O) against (A (V W_O))
    macs: dict[str, int]          # multiply-adds of each grouping for one sequence
    time_ms: dict[str, float]     # median of 5 runs each


@torch.inference_mode()
def regrouping(model: Transformer, cache: Cache, layer: int, head: int, tolerance: float) -> Regrouping:
    """One head on sequence 0 computed as ((A V) W_O) and as (A (V W_O)); the same by associativity."""
    A = cache[f"blocks.{layer}.attn.hook_pattern"][0, head]                   # [query_pos key_pos]
    V = cache[f"blocks.{layer}.attn.hook_v"][0, :, head]                      # [key_pos d_head]
    W_O = model.blocks[layer].attn.W_O[head]                                  # [d_head d_model]
    n, d_head, d_model = A.shape[0], V.shape[1], W_O.shape[1]
    return Regrouping(
        check=compare((A @ V) @ W_O, A @ (V @ W_O), tolerance),
        macs={"((QKᵀ)V)O": n * n * d_head + n * d_head * d_model, "(QKᵀ)(VO)": n * d_head * d_model + n * n * d_model},
        time_ms={"((QKᵀ)V)O": median_ms(lambda: (A @ V) @ W_O), "(QKᵀ)(VO)": median_ms(lambda: A @ (V @ W_O))},
    )


@torch.inference_mode()
def spectra(model: Transformer, layer: int, head: int) -> dict[str, np.ndarray]:
    """Singular values of W_QK and W_OV (d_model each, in float64); those past d_head are numerically 0."""
    attn = model.blocks[layer].attn
    W_QK = attention.W_QK(attn.W_Q[head : head + 1].double(), attn.W_K[head : head + 1].double())[0]
    W_OV = attention.W_OV(attn.W_V[head : head + 1].double(), attn.W_O[head : head + 1].double())[0]
    return {"W_QK": torch.linalg.svdvals(W_QK).cpu().numpy(), "W_OV": torch.linalg.svdvals(W_OV).cpu().numpy()}


@torch.inference_mode()
def non_uniqueness(model: Transformer, cache: Cache, layer: int, head: int, seed: int) -> dict[str, float]:
    """Max |difference| of the pattern after W_Q R, W_K R⁻ᵀ and of the messages after W_V R, R⁻¹ W_O,
    for a random invertible R (d_head × d_head), computed in float64 on sequence 0."""
    attn = model.blocks[layer].attn
    qk_input, v_input = (x[0].double() for x in head_inputs(model, cache, layer))  # [pos d_model]
    W_Q, W_K, W_V, W_O = (w[head].double() for w in (attn.W_Q, attn.W_K, attn.W_V, attn.W_O))
    b_Q, b_K, b_V = (b[head].double() for b in (attn.b_Q, attn.b_K, attn.b_V))
    g = torch.Generator().manual_seed(seed)
    R = torch.randn(W_Q.shape[1], W_Q.shape[1], generator=g, dtype=torch.float64) + 2 * torch.eye(W_Q.shape[1], dtype=torch.float64)
    R_inv = torch.linalg.inv(R)

    def pattern(Wq, Wk, bq, bk):
        q, k = (qk_input @ Wq + bq)[:, None], (qk_input @ Wk + bk)[:, None]   # [pos head=1 d_head]
        return attention.attention_pattern(attention.attention_scores(q, k))

    def moved(Wv, Wo, bv):
        return (v_input @ Wv + bv) @ Wo                                        # [pos d_model]

    return {"pattern": float((pattern(W_Q, W_K, b_Q, b_K) - pattern(W_Q @ R, W_K @ R_inv.T, b_Q @ R, b_K @ R_inv.T)).abs().max()),
            "messages": float((moved(W_V, W_O, b_V) - moved(W_V @ R, R_inv @ W_O, b_V @ R)).abs().max())}


@torch.inference_mode()
def scores_from_W_QK(model: Transformer, cache: Cache, layer: int, head: int) -> Tensor:
    """Scores as a bilinear form, (x_i W_QK x_jᵀ + x_i W_Q b_Kᵀ + b_Q W_Kᵀ x_jᵀ + b_Q b_Kᵀ) / √d_head,
    causally masked: [batch query_pos key_pos]. They equal the cached attention scores."""
    attn = model.blocks[layer].attn
    x, _ = head_inputs(model, cache, layer)                                   # [batch pos d_model]
    W_QK = attention.W_QK(attn.W_Q[head : head + 1], attn.W_K[head : head + 1])[0]   # [d_model d_model]
    b_Q, b_K = attn.b_Q[head], attn.b_K[head]
    scores = (x @ W_QK @ x.transpose(-1, -2) + (x @ attn.W_Q[head] @ b_K)[..., :, None]
              + (x @ attn.W_K[head] @ b_Q)[..., None, :] + b_Q @ b_K) / attn.W_Q.shape[-1] ** 0.5
    n = x.shape[1]
    return scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1), float("-inf"))


@dataclass(frozen=True)
class Messages:
    weights: np.ndarray       # [source] attention from the destination to each source (0 … dest)
    norms: np.ndarray         # [source] ‖message_j‖
    top_tokens: list[list[int]]  # per source: the token ids its message raises most through W_U
    check: Check              # Σ_j A[dest, j] message_j against the head's cached result at dest


@torch.inference_mode()
def messages(model: Transformer, cache: Cache, layer: int, head: int, dest: int, tolerance: float, k: int = 3) -> Messages:
    """The messages every source sends through one head to ``dest`` (sequence 0), and their weighted sum."""
    attn = model.blocks[layer].attn
    _, v_input = head_inputs(model, cache, layer)
    sent = (v_input[0, : dest + 1] @ attn.W_V[head] + attn.b_V[head]) @ attn.W_O[head]   # [source d_model]
    weights = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, dest, : dest + 1]       # [source]
    total = weights @ sent                                                              # [d_model]
    pushed = (sent @ model.unembed.W_U).topk(k, dim=-1).indices                         # [source k]
    return Messages(weights.cpu().double().numpy(), sent.norm(dim=-1).cpu().double().numpy(), pushed.cpu().tolist(),
                    compare(total, cache[f"blocks.{layer}.attn.hook_result"][0, dest, head], tolerance))
