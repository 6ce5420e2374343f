"""The LSTM analogy's experiments: sizes from the models, checks that can fail, verdicts that read the numbers."""

import numpy as np
import pytest
import torch

from mechlib import analogy, zoo
from mechlib.checks import LOSS_TIE, TOLERANCE
from mechlib.lstm import LSTM, LSTMConfig

TRANSFORMER, RNN = analogy.NAMES[analogy.TRANSFORMER], analogy.NAMES[analogy.RNN]


def test_sizes_are_the_models_own_parameter_counts_and_context():
    pair = analogy.pair()
    rnn, transformer = zoo.load(analogy.RNN), zoo.load(analogy.TRANSFORMER)
    assert pair.rnn_params == sum(p.numel() for p in rnn.parameters())
    assert pair.transformer_params == sum(p.numel() for p in transformer.parameters())
    assert pair.n_ctx == min(rnn.cfg.n_ctx, transformer.cfg.n_ctx) == 48
    assert pair.max_segment == 23 and pair.test_segment == 20


@pytest.mark.parametrize("layers", [1, 2])
def test_lstm_config_counts_its_parameters(layers):
    cfg = LSTMConfig(d_vocab=30, d_model=12, d_hidden=16, n_layers=layers)
    assert cfg.n_params() == sum(p.numel() for p in LSTM(cfg).parameters())


def test_prompt_is_cut_to_the_models_context():
    prompt = analogy.prompt("x" * 80)
    assert len(prompt.ids) == analogy.pair().n_ctx and prompt.full_length == 81 and prompt.ids[0] == 0
    assert analogy.repeated_ids(5, 0)[1:6] == analogy.repeated_ids(5, 0)[6:]


def test_rank_reads_the_losses_and_flips_when_they_swap():
    ranked = analogy.rank({"a": 1.0, "b": 2.5})
    assert (ranked.better, ranked.worse, ranked.margin, ranked.tie) == ("a", "b", 1.5, False)
    swapped = analogy.rank({"a": 2.5, "b": 1.0})
    assert (swapped.better, swapped.worse, swapped.margin) == ("b", "a", 1.5)
    assert analogy.rank({"a": 1.0, "b": 1.0 + LOSS_TIE / 2}).tie


def test_the_shipped_models_verdicts():
    test = analogy.separating_test(20, 0)
    assert (test.repeat.better, test.repeat.worse, test.repeat.tie) == (TRANSFORMER, RNN, False)
    assert test.transformer_wins
    assert test.repeat.margin == pytest.approx(test.second_repeat[RNN] - test.second_repeat[TRANSFORMER])
    assert test.second_repeat[TRANSFORMER] < 0.5 < 4.0 < test.second_repeat[RNN]
    assert test.reduction[TRANSFORMER] > 0.9 and abs(test.reduction[RNN]) < 0.1
    assert test.losses[TRANSFORMER].shape == (40,) and len(test.labels) == 41
    text = analogy.heldout()
    assert (text.text.better, text.text.worse) == (RNN, TRANSFORMER)
    assert text.text.margin == pytest.approx(text.losses[TRANSFORMER] - text.losses[RNN]) and text.text.margin > 0.1


@torch.inference_mode()
def test_cell_check_passes_on_the_forward_pass_and_fails_on_a_changed_cell():
    rnn = zoo.load(analogy.RNN)
    _, states = rnn.run_with_states(torch.tensor([analogy.repeated_ids(12, 0)]))
    assert analogy.cell_check(states, TOLERANCE["float32"]).passed
    bumped = dict(states, **{"L0.cell": states["L0.cell"] + 1e-3})
    check = analogy.cell_check(bumped, TOLERANCE["float32"])
    assert not check.passed and check.max_abs_diff == pytest.approx(1e-3, rel=1e-2)


def test_side_by_side_shapes_sums_and_cancelling_components():
    ids = analogy.repeated_ids(12, 0)
    view = analogy.side_by_side(ids)
    assert view.cell.shape == view.input_gate.shape == view.output_gate.shape == (160, 25)
    assert view.messages.shape == (4, 25) and view.patterns.shape == (2, 4, 25, 25) and view.depth.shape == (3, 25)
    assert view.cell_check.passed and view.resid_check.passed
    # Projected on its own direction, the sum of the parts is the whole's length.
    assert view.step_shares.sum() == pytest.approx(view.cell_norm, rel=1e-4)
    assert view.component_shares.sum() == pytest.approx(view.resid_norm, rel=1e-4)
    negative = view.component_shares < 0
    assert view.cancelling == [label for label, n in zip(view.component_labels, negative) if n]
    assert view.cancelled == pytest.approx(view.component_shares[negative].sum()) and view.cancelled < 0
    assert len(view.cancelling) >= 1  # layers do cancel: "nothing is ever erased" would be false here
    assert view.forget_median == pytest.approx(np.median(view.forget), abs=1e-6)
    assert view.forget_open_share == pytest.approx((view.forget > analogy.FORGET_OPEN).mean())


@pytest.mark.parametrize("value, expected", [(0.0, "under half"), (0.4999, "under half"), (0.5, "half to 90 %"),
                                             (0.8999, "half to 90 %"), (0.9, "90 % or more"), (1.0, "90 % or more")])
def test_band_names_the_band_below_whose_edge_the_value_lies(value, expected):
    assert analogy.band(value, analogy.SHED_BANDS) == expected


def test_bands_of_cancelling_components_are_counts():
    assert [analogy.band(n, analogy.CANCEL_BANDS) for n in range(7)] == [
        "none", "one or two", "one or two", "three or four", "three or four", "five or more", "five or more"]


@pytest.mark.parametrize("shares, expected", [([0.1, 0.2, 0.9], "the last step"), ([0.1, 0.9, 0.2], "the step before it"),
                                              ([0.9, 0.1, 0.2], "an earlier step"), ([0.5, 0.9, 0.1, 0.2], "an earlier step")])
def test_largest_step_counts_back_from_the_last(shares, expected):
    assert analogy.largest_step(np.array(shares)) == expected


def test_the_shipped_models_answers_change_with_the_segment_length():
    """The LSTM page's questions have answers that differ between segment lengths (the page's tests use these)."""
    shed = {length: analogy.band(analogy.separating_test(length, 0).reduction[TRANSFORMER], analogy.SHED_BANDS)
            for length in (6, 20)}
    assert shed == {6: "half to 90 %", 20: "90 % or more"}
    views = {length: analogy.side_by_side(analogy.repeated_ids(length, 0)) for length in (4, 7, 11, 12)}
    assert {n: analogy.largest_step(v.step_shares) for n, v in views.items() if n in (4, 7)} == {
        4: "the last step", 7: "an earlier step"}
    assert {n: analogy.band(len(v.cancelling), analogy.CANCEL_BANDS) for n, v in views.items() if n in (11, 12)} == {
        11: "one or two", 12: "five or more"}
