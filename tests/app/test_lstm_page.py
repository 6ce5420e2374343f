"""AppTest for the LSTM analogy page: every widget moved, the decompositions checked against their shown
tolerance, the sizes and conclusions read from the models and the table."""

import base64
import dataclasses
import json
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mechlib import analogy, checks, copying, zoo
from mechlib.checks import LOSS_TIE, Check
from mechlib.device import costs
from tests.app.helpers import APP, next_part, open_page, reveal, shown_checks

TRANSFORMER, LSTM = analogy.NAMES[analogy.TRANSFORMER], analogy.NAMES[analogy.RNN]
REAL = {"side_by_side": analogy.side_by_side, "separating_test": analogy.separating_test, "heldout": analogy.heldout,
        "controls": copying.controls}


def page(**state) -> AppTest:
    return open_page("app_pages/lstm.py", **state)


def text_of(at: AppTest) -> str:
    """Every markdown's text, the glossary's tooltips (<abbr title="…">term</abbr>) read as their term."""
    return re.sub(r'<abbr title="[^"]*">([^<]*)</abbr>', r"\1", " ".join(md.value for md in at.markdown))


def assert_checks_hold(at: AppTest) -> None:
    shown = shown_checks(at)
    assert len(shown) == 2
    for difference, scaled, tolerance, passed in shown:
        assert passed == (scaled <= tolerance)   # the badge follows the numbers it shows
        assert difference >= scaled and passed   # and on the shipped models every check passes
    assert not any("FAIL" in md.value or "✗" in md.value for md in at.markdown)


def chart(at: AppTest, title: str) -> dict:
    specs = [json.loads(c.proto.spec)["layout"] for c in at.get("plotly_chart")]
    return next(s for s in specs if s["title"]["text"].replace("<br>", " ").startswith(title))  # wrapped to fit


def test_defaults_show_the_analogy_and_both_decompositions():
    at = page()
    assert not at.exception and not at.error
    assert_checks_hold(at)
    assert list(at.table[0].value.index) == ["cell state c_t", "input gate i_t", "output gate o_t"]
    assert len(at.table[1].value) == 4  # where the analogy breaks
    assert "nothing is ever erased" not in at.table[1].value.to_string()
    cancelling = next(md.value for md in at.markdown if "components write against x̂_final" in md.value)
    assert re.search(r"Here \d+ of \d+ components", cancelling) and "**-" in cancelling


def test_parameter_counts_are_the_models_own():
    intro = text_of(page())
    for name in ("lstm", "attn-only-2l"):
        assert f"`{name}` with {sum(p.numel() for p in zoo.load(name).parameters()):,}" in intro


def test_axes_name_heads_and_time_steps():
    at = page()
    assert chart(at, "‖message‖ each last-layer head")["yaxis"]["title"]["text"] == "head"
    assert chart(at, "What each step left in the final cell")["xaxis"]["title"]["text"] == "time step: token"


def test_conclusions_read_the_table():
    at = page()
    table = at.dataframe[0].value.set_index("model")
    text = text_of(at)
    repeat = table["second occurrence (nats)"].idxmin()
    held_out = table["held-out text (nats per character)"].idxmin()
    assert f"On the second occurrence the {repeat} predicts better" in text
    assert f"On ordinary held-out text the {held_out} predicts better" in text
    assert repeat == "transformer (attn-only-2l)" and held_out == "LSTM"  # the shipped models


# The page caches each experiment by the function's source, so every stand-in below is its own function; each
# declares the real experiment's cost, which the page states and holds.


@costs(analogy.side_by_side.estimate_mb)
def side_by_side_with_a_wrong_cell(ids):
    """The real experiment, but the cell decomposition misses the final cell state by 0.5."""
    return dataclasses.replace(REAL["side_by_side"](ids), cell_check=Check(0.5, 0.5, 1e-5))


@costs(analogy.separating_test.estimate_mb)
def separating_test_lstm_wins(length, seed):
    """The real test with the second occurrence's losses swapped: the LSTM predicts the repeat better."""
    real = REAL["separating_test"](length, seed)
    second = {TRANSFORMER: real.second_repeat[LSTM], LSTM: real.second_repeat[TRANSFORMER]}
    repeat = analogy.rank(second)
    return dataclasses.replace(real, second_repeat=second, repeat=repeat,
                               transformer_wins=repeat.better == TRANSFORMER and not repeat.tie)


@costs(analogy.separating_test.estimate_mb)
def separating_test_tie(length, seed):
    """The real test with both models' second-occurrence losses within LOSS_TIE of each other."""
    real = REAL["separating_test"](length, seed)
    second = {TRANSFORMER: 2.0, LSTM: 2.0 + LOSS_TIE / 2}
    return dataclasses.replace(real, second_repeat=second, repeat=analogy.rank(second), transformer_wins=False)


@costs(analogy.heldout.estimate_mb)
def heldout_tie():
    losses = {TRANSFORMER: 1.5, LSTM: 1.5 - LOSS_TIE / 2}
    return analogy.Heldout(losses, analogy.rank(losses))


