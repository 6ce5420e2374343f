"""Scores on the copying task: known answers on hand-made attention patterns; the controls, computed from the models."""

import math

import numpy as np
import pytest
import torch

from mechlib import copying, zoo
from mechlib.config import ModelConfig
from mechlib.data import CopyingTask, repeated_sequences
from mechlib.induction import loss_by_position
from mechlib.loss import next_token_loss
from mechlib.lstm import LSTM, LSTMConfig
from mechlib.model import Transformer

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
    scores = copying.induction_scores_on_copies(torch.stack([induction, previous]), copies)   # [layer=2 head=1]
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
    assert abs(float(copying.induction_scores_on_copies(fixed[None], copies)[0, 0]) - share) < 0.03


def test_a_model_without_heads_gets_the_loss_on_the_copy_only():
    model = LSTM(LSTMConfig(d_vocab=512, d_model=8, d_hidden=8, n_ctx=N_CTX)).eval()
    metrics = copying.metrics(model, _copies(batch=8))
    assert set(metrics) == {"repeat_loss"} and 5.5 < metrics["repeat_loss"] < 7.0  # about ln 510 untrained


# ---------------------------------------------------------------------------------------------
# Controls on the copying task: the two-layer model beside a one-layer model and an LSTM.


def _zeroed(model):
    """All weights zero: the logits are b_U = 0, a uniform guess, so every loss is exactly ln d_vocab."""
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    return model.eval()


def _small(n_layers: int, seed: int = 0) -> Transformer:
    return Transformer(ModelConfig(n_layers=n_layers, d_model=16, n_heads=1, d_vocab=64, n_ctx=17, seed=seed)).eval()


def test_the_earlier_token_level_is_ln_of_the_distinct_ids_seen_after_bos():
    tokens = torch.tensor([[0, 5, 6, 5, 7, 6]])
    assert torch.allclose(copying.earlier_token_loss(tokens).exp(), torch.tensor([[0.0, 1, 2, 2, 3]]))


def test_controls_are_each_models_loss_by_position_on_one_batch():
    models = {"two layers": _small(2), "one layer": _small(1),
              "LSTM": LSTM(LSTMConfig(d_vocab=64, d_model=8, d_hidden=8, n_ctx=17)).eval()}
    c = copying.controls_of(models, seed=5)
    tokens = repeated_sequences(64, 8, copying.CONTROL_BATCH, 5)                 # <bos>, 8 ids, the same 8
    predictable = torch.zeros(copying.CONTROL_BATCH, 16, dtype=torch.bool)
    predictable[:, 9:16] = True                                                          # predicting tokens 10 … 16
    assert c.length == 8 and c.d_vocab == 64
    for role, model in models.items():
        assert c.losses[role].shape == (16,)
        assert np.allclose(c.losses[role], loss_by_position(model, tokens).numpy(), atol=1e-6)
        logits = model(tokens).detach()
        assert c.second_copy[role] == pytest.approx(float(next_token_loss(logits, tokens, mask=predictable)), abs=1e-5)
        assert c.first_copy[role] == pytest.approx(float(next_token_loss(logits[:, :9], tokens[:, :9])), abs=1e-5)
        assert c.params[role] == model.cfg.n_params()
    assert c.earlier == pytest.approx(float(copying.earlier_token_loss(tokens)[predictable].mean()), abs=1e-6)
    assert math.log(6) < c.earlier <= math.log(8)  # about 8 distinct ids seen on the second copy


def test_a_uniform_guess_is_the_loss_of_knowing_nothing_and_the_verdicts_follow():
    """Three zeroed models all sit at ln d_vocab: nothing is ordered, the "LSTM" knows nothing, and the one-layer
    model is not at the earlier-token level (ln 64 − ln 8 ≈ 2.1 nats above it)."""
    c = copying.controls_of({"two layers": _zeroed(_small(2)), "one layer": _zeroed(_small(1)),
                             "LSTM": _zeroed(LSTM(LSTMConfig(d_vocab=64, d_model=8, d_hidden=8, n_ctx=17)))}, seed=0)
    assert c.knows_nothing == pytest.approx(math.log(64))
    assert all(v == pytest.approx(math.log(64), abs=1e-5) for v in c.second_copy.values())
    assert (c.ordered, c.lstm_knows_nothing, c.one_layer_earlier) == (False, True, False)


def test_the_shipped_controls_rank_two_layers_below_one_layer_below_the_lstm():
    c = copying.controls(seed=0)
    s = c.second_copy
    assert s["two layers"] < 0.5 < s["one layer"] - copying.GAP_MIN and s["one layer"] < s["LSTM"] - copying.GAP_MIN
    assert (c.ordered, c.lstm_knows_nothing, c.one_layer_earlier) == (True, True, True)
    # Nothing tells the first copy, and the loss was trained on the copy only: the LSTM guesses uniformly there, the
    # attention models bet on earlier tokens and pay for it.
    assert abs(c.first_copy["LSTM"] - c.knows_nothing) < 0.1
    assert c.first_copy["two layers"] > c.knows_nothing + 1 and c.first_copy["one layer"] > c.knows_nothing + 1


def test_the_verdicts_are_computed_from_the_models_given():
    """The shipped models in other roles: the verdicts flip with the numbers."""
    shipped = {role: zoo.load(name) for role, name in copying.CONTROLS.items()}
    swapped = copying.controls_of({"two layers": shipped["LSTM"], "one layer": shipped["two layers"],
                                   "LSTM": shipped["one layer"]}, seed=0)
    assert (swapped.ordered, swapped.lstm_knows_nothing, swapped.one_layer_earlier) == (False, False, False)
    real = copying.controls(seed=0)
    assert swapped.second_copy["LSTM"] == real.second_copy["one layer"]  # the same numbers, moved
    one_layer_copies = copying.controls_of({**shipped, "one layer": shipped["two layers"]}, seed=0)
    assert not one_layer_copies.ordered and not one_layer_copies.one_layer_earlier and one_layer_copies.lstm_knows_nothing
