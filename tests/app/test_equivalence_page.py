"""AppTest for app.py and the Equivalence page: every widget moved, the checks read off the page."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.helpers import open_page

TOLERANCE = {"float32": 1e-5, "float64": 1e-10}


@pytest.fixture
def app() -> AppTest:
    return open_page("app_pages/equivalence.py")


def shown_differences(at: AppTest) -> dict[str, float]:
    """The max |difference| metrics the page shows, by precision."""
    found = {}
    for metric in at.metric:
        match = re.fullmatch(r"max \|difference\|, (float32|float64)", metric.label)
        if match:
            found[match.group(1)] = float(metric.value)
    return found


def assert_checks_pass(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    differences = shown_differences(at)
    assert set(differences) == {"float32", "float64"}
    for dtype, value in differences.items():
        assert value <= TOLERANCE[dtype] * 100, (dtype, value)  # |ref| here stays below 100
    assert not any("FAIL" in c.value for c in at.caption)
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
    assert "max |difference| **0.0e+00**" in block and "✓ every row in its block" in block
    # Both one-hot checks ran and passed.
    assert sum(m.value.startswith(("float32: max |difference|", "float64: max |difference|")) and "pass" in m.value
               for m in app.markdown) == 2


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
    app.radio(key="dtype").set_value("float64").run()
    assert_checks_pass(app)
    times = [m.value for m in app.metric if m.label.endswith("float64") and "→" in m.label]
    assert len(times) == 2 and all(t.endswith(" ms") for t in times)


def test_large_one_hot_is_skipped_with_a_reason(app):
    app.slider(key="D").set_value(1024).run()
    app.slider(key="B").set_value(8).run()
    app.slider(key="S").set_value(128).run()
    assert_checks_pass(app)
    assert any(i.value.startswith("float64: skipped") and "Only the lookup W_E[tokens] ran" in i.value for i in app.info)


def test_sidebar_seed_changes_the_numbers(app):
    before = [m.value for m in app.metric]
    app.sidebar.number_input(key="seed").set_value(7).run()
    assert_checks_pass(app)
    assert [m.value for m in app.metric] != before


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
    assert len(shown_differences(app)) == 2  # the page itself still works


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
