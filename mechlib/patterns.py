"""Patterns and messages (Elhage et al. 2021): one head's output is A · (X W_OV).

W_QK = W_Q W_Kᵀ decides where the head looks (the pattern A); W_OV = W_V W_O decides what moves
(the messages x_j W_OV). Both are d_model × d_model of rank ≤ d_head, and only these products
matter: W_Q R, W_K R⁻ᵀ (or W_V R, R⁻¹ W_O) give the same head for any invertible R.

The page experiments (``regrouping``, ``ranks``, ``non_uniqueness``, ``scores``, ``messages``) take the
model and plain values (token ids, layer, head, …), run on that one sequence and return frozen dataclasses
of numbers, arrays and verdicts; checks use the model's own tolerance (float64 ones that of float64) and
compare with what the model itself computed (its cache), never with the same formula computed again.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechlib import attention
from mechlib.checks import EFFECTIVE_SHARE, RANK_ZERO, Check, compare, model_tolerance, tolerance_for
from mechlib.device import costs, median_ms, to_numpy
from mechlib.model import Cache, Transformer
from mechlib.residual import cache_of

__all__ = ["head_inputs", "scores_from_W_QK", "Regrouping", "regrouping", "Ranks", "ranks", "effective_rank", "effective_rank_bins", "bin_of",
           "NonUniqueness", "non_uniqueness", "Scores", "scores", "Messages", "messages", "TOP_PUSHED", "LOOKS", "where_looked"]

TOP_PUSHED = 3  # tokens listed per message: those it raises most through W_U


def head_inputs(model: Transformer, cache: Cache, layer: int) -> tuple[Tensor, Tensor]:
    """What layer ``layer``'s heads read: (query/key input, value input), each [batch pos d_model]."""
    key = f"blocks.{layer}.ln1.hook_normalized" if model.cfg.normalization == "LN" else f"blocks.{layer}.hook_resid_pre"
    v_input = cache[key]
    qk_input = v_input + cache["hook_pos_embed"] if model.cfg.positional == "shortformer" else v_input
    return qk_input, v_input


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
class Regrouping:
    check: Check                  # A (V W_O) of every head against the model's cached per-head results ((A V) W_O)
    macs: dict[str, int]          # multiply-adds of each grouping for the sequence, one head
    time_ms: dict[str, float]     # median of 5 runs each, the chosen head


@torch.inference_mode()
def regrouping(model: Transformer, ids: tuple[int, ...], layer: int, head: int) -> Regrouping:
    """Every head of the layer computed as A (V W_O), against the results the model cached from its own
    ((A V) W_O) (``blocks.{layer}.attn.hook_result``): the same by associativity, at different costs."""
    cache = cache_of(model, ids)
    A = cache[f"blocks.{layer}.attn.hook_pattern"][0]                         # [head query_pos key_pos]
    V = cache[f"blocks.{layer}.attn.hook_v"][0].transpose(0, 1)               # [head key_pos d_head]
    W_O = model.blocks[layer].attn.W_O                                        # [head d_head d_model]
    regrouped = (A @ (V @ W_O)).transpose(0, 1)                               # [query_pos head d_model]
    n, d_head, d_model = A.shape[-1], V.shape[-1], W_O.shape[-1]
    A_h, V_h, W_O_h = A[head], V[head], W_O[head]                             # the chosen head, timed
    return Regrouping(
        check=compare(regrouped, cache[f"blocks.{layer}.attn.hook_result"][0], model_tolerance(model)),
        macs={"((QKᵀ)V)O": n * n * d_head + n * d_head * d_model, "(QKᵀ)(VO)": n * d_head * d_model + n * n * d_model},
        time_ms={"((QKᵀ)V)O": median_ms(lambda: (A_h @ V_h) @ W_O_h), "(QKᵀ)(VO)": median_ms(lambda: A_h @ (V_h @ W_O_h))},
    )


