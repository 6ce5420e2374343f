"""Scores on the copying task (``data.CopyingTask``): the setting in which induction heads form fastest.

Each sequence copies a segment of its own length n from its own start, so the induction score here reads,
per sequence, the attention from a copied token q to q − n + 1 (the token after its earlier copy; Olsson
et al. 2022), where ``induction.induction_scores`` uses one length for the whole batch.
"""

import torch
from torch import Tensor

from mechlib.data import Copies
from mechlib.induction import previous_token_scores, stacked_patterns
from mechlib.loss import next_token_loss
from mechlib.lstm import LSTM
from mechlib.model import Transformer

__all__ = ["induction_scores", "metrics"]


def induction_scores(patterns: Tensor, copies: Copies) -> Tensor:
    """Mean attention from each copied token q to q − n + 1, over valid queries (the token occurs exactly once
    before q, so the earlier copy is unambiguous): patterns [layer batch head q k] -> [layer head]."""
    tokens, p = copies.tokens, torch.arange(copies.tokens.shape[1])                   # [batch pos], [pos]
    first = (copies.starts + copies.lengths)[:, None]                                  # [batch 1]
    copied = (p >= first) & (p < first + copies.lengths[:, None])                      # [batch q]
    earlier = (tokens[:, None, :] == tokens[:, :, None]) & (p[None, :] < p[:, None])   # [batch q k]
    valid = copied & (earlier.sum(-1) == 1)                                            # [batch q]
    keys = (p - copies.lengths[:, None] + 1).clamp(min=0)                              # [batch q]
    index = keys[None, :, None, :, None].expand(patterns.shape[0], -1, patterns.shape[2], -1, 1)
    attention = patterns.gather(-1, index)[..., 0]                                     # [layer batch head q]
    return (attention * valid[None, :, None, :]).sum((1, 3)) / valid.sum()


@torch.inference_mode()
def metrics(model: Transformer | LSTM, copies: Copies) -> dict[str, float]:
    """The loss on the predictable positions (``repeat_loss``, nats) and the best induction and previous-token
    scores over all heads (a model without heads: the loss only)."""
    tokens = copies.tokens.to(next(model.parameters()).device)
    if isinstance(model, LSTM) or not model.cfg.n_layers:
        return {"repeat_loss": float(next_token_loss(model(tokens).cpu(), copies.tokens, mask=copies.predictable))}
    logits, cache = model.run_with_cache(tokens)
    patterns = stacked_patterns(cache, model.cfg.n_layers)                             # [layer batch head q k]
    return {"repeat_loss": float(next_token_loss(logits.cpu(), copies.tokens, mask=copies.predictable)),
            "induction": float(induction_scores(patterns, copies).max()),
            "prev_token": float(previous_token_scores(patterns).max())}
