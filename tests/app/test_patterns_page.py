"""AppTest for the Patterns and messages page: every widget moved, every check read off the page."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.helpers import open_page

CHECK = re.compile(r"max \|difference\| \*\*([-+.e\d]+)\*\* — :(green|red)\[\*\*(✓ pass|✗ FAIL)\*\*\] "
                   r"\(scaled ≤ ([-+.e\d]+)\)")


def page(**state) -> AppTest:
    return open_page("app_pages/patterns.py", **state)


def text(at: AppTest) -> str:
    return " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)


def checks_pass(at: AppTest) -> None:
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    shown = [(float(d), mark == "✓ pass", float(t)) for md in at.markdown for d, _, mark, t in CHECK.findall(md.value)]
    assert [t for *_, t in shown] == [1e-10, 1e-10, 1e-5, 1e-5]  # non-uniqueness (float64), scores, messages (float32)
    assert all(passed and d <= 10 * t for d, passed, t in shown), shown
    assert float(at.metric[0].value) <= 1e-4                       # regrouping
    assert "FAIL" not in text(at) and "✗" not in text(at)


def test_defaults_on_the_default_zoo_model():
    at = page()
    checks_pass(at)
    assert at.session_state["model"] == "gelu-2l"
    assert text(at).count("rank 32 ≤ 32 :green[**✓ rank ≤ d_head**]") == 2  # d_head 32: W_QK and W_OV


@pytest.mark.parametrize("key, value", [("layer", 0), ("head", 3), ("dest", 4)])
def test_each_slider_moves(key, value):
    at = page()
    at.slider(key=key).set_value(value).run()
    checks_pass(at)
    assert at.slider(key=key).value == value


def test_random_tokens_and_a_long_prompt():
    at = page()
    at.radio(key="input").set_value("random tokens").run()
    checks_pass(at)
    at.radio(key="input").set_value("prompt").run()
    at.text_input(key="prompt").set_value("the value of the name is " * 20).run()
    checks_pass(at)
    assert any("this model reads at most 64" in i.value for i in at.info)


@pytest.mark.parametrize("model", ["attn-only-2l", "attn-only-1l", "random"])
def test_other_models(model):
    at = page(model=model)
    checks_pass(at)


def test_shortformer_note_only_where_positions_skip_the_stream():
    assert "Shortformer: the positional embedding is added to the queries' and keys' input only" in text(page(model="attn-only-2l"))
    assert "Shortformer" not in text(page())


def test_one_head_rank_is_vacuous_not_a_pass():
    at = page(model="random", heads=1)  # d_model 64, one head: d_head = d_model
    assert not at.exception and not at.error
    assert text(at).count("With one head d_head = d_model = 64, so rank ≤ d_head holds for any matrix: nothing to check") == 2
    assert "rank ≤ d_head**]" not in text(at)


def test_zero_layer_model_explains_itself():
    at = page(model="attn-only-0l")
    assert any("no attention layers" in i.value for i in at.info)
