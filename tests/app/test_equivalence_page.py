"""AppTest for app.py and the Equivalence page: every widget moved, the checks read off the page."""

import dataclasses
import json
import re

import numpy as np
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from classroom import keys
from mechlib import equivalence
from mechlib.checks import Check
from mechlib.device import costs
from tests.app.helpers import open_exports, open_page, reveal, shown_checks

TOLERANCE = {"float32": 1e-5, "float64": 1e-10}
REAL_RUN = equivalence.run


@pytest.fixture
def app() -> AppTest:
    return open_page("app_pages/equivalence.py")


def assert_checks_pass(at: AppTest, one_hot: int = 2) -> None:
    """Every check line passes: the two readings (float32, then float64) with their own tolerances, ``one_hot``
    embedding lookups, the W_O row blocks, the chosen position and the chosen element R[i, j], in the dtype of the run."""
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    shown = shown_checks(at)
    assert len(shown) == 2 + one_hot + 3, shown
    for (difference, _, tolerance, _), dtype in zip(shown, TOLERANCE):
        assert tolerance == TOLERANCE[dtype] and difference <= tolerance * 100, (dtype, difference)  # |ref| < 100 here
    for difference, scaled, tolerance, passed in shown:
        assert passed and scaled <= tolerance and scaled <= difference  # scaled by max(1, |reference|) ≥ 1
    assert not any("FAIL" in m.value for m in at.markdown)


def test_defaults_are_the_seed_sizes(app):
    assert [app.slider(key=k).value for k in ("B", "S", "V", "D")] == [1, 20, 50_000, 512]
    assert app.select_slider(key="H").value == 8
    assert_checks_pass(app)
    table = app.dataframe[0].value.set_index("step")
    assert table.loc["1", "as the reading writes it"] == "1 × 20 × 50,000"
    assert table.loc["8′", "all heads"] == "1 × 20 × 8 × 512"
    # The row-block check compares the matrix concat_then_project multiplies with the per-head blocks.
    block = next(m.value for m in app.markdown if m.value.startswith("Row **70** belongs to head **70 // 64 = 1**"))
    assert "per-head path uses: max |difference| **0.0e+00**" in block and ":green[**✓ pass**]" in block
    # Both one-hot checks ran, exactly, in their own precision.
    assert sum(m.value.startswith("One-hot @ W_E against W_E[tokens] in float") for m in app.markdown) == 2
    assert shown_checks(app)[2:4] == [(0.0, 0.0, 1e-5, True), (0.0, 0.0, 1e-10, True)]


@pytest.mark.parametrize("key, value", [("B", 3), ("S", 7), ("V", 300), ("D", 96), ("pos", 0), ("row", 511), ("j", 511)])
def test_each_slider_moves_and_checks_still_pass(app, key, value):
    app.slider(key=key).set_value(value).run()
    assert app.slider(key=key).value == value
    assert_checks_pass(app)


def test_heads_follow_d_model_and_d_head_is_shown(app):
    app.select_slider(key="H").set_value(16).run()
    assert_checks_pass(app)
    assert any("d_head = D / H = 512 / 16 = **32**" in c.value for c in app.caption)
    app.slider(key="D").set_value(520).run()  # 16 does not divide 520: the nearest divisor is chosen
    assert app.select_slider(key="H").value == 13
    assert 520 % app.select_slider(key="H").value == 0
    assert_checks_pass(app)


def test_float64_run_and_timings_have_units(app):
    assert [tolerance for _, _, tolerance, _ in shown_checks(app)[-3:]] == [1e-5, 1e-5, 1e-5]
    app.radio(key="dtype").set_value("float64").run()
    assert_checks_pass(app)
    assert [tolerance for _, _, tolerance, _ in shown_checks(app)[-3:]] == [1e-10] * 3  # W_O blocks, position, R[i, j]
    times = [m.value for m in app.metric if m.label.endswith("float64") and "→" in m.label]
    assert len(times) == 2 and all(t.endswith(" ms") for t in times)


def test_large_one_hot_is_skipped_with_a_reason(app):
    app.slider(key="D").set_value(1024).run()
    app.slider(key="B").set_value(8).run()
    app.slider(key="S").set_value(128).run()
    assert_checks_pass(app, one_hot=0)
    assert sum(i.value.startswith(("float32: skipped", "float64: skipped")) and "Only the lookup W_E[tokens] ran" in i.value
               for i in app.info) == 2


