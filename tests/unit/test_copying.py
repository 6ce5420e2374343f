"""Scores on the copying task: known answers on hand-made attention patterns."""

import torch

from mechlib import copying
from mechlib.data import CopyingTask
from mechlib.lstm import LSTM, LSTMConfig

N_CTX = 40


def _copies(batch=64, seed=0):
    return CopyingTask(d_vocab=512, length=16).sample(torch.Generator().manual_seed(seed), batch, N_CTX)


def _pattern_to(keys: torch.Tensor) -> torch.Tensor:
    """[batch head=1 q k]: each query attends wholly to keys[batch, q] (the query itself where that is -1)."""
    batch, q = keys.shape
    keys = torch.where(keys < 0, torch.arange(q), keys)
    return torch.nn.functional.one_hot(keys, q).float()[:, None]


def test_a_head_attending_to_the_token_after_each_earlier_copy_scores_one_and_a_previous_token_head_zero():
    copies = _copies()
    p, n = torch.arange(N_CTX), copies.lengths[:, None]                       # [pos], [batch 1]
    induction = _pattern_to((p - n + 1).clamp(min=0))                         # every query to q − n + 1
    previous = _pattern_to((p - 1).clamp(min=0).expand(len(n), -1))          # every query to q − 1
    scores = copying.induction_scores(torch.stack([induction, previous]), copies)   # [layer=2 head=1]
    assert scores.shape == (2, 1)
    assert abs(float(scores[0, 0]) - 1.0) < 1e-6
    assert float(scores[1, 0]) < 0.02  # only where the earlier copy's next token is the previous one by chance


def test_the_score_reads_each_sequences_own_distance():
    """A head that attends one common distance back (the batch's most common n) scores only on the sequences
    with that n: what a position-only rule gets."""
    copies = _copies(batch=512, seed=3)
    common = int(copies.lengths.mode().values)
    fixed = _pattern_to((torch.arange(N_CTX) - common + 1).clamp(min=0).expand(512, -1))
    share = float((copies.lengths == common).float().mean())
    assert abs(float(copying.induction_scores(fixed[None], copies)[0, 0]) - share) < 0.03


def test_a_model_without_heads_gets_the_loss_on_the_copy_only():
    model = LSTM(LSTMConfig(d_vocab=512, d_model=8, d_hidden=8, n_ctx=N_CTX)).eval()
    metrics = copying.metrics(model, _copies(batch=8))
    assert set(metrics) == {"repeat_loss"} and 5.5 < metrics["repeat_loss"] < 7.0  # about ln 510 untrained
