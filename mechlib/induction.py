"""Induction heads (Olsson et al. 2022): repeated random sequences and the scores that find the heads.

A sequence is <bos>, a random segment of length L, the same segment again: positions 1…L, then
L+1…2L. An induction head at a second-repeat token attends to the token after that token's earlier
copy (position q − L + 1) and copies it; a previous-token head attends to q − 1.
"""

import torch
from torch import Tensor

from mechlib.loss import next_token_loss
from mechlib.lstm import LSTM
from mechlib.model import Transformer

__all__ = ["EVAL_LENGTH", "eval_length", "repeated_sequences", "stacked_patterns", "previous_token_scores",
           "induction_scores",
           "duplicate_token_scores", "second_half_loss", "loss_by_position", "mean_ablation", "head_scores", "in_context_learning_score",
           "evaluate"]

EVAL_LENGTH = 20  # scored at this segment length; training sequences avoid it


def eval_length(n_ctx: int) -> int:
    """The segment length scores use for a context of n_ctx: 20, or what fits twice after <bos>."""
    return min(EVAL_LENGTH, (n_ctx - 1) // 2)


def repeated_sequences(d_vocab: int, length: int, batch: int, seed: int) -> Tensor:
    """[batch, 1 + 2·length]: <bos> (id 0), a random segment of ids ≥ 2, the segment again."""
    generator = torch.Generator().manual_seed(seed)
    segment = torch.randint(2, d_vocab, (batch, length), generator=generator)
    return torch.cat([torch.zeros(batch, 1, dtype=torch.long), segment, segment], dim=1)


def previous_token_scores(patterns: Tensor) -> Tensor:
    """Mean attention to the previous position: [layer batch head q k] -> [layer head]."""
    return patterns.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(1, 3))


def stacked_patterns(cache: dict[str, Tensor], n_layers: int) -> Tensor:
    """Every layer's cached attention patterns, on the CPU: [layer batch head query_pos key_pos]."""
    return torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"].cpu() for layer in range(n_layers)])


def _attention_from_second_repeat(patterns: Tensor, tokens: Tensor, length: int, shift: int) -> Tensor:
    """Mean attention from each second-repeat token q to position q − L + shift, over valid pairs only:
    queries whose token occurs exactly once before them, so the earlier copy is unambiguous. [layer head]"""
    queries = torch.arange(length + 1, 2 * length + 1)                            # [q]
    earlier = (tokens[:, None, :] == tokens[:, queries, None]) & (
        torch.arange(tokens.shape[1])[None, None, :] < queries[None, :, None])    # [batch q k]
    valid = earlier.sum(-1) == 1                                                  # [batch q]
    if not valid.any():
        raise ValueError("no second-repeat token has a unique earlier copy; use a larger vocabulary or batch")
    weights = patterns[..., queries, queries - length + shift] * valid[None, :, None, :]  # [layer batch head q]
    return weights.sum(dim=(1, 3)) / valid.sum()


def induction_scores(patterns: Tensor, tokens: Tensor, length: int) -> Tensor:
    """Mean attention from each second-repeat token to the token after its earlier copy: [layer head].

    Only valid pairs count: a query whose token occurs exactly once before it, so its earlier copy is
    unambiguous and a perfect induction head scores 1.0.
    """
    return _attention_from_second_repeat(patterns, tokens, length, shift=1)


def second_half_loss(logits: Tensor, tokens: Tensor, length: int) -> Tensor:
    """Mean cross-entropy (nats) predicting the second repeat's tokens 2…L from the ones before them
    (positions L+1 … 2L−1 predicting L+2 … 2L)."""
    return next_token_loss(logits, tokens, "none")[:, length + 1 : 2 * length].mean()


def duplicate_token_scores(patterns: Tensor, tokens: Tensor, length: int) -> Tensor:
    """Mean attention from each second-repeat token to its own earlier copy (position q − L): [layer head].
    Valid pairs only, as for the induction score."""
    return _attention_from_second_repeat(patterns, tokens, length, shift=0)


@torch.inference_mode()
def mean_ablation(model: Transformer, tokens: Tensor, heads: list[tuple[int, int]]) -> dict[tuple[int, int], Tensor]:
    """For ``model(tokens, ablate=…)``: each head's output z replaced by its mean over this batch and positions."""
    _, cache = model.run_with_cache(tokens)
    return {(layer, head): cache[f"blocks.{layer}.attn.hook_z"][:, :, head].mean((0, 1)) for layer, head in heads}


@torch.inference_mode()
def head_scores(model: Transformer, batch: int = 32, seed: int = 1234,
                ablate: dict[tuple[int, int], Tensor] | None = None) -> dict[str, Tensor]:
    """Previous-token, duplicate-token and induction scores of every head, [layer head] each, on repeated
    random sequences; ``ablate`` (see ``Transformer.forward``) measures them with some heads knocked out."""
    length = eval_length(model.cfg.n_ctx)
    tokens = repeated_sequences(model.cfg.d_vocab, length, batch, seed)
    _, cache = model.run_with_cache(tokens, ablate)
    patterns = stacked_patterns(cache, model.cfg.n_layers)
    return {"prev_token": previous_token_scores(patterns), "duplicate_token": duplicate_token_scores(patterns, tokens, length),
            "induction": induction_scores(patterns, tokens, length)}


@torch.inference_mode()
def in_context_learning_score(model: Transformer, tokens: Tensor) -> float:
    """Loss late in the context minus loss early (nats), as in Olsson et al. (500th − 50th token), scaled to
    this context: the last predicted position against the one a tenth of the way in. Negative: later
    tokens are predicted better, thanks to the context."""
    losses = loss_by_position(model, tokens)                                   # [pos − 1]
    early = max(1, round(0.1 * (tokens.shape[1] - 1)))
    return float(losses[-1] - losses[early - 1])


@torch.inference_mode()
def loss_by_position(model: Transformer | LSTM, tokens: Tensor) -> Tensor:
    """Mean next-token loss (nats) at each position, [pos − 1]: position p predicts token p + 1."""
    return next_token_loss(model(tokens.to(next(model.parameters()).device)).cpu(), tokens, "none").mean(0)


@torch.inference_mode()
def evaluate(model: Transformer, batch: int = 32, seed: int = 1234) -> dict[str, float]:
    """Loss on the second repeat, and the best induction and previous-token scores over all heads
    (an LSTM has no heads: only the loss)."""
    length = eval_length(model.cfg.n_ctx)
    tokens = repeated_sequences(model.cfg.d_vocab, length, batch, seed)
    if isinstance(model, LSTM):
        return {"repeat_loss": float(second_half_loss(model(tokens.to(model.W_E.device)).cpu(), tokens, length))}
    logits, cache = model.run_with_cache(tokens)
    out = {"repeat_loss": float(second_half_loss(logits.cpu(), tokens, length))}
    if model.cfg.n_layers:
        patterns = stacked_patterns(cache, model.cfg.n_layers)
        out["induction"] = float(induction_scores(patterns, tokens, length).max())
        out["prev_token"] = float(previous_token_scores(patterns).max())
    return out