def test_sidebar_seed_changes_the_numbers(app):
    before = shown_checks(app)
    app.sidebar.number_input(key="seed").set_value(7).run()
    assert_checks_pass(app)
    assert shown_checks(app) != before


@pytest.fixture
def fresh_cache():
    """The page caches ``equivalence.run``'s results by their arguments: a patched run must neither read nor leave one."""
    st.cache_data.clear()
    yield
    st.cache_data.clear()


@costs(equivalence.run.estimate_mb)  # the page states and holds the real run's cost
def run_with_a_wrong_float64_sum(*args) -> equivalence.EquivalenceResult:
    """The real run, but its float64 readings differ by 3e-7: far past float64's tolerance."""
    result = REAL_RUN(*args)
    return dataclasses.replace(result, checks=result.checks | {"float64": Check(3e-7, 2e-7, 1e-10)})


def test_a_failing_check_is_shown_red(monkeypatch, fresh_cache):
    monkeypatch.setattr(equivalence, "run", run_with_a_wrong_float64_sum)
    at = open_page("app_pages/equivalence.py")
    assert not at.exception and not at.error
    shown = shown_checks(at)
    assert len(shown) == 7 and shown[1] == (3e-7, 2e-7, 1e-10, False) and all(passed for *_, passed in shown[:1] + shown[2:])
    assert ("Σ heads against concat → W_O in float64, over all 1 × 20 × 512 entries (batch × position × d_model): "
            "max |difference| **3.0e-07**, scaled **2.0e-07** against a tolerance of **1e-10** · max(1, |reference|) — "
            ":red[**✗ FAIL**]") in [m.value for m in at.markdown]


def test_sidebar_random_model_sizes_are_described(app):
    app.sidebar.selectbox(key="model").set_value("random").run()
    assert any("2 layers × 4 heads" in c.value for c in app.sidebar.caption)
    app.sidebar.slider(key="layers").set_value(1).run()
    app.sidebar.select_slider(key="d_model").set_value(128).run()
    app.sidebar.select_slider(key="heads").set_value(8).run()
    app.sidebar.toggle(key="mlp").set_value(True).run()
    app.sidebar.toggle(key="ln").set_value(True).run()
    assert not app.exception and not app.error
    assert any("1 layers × 8 heads" in c.value and "MLP 512" in c.value for c in app.sidebar.caption)
    assert '"d_mlp": 512' in app.session_state[keys.MODEL_CHOICE].name


def test_sidebar_refuses_a_memory_busting_model_and_keeps_the_previous(app):
    app.sidebar.selectbox(key="model").set_value("random").run()
    app.sidebar.select_slider(key="d_model").set_value(1024).run()
    app.sidebar.select_slider(key="heads").set_value(16).run()
    app.sidebar.number_input(key="vocab").set_value(50_000).run()
    app.sidebar.slider(key="layers").set_value(4).run()
    previous = app.session_state[keys.MODEL_CHOICE]
    app.sidebar.number_input(key="ctx").set_value(2048).run()
    assert not app.exception
    assert any("above this server's budget" in e.value and "would need about" in e.value and " MB" in e.value
               and "previous model stays selected" in e.value for e in app.sidebar.error)
    assert app.session_state[keys.MODEL_CHOICE] == previous
    assert [passed for *_, passed in shown_checks(app)] == [True] * 7  # the page itself still works


def test_sidebar_checkpoint_upload_selects_a_good_file_and_refuses_a_bad_one(app, tmp_path):
    from mechlib import io
    from mechlib.config import ModelConfig
    from mechlib.model import Transformer

    path = tmp_path / "mine.safetensors"
    io.save(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=30, n_ctx=8, seed=4)), path)
    app.sidebar.file_uploader[0].upload("mine.safetensors", path.read_bytes()).run()
    assert not app.exception and re.fullmatch(r"uploaded [a-z2-7]{16}: mine\.safetensors", app.session_state["model"])
    mine = app.session_state["model"]  # the server's store keeps it under a short id
    assert any("1 layers × 2 heads" in c.value for c in app.sidebar.caption)
    app.sidebar.file_uploader[0].upload("evil.safetensors", b"\x80\x04\x95 pickle").run()
    assert any("evil.safetensors: this looks like a pickle" in e.value and "previous model stays selected" in e.value
               for e in app.sidebar.error)
    assert app.session_state["model"] == mine