@costs(analogy.heldout.estimate_mb)
def heldout_transformer_wins():
    losses = {TRANSFORMER: 1.2, LSTM: 1.7}
    return analogy.Heldout(losses, analogy.rank(losses))


def test_a_failing_check_is_shown_red(monkeypatch):
    monkeypatch.setattr(analogy, "side_by_side", side_by_side_with_a_wrong_cell)
    at = page()
    assert not at.exception and not at.error
    cell, resid = shown_checks(at)
    assert cell == (0.5, 0.5, 1e-5, False) and resid[3]
    assert ("The steps' contributions (Π f) ⊙ i ⊙ g against the final cell state: max |difference| **5.0e-01**, "
            "scaled **5.0e-01** against a tolerance of **1e-05** · max(1, |reference|) — :red[**✗ FAIL**]") in text_of(at)


@pytest.mark.parametrize("repeat, held_out, expected", [
    (separating_test_lstm_wins, heldout_tie, [
        f"On the second occurrence the {LSTM} predicts better:",
        "Here the transformer does not use the earlier copy to beat the LSTM on the repeat.",
        f"On ordinary held-out text neither model predicts better: their losses are within {LOSS_TIE} nats per character."]),
    (separating_test_tie, heldout_transformer_wins, [
        f"On the second occurrence neither model predicts better: their losses are within {LOSS_TIE} nats.",
        "Here the transformer does not use the earlier copy to beat the LSTM on the repeat.",
        f"On ordinary held-out text the {TRANSFORMER} predicts better: 1.200 against 1.700 nats per character, 0.50 lower."]),
])
def test_conclusions_follow_each_ranking(repeat, held_out, expected, monkeypatch):
    monkeypatch.setattr(analogy, "separating_test", repeat)
    monkeypatch.setattr(analogy, "heldout", held_out)
    at = page()
    assert not at.exception and not at.error
    for sentence in expected:
        assert sentence in text_of(at), sentence
    assert "An induction head can look up" not in text_of(at)
    table = at.dataframe[0].value.set_index("model")
    assert table["held-out text (nats per character)"].to_dict() == pytest.approx(held_out().losses, abs=1e-3)


def test_the_separating_test_and_every_widget():
    at = page()
    table = at.dataframe[0].value.set_index("model")
    assert table.loc["transformer (attn-only-2l)", "second occurrence (nats)"] < 1.0
    assert table.loc["LSTM", "second occurrence (nats)"] > 3.0
    at.slider(key="l_test").set_value(8).run()
    assert not at.exception and at.dataframe[0].value.set_index("model").loc["LSTM", "second occurrence (nats)"] > 3.0
    assert at.slider(key="l_test").max == zoo.load("attn-only-2l").cfg.n_ctx // 2 - 1
    at.slider(key="l_seg").set_value(6).run()
    assert not at.exception
    assert_checks_hold(at)
    at.radio(key="l_input").set_value("prompt").run()
    at.text_input(key="l_prompt").set_value("x" * 80).run()
    assert not at.exception and any("only the first 48 are used" in i.value for i in at.info)
    assert_checks_hold(at)


def test_the_start_page_says_this_page_runs_on_its_own_models():
    """The start page used to say every check ran "on the model you chose": not so here."""
    at = open_page("app_pages/home.py")
    line = next(c.value for c in at.caption if c.value.startswith("the LSTM analogy"))
    assert line.endswith("Runs on two zoo models trained on the same data, `lstm` and `attn-only-2l`, and on the "
                         "copying task's `copying-2l`, `copying-1l`, `copying-lstm`; the sidebar's model is not used.")
    assert "the model you chose" not in at.markdown[0].value


@costs(copying.controls.estimate_mb)
def controls_in_other_roles(seed):
    """The shipped copying models in other roles (the LSTM where the two-layer model was, and so on): every verdict
    of the controls comes out the other way."""
    shipped = {role: zoo.load(name) for role, name in copying.CONTROLS.items()}
    return copying.controls_of({"two layers": shipped["LSTM"], "one layer": shipped["two layers"],
                                "LSTM": shipped["one layer"]}, seed)


def test_the_controls_section_draws_and_states_the_computed_controls():
    at = page()
    c = REAL["controls"](0)  # the sidebar's seed
    figure = json.loads(next(ch.proto.spec for ch in at.get("plotly_chart")
                             if json.loads(ch.proto.spec)["layout"]["title"]["text"].startswith("Loss by position")))
    assert "nats" in figure["layout"]["yaxis"]["title"]["text"]
    drawn = {t["name"].split(" (")[0]: t["y"] for t in figure["data"] if " parameters)" in t["name"]}
    assert drawn.keys() == c.losses.keys()
    for role, values in c.losses.items():
        y = drawn[role]  # plotly sends a numpy array as base64 bytes
        assert np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"]) == pytest.approx(values, abs=1e-6)
    text = text_of(at)
    s = c.second_copy
    assert (f"On the second copy: two layers **{s['two layers']:.2f}** nats, one layer **{s['one layer']:.2f}**, "
            f"the LSTM **{s['LSTM']:.2f}**. Each control is at least {checks.GAP_MIN} nats worse") in text
    assert f"The LSTM stays within {checks.NOTHING_MARGIN} nats of ln 512 = 6.24" in text
    assert f"The one-layer model stays within {checks.EARLIER_MARGIN} nats of {c.earlier:.2f}" in text
    assert f"(`copying-lstm`, {zoo.load('copying-lstm').cfg.n_params():,})" in text


