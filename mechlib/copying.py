"""Scores on the copying task (``data.CopyingTask``): the setting in which induction heads form fastest.

Each sequence copies a segment of its own length n from its own start, so the induction score here
(``induction_scores_on_copies``) reads, per sequence, the attention from a copied token q to q − n + 1 (the token
after its earlier copy; Olsson et al. 2022), where ``induction.induction_scores`` uses one length for the whole
batch. ``metrics`` is what training reports, on a batch of this task or on repeated random sequences (one start
and one length for all: ``data.Copies.repeats``).

``controls`` sets the two-layer model beside its controls trained the same way: one attention layer (no
composition, so no induction head) and an LSTM of about the same size (a fixed-width state, no attention).
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechlib import zoo
from mechlib.checks import EARLIER_MARGIN, GAP_MIN, NOTHING_MARGIN
from mechlib.data import Copies, repeated_sequences
from mechlib.device import costs, to_numpy
from mechlib.induction import loss_by_position, previous_token_scores, stacked_patterns
from mechlib.loss import next_token_loss
from mechlib.lstm import LSTM
from mechlib.model import Transformer

__all__ = ["induction_scores_on_copies", "metrics", "CONTROLS", "Controls", "controls_of", "controls", "losses_by_label",
           "earlier_token_loss"]


def induction_scores_on_copies(patterns: Tensor, copies: Copies) -> Tensor:
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
    """What training reports: the loss on the predictable positions (``repeat_loss``, nats) and the best induction and
    previous-token scores over all heads (a model without heads: the loss only), on a copying-task batch or on
    repeated random sequences (``Copies.repeats``)."""
    tokens = copies.tokens.to(next(model.parameters()).device)
    if isinstance(model, LSTM) or not model.cfg.n_layers:
        return {"repeat_loss": float(next_token_loss(model(tokens).cpu(), copies.tokens, mask=copies.predictable))}
    logits, cache = model.run_with_cache(tokens)
    patterns = stacked_patterns(cache, model.cfg.n_layers)                             # [layer batch head q k]
    return {"repeat_loss": float(next_token_loss(logits.cpu(), copies.tokens, mask=copies.predictable)),
            "induction": float(induction_scores_on_copies(patterns, copies).max()),
            "prev_token": float(previous_token_scores(patterns).max())}


CONTROLS = {"two layers": "copying-2l", "one layer": "copying-1l", "LSTM": "copying-lstm"}  # role -> zoo model
CONTROL_BATCH = 64     # repeated sequences the losses average over


def earlier_token_loss(tokens: Tensor) -> Tensor:
    """The loss of the rule "some earlier token comes next", where it holds: the next token is one of the distinct
    ids seen so far after <bos>, each equally likely, so −log P = ln(how many). tokens [batch pos] -> [batch pos − 1],
    aligned with ``next_token_loss`` (position p has seen tokens 1 … p; −inf at p = 0, where it has seen none)."""
    p = torch.arange(tokens.shape[1])                                                   # [pos]
    seen_before = ((tokens[:, :, None] == tokens[:, None, :]) & (p[None, :] < p[:, None])).any(-1)  # [batch pos]
    distinct = (~seen_before[:, 1:-1]).float().cumsum(1)                                # [batch pos − 2]: in 1 … p, p ≥ 1
    return torch.cat([torch.zeros_like(distinct[:, :1]), distinct], 1).log()            # [batch pos − 1]


@dataclass(frozen=True)
class Controls:
    """Loss by position on repeated sequences for the two-layer model and its controls, and the verdicts they give.

    The sequences are <bos>, a random segment of ``length`` ids, the segment again: the copying task's longest
    segment, which fills the context and so starts right after <bos>, as it always does in training. Every
    sequence is laid out the same, so each position is in the same copy everywhere and losses average by position.
    Position p predicts token p + 1: p = 0 … length − 1 predict the first copy, which nothing before it tells;
    p = length predicts the copy's first token; p = length + 1 … 2·length − 1 the rest of it (``Copies.predictable``).
    """

    length: int                    # segment length
    d_vocab: int
    params: dict[str, int]         # role -> parameter count
    losses: dict[str, np.ndarray]  # role -> [2·length] mean loss (nats) at each position p, predicting token p + 1
    first_copy: dict[str, float]   # role -> mean loss predicting the first copy
    second_copy: dict[str, float]  # role -> mean loss predicting the second copy after its first token
    earlier: float                 # ``earlier_token_loss`` on the second copy: "some earlier token comes next"
    ordered: bool                  # two layers < one layer < LSTM on the second copy, each step by ≥ GAP_MIN
    lstm_knows_nothing: bool       # the LSTM's second-copy loss is within NOTHING_MARGIN of ln d_vocab
    one_layer_earlier: bool        # the one-layer model's second-copy loss is within EARLIER_MARGIN of ``earlier``

    @property
    def knows_nothing(self) -> float:
        """ln d_vocab: the loss of a uniform guess."""
        return math.log(self.d_vocab)


@torch.inference_mode()
def controls_of(models: dict[str, Transformer | LSTM], seed: int) -> Controls:
    """``Controls`` of ``models`` (role -> model, the roles of ``CONTROLS``, one vocabulary) on CONTROL_BATCH
    repeated sequences drawn from ``seed``, with the two-layer model's longest copying-task segment."""
    two = models["two layers"]
    length = (two.cfg.n_ctx - 1) // 2
    tokens = repeated_sequences(two.cfg.d_vocab, length, CONTROL_BATCH, seed)            # [batch 1 + 2·length]
    copies = Copies.repeats(tokens, length)
    second = copies.predictable[0]                                                       # [2·length]
    losses = {role: to_numpy(loss_by_position(model, tokens)) for role, model in models.items()}
    first_copy = {role: float(values[:length].mean()) for role, values in losses.items()}
    second_copy = {role: float(values[second].mean()) for role, values in losses.items()}
    earlier, s = float(earlier_token_loss(tokens)[copies.predictable].mean()), second_copy  # s: for the verdicts
    return Controls(length, two.cfg.d_vocab, {role: model.cfg.n_params() for role, model in models.items()}, losses,
                    first_copy, s, earlier,
                    ordered=s["one layer"] - s["two layers"] >= GAP_MIN and s["LSTM"] - s["one layer"] >= GAP_MIN,
                    lstm_knows_nothing=abs(s["LSTM"] - math.log(two.cfg.d_vocab)) <= NOTHING_MARGIN,
                    one_layer_earlier=abs(s["one layer"] - earlier) <= EARLIER_MARGIN)


@costs(lambda seed: sum(zoo.load(name).cfg.estimate_mb(CONTROL_BATCH) for name in CONTROLS.values()),
       "the copying task's three models")
def controls(seed: int) -> Controls:
    """``controls_of`` the shipped zoo models of ``CONTROLS``, trained by one recipe for the same number of steps."""
    return controls_of({role: zoo.load(name) for role, name in CONTROLS.items()}, seed)


def losses_by_label(result: Controls) -> dict[str, np.ndarray]:
    """The controls' losses by position [2·length] under labels that give each model's size:
    "two layers (101,440 parameters)"."""
    return {f"{role} ({result.params[role]:,} parameters)": values for role, values in result.losses.items()}
