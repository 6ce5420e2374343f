"""AppTest for app.py and the Equivalence page: every widget moved, the checks read off the page."""

import dataclasses

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from mechlib import equivalence
from mechlib.checks import Check
from tests.app.helpers import open_page, shown_checks

TOLERANCE = {"float32": 1e-5, "float64": 1e-10}
REAL_RUN = equivalence.run


@pytest.fixture
def app() -> AppTest:
    return open_page("app_pages/equivalence.py")


def assert_checks_pass(at: AppTest, one_hot: int = 2) -> None:
    """Every check line passes: the two readings (float32, then float64) with their own tolerances, ``one_hot``
    embedding lookups, the W_O row blocks and the chosen position, in the dtype of the run."""
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    shown = shown_checks(at)
    assert len(shown) == 2 + one_hot + 2, shown
    for (difference, _, tolerance, _), dtype in zip(shown, TOLERANCE):
        assert tolerance == TOLERANCE[dtype] and difference <= tolerance * 100, (dtype, difference)  # |ref| < 100 here
    for difference, scaled, tolerance, passed in shown:
        assert passed and scaled <= tolerance and scaled <= difference  # scaled by max(1, |reference|) ≥ 1
    assert not any("FAIL" in m.value for m in at.markdown)


def test_defaults_are_the_seed_sizes(app):
    assert [app.slider(key=k).value for k in ("B", "S", "V", "D")] == [1, 20, 50_000, 512]
    assert app.select_slider(key="H").value == 8
    assert_checks_pass(app)
    table = app.table[0].value
    assert table.loc["1", "shape"] == "1 × 20 × 50,000"
    assert table.loc["8b", "shape"] == "1 × 20 × 8 × 512"
    # The row-block check compares the matrix concat_then_project multiplies with the per-head blocks.
    block = next(m.value for m in app.markdown if m.value.startswith("Row **70** belongs to head **70 // 64 = 1**"))
    assert "per-head path uses: max |difference| **0.0e+00**" in block and ":green[**✓ pass**]" in block
    # Both one-hot checks ran, exactly, in their own precision.
    assert sum(m.value.startswith("One-hot @ W_E against W_E[tokens] in float") for m in app.markdown) == 2
    assert shown_checks(app)[2:4] == [(0.0, 0.0, 1e-5, True), (0.0, 0.0, 1e-10, True)]


@pytest.mark.parametrize("key, value", [("B", 3), ("S", 7), ("V", 300), ("D", 96), ("pos", 0), ("row", 511)])
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
    assert [tolerance for _, _, tolerance, _ in shown_checks(app)[-2:]] == [1e-5, 1e-5]
    app.radio(key="dtype").set_value("float64").run()
    assert_checks_pass(app)
    assert [tolerance for _, _, tolerance, _ in shown_checks(app)[-2:]] == [1e-10, 1e-10]  # W_O blocks, one position
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


def run_with_a_wrong_float64_sum(*args) -> equivalence.EquivalenceResult:
    """The real run, but its float64 readings differ by 3e-7: far past float64's tolerance."""
    result = REAL_RUN(*args)
    return dataclasses.replace(result, checks=result.checks | {"float64": Check(3e-7, 2e-7, 1e-10)})


def test_a_failing_check_is_shown_red(monkeypatch, fresh_cache):
    monkeypatch.setattr(equivalence, "run", run_with_a_wrong_float64_sum)
    at = open_page("app_pages/equivalence.py")
    assert not at.exception and not at.error
    shown = shown_checks(at)
    assert len(shown) == 6 and shown[1] == (3e-7, 2e-7, 1e-10, False) and all(passed for *_, passed in shown[:1] + shown[2:])
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
    assert '"d_mlp": 512' in app.session_state["model_choice"][1]


def test_sidebar_refuses_a_memory_busting_model_and_keeps_the_previous(app):
    app.sidebar.selectbox(key="model").set_value("random").run()
    app.sidebar.select_slider(key="d_model").set_value(1024).run()
    app.sidebar.select_slider(key="heads").set_value(16).run()
    app.sidebar.number_input(key="vocab").set_value(50_000).run()
    app.sidebar.slider(key="layers").set_value(4).run()
    previous = app.session_state["model_choice"]
    app.sidebar.number_input(key="ctx").set_value(2048).run()
    assert not app.exception
    assert any("above this server's budget" in e.value and "would need about" in e.value and " MB" in e.value
               and "previous model stays selected" in e.value for e in app.sidebar.error)
    assert app.session_state["model_choice"] == previous
    assert [passed for *_, passed in shown_checks(app)] == [True] * 6  # the page itself still works


def test_sidebar_checkpoint_upload_selects_a_good_file_and_refuses_a_bad_one(app, tmp_path):
    from mechlib import io
    from mechlib.config import ModelConfig
    from mechlib.model import Transformer

    path = tmp_path / "mine.safetensors"
    io.save(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=30, n_ctx=8, seed=4)), path)
    app.sidebar.file_uploader[0].upload("mine.safetensors", path.read_bytes()).run()
    assert not app.exception and app.session_state["model"] == "uploaded: mine.safetensors"
    assert any("1 layers × 2 heads" in c.value for c in app.sidebar.caption)
    app.sidebar.file_uploader[0].upload("evil.safetensors", b"\x80\x04\x95 pickle").run()
    assert any("evil.safetensors: this looks like a pickle" in e.value and "previous model stays selected" in e.value
               for e in app.sidebar.error)
    assert app.session_state["model"] == "uploaded: mine.safetensors"