def test_the_controls_sentences_follow_the_verdicts(monkeypatch):
    monkeypatch.setattr(copying, "controls", controls_in_other_roles)
    at = page()
    assert not at.exception and not at.error
    text = text_of(at)
    assert f"Here they do not rise by {checks.GAP_MIN} nats or more from two layers to one layer to the LSTM." in text
    assert f"The LSTM is more than {checks.NOTHING_MARGIN} nats from ln 512 = 6.24" in text
    assert f"The one-layer model is more than {checks.EARLIER_MARGIN} nats from" in text
    assert "Each control is at least" not in text and "stays within" not in text


def test_a_link_sets_the_widgets_and_each_is_drawn_with_a_fresh_sessions_default():
    """Streamlit leaves a bound value out of the link when it equals the widget's default, so each widget's
    default must be what a fresh session shows (12, not the slider's minimum 4, which a link must keep)."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.switch_page("app_pages/lstm.py")
    at.query_params.update({"l_input": "prompt", "l_prompt": "abcabc", "l_test": "4"})
    at.run()
    assert not at.exception, at.exception
    assert at.radio(key="l_input").value == "prompt" and at.text_input(key="l_prompt").value == "abcabc"
    assert at.slider(key="l_test").value == 4 and at.slider(key="l_test").proto.default == [analogy.pair().test_segment]
    assert at.radio(key="l_input").proto.default == 0  # "repeated random sequence"
    at.radio(key="l_input").set_value("repeated random sequence").run()
    assert at.slider(key="l_seg").value == 12 and at.slider(key="l_seg").proto.default == [12]


# Questions: each revealed on two settings where mechlib's answers differ.




def view(length: int) -> analogy.SideBySide:
    return analogy.side_by_side(analogy.repeated_ids(length, 0))


def largest_step(state: dict) -> str:
    return analogy.largest_step(view(state["l_seg"]).step_shares)


def cancelling(state: dict) -> str:
    return analogy.band(len(view(state["l_seg"]).cancelling), analogy.CANCEL_BANDS)


def shed(state: dict) -> str:
    return analogy.band(analogy.separating_test(state["l_test"], 0).reduction[TRANSFORMER], analogy.SHED_BANDS)


@pytest.mark.parametrize("key, settings, expected", [
    ("largest step", [{"l_seg": 4}, {"l_seg": 7}], largest_step),
    ("cancelling", [{"l_seg": 11}, {"l_seg": 12}], cancelling),
    ("shed", [{"l_test": 6}, {"l_test": 20}], shed),
])
def test_each_question_reveals_the_live_answer(key, settings, expected):
    answers = [reveal(page(**state), key)[0] for state in settings]
    assert answers == [expected(state) for state in settings]
    assert len(set(answers)) == 2, answers


def test_the_controls_question_reveals_the_lowest_second_copy_loss(monkeypatch):
    answers = [reveal(page(), "controls")[0]]
    monkeypatch.setattr(copying, "controls", controls_in_other_roles)
    answers.append(reveal(page(), "controls")[0])
    lowest = [min(c.second_copy, key=c.second_copy.get) for c in (REAL["controls"](0), controls_in_other_roles(0))]
    assert answers == lowest == ["two layers", "one layer"]  # the two-layer model sits in the "one layer" role


def test_a_prediction_is_marked_against_the_answer():
    at = page(l_seg=4)
    at.radio(key="predict largest step").set_value("an earlier step").run()
    at.button(key="reveal button largest step").click().run()
    assert ("This run: **the last step** :red[**✗ not what you predicted**]. Step 8 ('") in text_of(at)
    at.radio(key="predict largest step").set_value("the last step").run()
    assert "This run: **the last step** :green[**✓ as you predicted**]" in text_of(at)


def test_presentation_mode_shows_one_section_and_next_moves_on():
    at = page(present=True)
    assert not at.exception
    assert [h.value for h in at.subheader] == ["Memory carried forward: the cell state and the residual stream"]
    assert "Notes" in [e.label for e in at.expander]  # the intro's prose folds away
    assert next_part(at) == ["part 1 of 7 · slide 1 of 2", "part 1 of 7 · slide 2 of 2"]  # one chart a slide
    assert [h.value for h in at.subheader] == ["What to take in: the input gate and the attention patterns"]