# ---------------------------------------------------------------------------------------------------------------
# Seed 000's step table and its R₁,₁ argument; the questions, answered from the live run; presentation mode


def live_run(at: AppTest) -> equivalence.EquivalenceResult:
    """What mechlib computes for the page's current sizes, seed, precision and position."""
    sizes = [at.slider(key=k).value for k in ("B", "S", "V", "D")] + [at.select_slider(key="H").value]
    return REAL_RUN(*sizes, at.session_state["seed"], at.radio(key="dtype").value, at.slider(key="pos").value)


def test_step_table_is_the_readings_numbering_with_a_csv_export(app):
    table = app.dataframe[0].value
    assert table["step"].tolist() == ["1", "2", "3", "4", "5", "6", "6a", "7", "8", "9", "8′", "9′"]
    rows = table.set_index("step")
    assert rows.loc["4", "as the reading writes it"] == "1 × 20 × 512"        # the copy into Q, K, V
    assert rows.loc["5", "as the reading writes it"] == "1 × 1 × 20 × 64"     # one head's view
    assert rows.loc["8′", "as the reading writes it"] == "1 × 20 × 1 × 512"
    assert rows.loc["6a", "in the reading?"].startswith("no: added here")
    assert "steps (CSV)" in [b.label for b in open_exports(app).get("download_button")]


def test_the_element_section_takes_R_i_j_apart_per_head(app):
    app.slider(key="j").set_value(3).run()
    assert_checks_pass(app)
    element = equivalence.element(live_run(app), 5, 3)
    partial = app.dataframe[1].value
    assert partial["head"].tolist() == list(range(8)) and partial["k (its rows of W_O)"].iloc[1] == "64–127"
    assert np.array_equal(partial["partial sum of 64 terms"].to_numpy(), element.partial_sums)
    assert (f"Σ of the 8 partial sums = **{element.total:+.6f}**; R[5, 3] as the layer computed it (concat → W_O, "
            f"float32) = **{element.output:+.6f}**.") in [m.value for m in app.markdown]
    assert sum("Σ of the 8 partial sums against R[5, 3] from concat → W_O, in float32" in m.value
               for m in app.markdown) == 1
    terms = json.loads(app.get("plotly_chart")[-1].proto.spec)["data"]
    assert len(terms) == 8 and terms[7]["name"] == f"head 7: Σ = {element.partial_sums[7]:.4g}"
    assert any("An aside: heads as channels" in m.value for m in app.markdown)




def revealed_on_two_settings(key: str, change) -> list[tuple[str, str, equivalence.EquivalenceResult]]:
    """Question ``key`` revealed on the fresh page and after ``change(at)``, each with mechlib's run for it."""
    shown = []
    for changed in (False, True):
        at = open_page("app_pages/equivalence.py")
        if changed:
            change(at)
        shown.append((*reveal(at, key), live_run(at), at))
    assert shown[0][1] != shown[1][1]  # the revealed text follows the data
    return shown


def test_float_question_is_answered_by_the_live_check_in_each_precision():
    runs = revealed_on_two_settings("float", lambda at: at.radio(key="dtype").set_value("float64").run())
    for (answer, line, result, at), dtype in zip(runs, ("float32", "float64")):
        assert answer == equivalence.difference_bucket(result.checks[dtype].max_abs_diff)
        assert f"The largest |difference| in {dtype} is {result.checks[dtype].max_abs_diff:.1e}" in line
    assert [answer for answer, *_ in runs] == ["1e-10 to 1e-05", "below 1e-10"]


def test_one_hot_question_is_answered_by_the_live_lookup():
    runs = revealed_on_two_settings("one-hot", lambda at: at.slider(key="V").set_value(300).run())
    for answer, line, result, at in runs:
        assert answer == equivalence.difference_bucket(result.lookups["float32"].max_abs_diff) == "exactly equal"
    assert "adding 49,999 zeros" in runs[0][1] and "adding 299 zeros" in runs[1][1]


def test_row_question_names_the_block_of_the_chosen_row():
    runs = revealed_on_two_settings("row", lambda at: at.slider(key="row").set_value(130).run())
    assert [answer for answer, *_ in runs] == ["head 1, row 6", "head 2, row 2"]
    for answer, _, _, at in runs:
        assert answer == "head {}, row {}".format(*equivalence.wo_row_owner(at.slider(key="row").value, 64))
        assert answer in at.radio(key="predict row").options


