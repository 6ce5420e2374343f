"""One attention layer, read three ways (Elhage et al. 2021, "A Mathematical Framework").

1. concat-then-project: the heads' outputs z are concatenated and multiplied by the whole W_O;
2. project-per-head-then-sum: each head multiplies its own row block of W_O, and the results add;
3. patterns times messages, (A)(X W_OV): each head's pattern A mixes the messages x_j W_V W_O.

The model's forward uses (1); the tests prove (2) and (3) equal to it. Row vectors multiply on
the right, as in TransformerLens: x @ W_Q, never W_Q @ x.
"""

import torch
from einops import einsum, rearrange
from torch import Tensor

__all__ = ["qkv", "fused_qkv", "attention_scores", "attention_pattern", "mix_values", "concat_then_project",
           "per_head_results", "W_QK", "W_OV", "pattern_times_messages"]


def qkv(x: Tensor, W: Tensor, b: Tensor | None = None) -> Tensor:
    """Queries, keys or values of every head: x [... pos d_model] @ W [head d_model d_head] -> [... pos head d_head]."""
    out = einsum(x, W, "... pos d_model, head d_model d_head -> ... pos head d_head")
    return out if b is None else out + b


def fused_qkv(x: Tensor, Ws: tuple[Tensor, ...], bs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """``qkv`` for several weights at once, as one matmul: x [batch pos d_model] and weights [head d_model d_head]
    -> one [batch head pos d_head] per weight (heads before positions, as scaled_dot_product_attention takes them)."""
    W = torch.cat(Ws).transpose(0, 1).reshape(x.shape[-1], -1)                 # [d_model (w head d_head)]
    out = torch.nn.functional.linear(x, W.T, torch.cat(bs).view(-1))           # [batch pos (w head d_head)]
    out = out.view(*x.shape[:-1], len(Ws), Ws[0].shape[0], Ws[0].shape[2])     # [batch pos w head d_head]
    return out.permute(2, 0, 3, 1, 4).unbind(0)                                # w × [batch head pos d_head]


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """Causally masked scores q·k / √d_head: [... query_pos head d_head] -> [... head query_pos key_pos].

    Keys after the query are set to -inf, so the softmax gives them weight exactly 0.
    """
    n_pos, d_head = q.shape[-3], q.shape[-1]
    scores = einsum(q, k, "... query_pos head d_head, ... key_pos head d_head -> ... head query_pos key_pos")
    future = torch.ones(n_pos, n_pos, dtype=torch.bool, device=q.device).triu(1)
    return (scores / d_head**0.5).masked_fill(future, float("-inf"))


def attention_pattern(scores: Tensor) -> Tensor:
    """The pattern A: softmax of the scores over key positions; each row sums to 1."""
    return scores.softmax(dim=-1)


def mix_values(pattern: Tensor, v: Tensor) -> Tensor:
    """z = A v per head: [... head query_pos key_pos], [... key_pos head d_head] -> [... query_pos head d_head]."""
    return einsum(pattern, v, "... head query_pos key_pos, ... key_pos head d_head -> ... query_pos head d_head")


def concat_then_project(z: Tensor, W_O: Tensor) -> Tensor:
    """Reading 1: concat(z_1 … z_H) @ W_O, with W_O as one (H·d_head) × d_model matrix.

    z: [... pos head d_head], W_O: [head d_head d_model] -> [... pos d_model] (b_O not added).
    """
    return rearrange(z, "... head d_head -> ... (head d_head)") @ rearrange(W_O, "head d_head d_model -> (head d_head) d_model")


def per_head_results(z: Tensor, W_O: Tensor) -> Tensor:
    """Reading 2: each head's result z_h @ W_O[h] (its d_head × d_model row block); sum over head = reading 1.

    z: [... pos head d_head], W_O: [head d_head d_model] -> [... pos head d_model].
    """
    return einsum(z, W_O, "... head d_head, head d_head d_model -> ... head d_model")


def W_QK(W_Q: Tensor, W_K: Tensor) -> Tensor:
    """W_QK = W_Q W_Kᵀ per head, [head d_model d_model]: decides where each head looks (rank ≤ d_head)."""
    return einsum(W_Q, W_K, "head d_in d_head, head d_out d_head -> head d_in d_out")


def W_OV(W_V: Tensor, W_O: Tensor) -> Tensor:
    """W_OV = W_V W_O per head, [head d_model d_model]: decides what each head moves (rank ≤ d_head)."""
    return einsum(W_V, W_O, "head d_in d_head, head d_head d_out -> head d_in d_out")


def pattern_times_messages(pattern: Tensor, x: Tensor, W_V: Tensor, W_O: Tensor, b_V: Tensor | None = None) -> Tensor:
    """Reading 3: per-head results as A · (X W_OV) — patterns (where to look) times messages (what moves).

    pattern: [... head query_pos key_pos], x: [... key_pos d_model] -> [... query_pos head d_model].
    The message of source j through head h is x_j W_V[h] W_O[h] (+ b_V[h] W_O[h]).
    """
    messages = einsum(x, W_OV(W_V, W_O), "... key_pos d_in, head d_in d_out -> ... key_pos head d_out")
    if b_V is not None:
        messages = messages + einsum(b_V, W_O, "head d_head, head d_head d_model -> head d_model")
    return einsum(pattern, messages, "... head query_pos key_pos, ... key_pos head d_model -> ... query_pos head d_model")