@dataclass(frozen=True)
class Ranks:
    spectra: dict[str, np.ndarray]    # "W_QK", "W_OV" -> [d_model] singular values, float64
    ranks: dict[str, int]             # singular values above RANK_ZERO · σ₁
    beyond: dict[str, float]          # the largest singular value past d_head / σ₁ (0 when there is none)
    vacuous: bool                     # d_head ≥ d_model: no singular value lies past d_head, rank ≤ d_head says nothing


@costs(lambda model, *_: 3 * 2 * model.cfg.d_model**2 * 8 / 1e6)  # W_QK, W_OV in float64, and the SVD's work
@torch.inference_mode()
def ranks(model: Transformer, layer: int, head: int) -> Ranks:
    """Singular values of W_QK and W_OV (d_model each, in float64). Rank ≤ d_head is linear algebra, not a finding:
    each product passes through d_head dimensions, so the values past d_head are numerically 0. The spectra show
    it; with d_head ≥ d_model there is no value past d_head and the statement holds for any matrix."""
    attn, d_head = model.blocks[layer].attn, model.cfg.d_head
    W_QK = attention.W_QK(attn.W_Q[head : head + 1].double(), attn.W_K[head : head + 1].double())[0]
    W_OV = attention.W_OV(attn.W_V[head : head + 1].double(), attn.W_O[head : head + 1].double())[0]
    spectra = {name: to_numpy(torch.linalg.svdvals(W)) for name, W in (("W_QK", W_QK), ("W_OV", W_OV))}
    top = {name: values[0] if values[0] > 0 else 1.0 for name, values in spectra.items()}
    return Ranks(spectra, {name: int((values > RANK_ZERO * top[name]).sum()) for name, values in spectra.items()},
                 {name: float(values[d_head:].max(initial=0.0) / top[name]) for name, values in spectra.items()},
                 d_head >= model.cfg.d_model)


def effective_rank(values: np.ndarray, share: float = EFFECTIVE_SHARE) -> int:
    """The fewest leading singular values (``values``: [k], descending) whose squares hold ``share`` of their sum,
    ‖W‖_F²: how many directions a head really uses out of the d_head it may. 0 for the zero matrix."""
    energy = np.cumsum(values.astype(np.float64) ** 2)
    return 0 if energy[-1] == 0 else int(np.searchsorted(energy, share * energy[-1] * (1 - 1e-12)) + 1)


def effective_rank_bins(d_head: int, d_model: int) -> list[tuple[int, int]]:
    """Bins (lowest, highest) of effective ranks that share no value, for a question a class can debate: 1, up to
    half of d_head, the rest of d_head, and past d_head (which rank ≤ d_head rules out, unless d_head ≥ d_model
    makes that bin empty). Bins with no value are left out."""
    cap, half = min(d_head, d_model), min(d_head, d_model) // 2
    edges = [(1, 1), (2, half), (max(2, half + 1), cap), (cap + 1, d_model)]
    return [(first, last) for first, last in edges if first <= last]


def bin_of(bins: list[tuple[int, int]], value: int) -> int:
    """The index of the bin holding ``value``."""
    return next(i for i, (first, last) in enumerate(bins) if first <= value <= last)


@dataclass(frozen=True)
class NonUniqueness:
    pattern: Check    # the pattern after W_Q R, W_K R⁻ᵀ against the pattern, float64
    messages: Check   # the messages after W_V R, R⁻¹ W_O against the messages, float64