def test_length_question_is_answered_from_the_heads_norms():
    runs = revealed_on_two_settings("length", lambda at: (at.select_slider(key="H").set_value(4).run(),
                                                          at.slider(key="S").set_value(6).run()))
    for answer, line, result, at in runs:
        total = float(np.linalg.norm(result.head_results.sum(0)))
        assert answer == equivalence.output_length(result.head_norms, total)
        assert f"‖Σ_h result_h‖ = {total:.3f}." in line


def test_largest_partial_sum_question_follows_the_element():
    runs = revealed_on_two_settings("largest", lambda at: at.slider(key="j").set_value(1).run())
    answers = [answer for answer, *_ in runs]
    assert answers[0] != answers[1]
    for (answer, line, result, at), j in zip(runs, (0, 1)):
        assert answer == f"head {equivalence.largest_partial(equivalence.element(result, 5, j).partial_sums)}"
        assert f"R[5, {j}] = {equivalence.element(result, 5, j).output:+.4f}." in line


@pytest.mark.parametrize("n_heads", [8, 4])
def test_step_6_exercise_is_checked_against_the_live_table(app, n_heads):
    app.select_slider(key="H").set_value(n_heads).run()
    step6 = app.dataframe[0].value.set_index("step").loc["6", "all heads"]
    assert step6 == f"1 × {n_heads} × 20 × 20"
    options = app.selectbox(key="exercise step 6").options
    assert options == equivalence.scores_shape_options(1, 20, 512, n_heads) and step6 in options
    app.selectbox(key="exercise step 6").set_value("1 × 1 × 20 × 20").run()  # the reading's one-head view: wrong
    assert any(m.value == ":red[**✗ not this one: try again**]" for m in app.markdown)
    app.selectbox(key="exercise step 6").set_value(step6).run()
    assert any(m.value == ":green[**✓ right**]" for m in app.markdown)
    app.button(key="reveal button step 6").click().run()
    assert any(m.value.startswith(f"**{step6}**. Each head multiplies its Q") for m in app.markdown)


def test_presentation_mode_shows_one_section_and_next_moves_on():
    at = open_page("app_pages/equivalence.py", present=True)
    assert not at.exception and [s.value for s in at.subheader] == ["The steps, with the shapes of your sizes"]
    assert any(e.label == "Notes" for e in at.expander)  # the prose folds away
    next(b for b in at.button if b.label == "Next").click().run()
    assert not at.exception and [s.value for s in at.subheader] == ["Both readings on the same weights"]


def test_outside_presentation_mode_the_address_drops_a_part_left_in_it():
    """A part in the address means something only in presentation mode. A teacher who left it and opened another
    page at once could leave one there, unbound, and the teacher's and a follower's views then differed for good
    (``slides._forget_part``)."""
    at = open_page("app_pages/equivalence.py")
    at.query_params["part"] = "Both readings on the same weights"
    at.run()
    assert not at.exception and "part" not in at.query_params


def test_each_size_of_the_run_is_timed_so_the_next_size_states_its_time(app):
    """The run builds its own layer: it is timed under its arguments, so runs at other sizes add up to the rate
    that scales the next one's expected time (``timings``)."""
    from classroom import timings

    app.slider(key="S").set_value(40).run()
    app.slider(key="S").set_value(60).run()
    timed = [key for name, key in timings._last if name == "mechlib.equivalence.run"]
    assert {key[1] for key in timed} >= {20, 40, 60}  # (batch, seq, …): three sequence lengths, three entries
    assert timings.expected("mechlib.equivalence.run", None, 100.0).endswith(f"from its last {len(timed)} runs here")


def test_a_run_over_the_budget_is_refused_before_it_starts_naming_the_layer(monkeypatch, fresh_cache):
    monkeypatch.setenv("MECHLIB_MEMORY_BUDGET_MB", "50")  # the seed sizes' W_E alone is 102 MB
    at = open_page("app_pages/equivalence.py")
    assert [e.value for e in at.error] == [
        f"this attention layer would need about {equivalence.peak_mb(1, 20, 50_000, 512, 8, 50):,.0f} MB, above "
        "this server's budget of 50 MB per request; choose smaller sizes."]  # its one-hot checks left out: 117 MB