@torch.inference_mode()
def non_uniqueness(model: Transformer, ids: tuple[int, ...], layer: int, head: int, seed: int) -> NonUniqueness:
    """The pattern after W_Q R, W_K R⁻ᵀ and the messages after W_V R, R⁻¹ W_O, for a random invertible R
    (d_head × d_head), against the originals; computed in float64."""
    attn = model.blocks[layer].attn
    qk_input, v_input = (x[0].double() for x in head_inputs(model, cache_of(model, ids), layer))  # [pos d_model]
    W_Q, W_K, W_V, W_O = (w[head].double() for w in (attn.W_Q, attn.W_K, attn.W_V, attn.W_O))
    b_Q, b_K, b_V = (b[head].double() for b in (attn.b_Q, attn.b_K, attn.b_V))
    g = torch.Generator().manual_seed(seed)
    d_head = W_Q.shape[1]
    R = (torch.randn(d_head, d_head, generator=g, dtype=torch.float64) + 2 * torch.eye(d_head, dtype=torch.float64)).to(W_Q.device)
    R_inv = torch.linalg.inv(R)

    def pattern(Wq, Wk, bq, bk):
        q, k = (qk_input @ Wq + bq)[:, None], (qk_input @ Wk + bk)[:, None]   # [pos head=1 d_head]
        return attention.attention_pattern(attention.attention_scores(q, k))

    def moved(Wv, Wo, bv):
        return (v_input @ Wv + bv) @ Wo                                        # [pos d_model]

    tolerance = tolerance_for(torch.float64)
    return NonUniqueness(
        compare(pattern(W_Q @ R, W_K @ R_inv.T, b_Q @ R, b_K @ R_inv.T), pattern(W_Q, W_K, b_Q, b_K), tolerance),
        compare(moved(W_V @ R, R_inv @ W_O, b_V @ R), moved(W_V, W_O, b_V), tolerance))


@dataclass(frozen=True)
class Scores:
    scores: np.ndarray    # [query_pos key_pos] x_i W_QK x_jᵀ / √d_head with the biases; -inf above the diagonal
    pattern: np.ndarray   # [query_pos key_pos] the model's cached pattern A
    check: Check          # the scores against the model's cached scores, where causal
    layer_patterns: np.ndarray  # [head query_pos key_pos] every head of the layer: the cached patterns


@torch.inference_mode()
def scores(model: Transformer, ids: tuple[int, ...], layer: int, head: int) -> Scores:
    """One head's scores recomputed from W_QK against the model's own, and its pattern."""
    cache = cache_of(model, ids)
    cached = cache[f"blocks.{layer}.attn.hook_attn_scores"][0, head]          # [query_pos key_pos]
    mine = scores_from_W_QK(model, cache, layer, head)[0]                     # [query_pos key_pos]
    causal = torch.isfinite(cached)
    every = cache[f"blocks.{layer}.attn.hook_pattern"][0]                     # [head query_pos key_pos]
    return Scores(to_numpy(mine.double()), to_numpy(every[head].double()),
                  compare(mine[causal], cached[causal], model_tolerance(model)), to_numpy(every.double()))


@dataclass(frozen=True)
class Messages:
    weights: np.ndarray          # [source] attention from the destination to each source (0 … dest)
    norms: np.ndarray            # [source] ‖message_j‖
    top_tokens: list[list[int]]  # per source: the TOP_PUSHED token ids its message raises most through W_U
    check: Check                 # Σ_j A[dest, j] message_j against the head's cached result at dest


@torch.inference_mode()
def messages(model: Transformer, ids: tuple[int, ...], layer: int, head: int, dest: int) -> Messages:
    """The messages every source sends through one head to ``dest``, and their weighted sum."""
    cache = cache_of(model, ids)
    attn = model.blocks[layer].attn
    _, v_input = head_inputs(model, cache, layer)
    sent = (v_input[0, : dest + 1] @ attn.W_V[head] + attn.b_V[head]) @ attn.W_O[head]   # [source d_model]
    weights = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, dest, : dest + 1]       # [source]
    pushed = (sent @ model.unembed.W_U).topk(min(TOP_PUSHED, model.cfg.d_vocab), dim=-1).indices   # [source k]
    return Messages(to_numpy(weights.double()), to_numpy(sent.norm(dim=-1).double()), pushed.cpu().tolist(),
                    compare(weights @ sent, cache[f"blocks.{layer}.attn.hook_result"][0, dest, head], model_tolerance(model)))


LOOKS = ("itself", "the previous position", "position 0", "another earlier position")


def where_looked(pattern: np.ndarray, dest: int) -> str:
    """Which of ``LOOKS`` describes the source that destination ``dest`` attends to most (pattern: [query_pos key_pos]);
    the first that fits, in that order."""
    source = int(pattern[dest, : dest + 1].argmax())
    return LOOKS[0] if source == dest else LOOKS[1] if source == dest - 1 else LOOKS[2] if source == 0 else LOOKS[3]
