"""AppTest for the Patterns and messages page: every widget moved, every check read off the page."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.helpers import open_page


def page(**state) -> AppTest:
    return open_page("app_pages/patterns.py", **state)


def checks_pass(at: AppTest) -> None:
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    differences = [float(m) for md in at.markdown for m in re.findall(r"max \|difference\| \*\*([-+.e\d]+)\*\*", md.value)]
    assert len(differences) == 2 and all(d <= 1e-4 for d in differences)  # scores, messages (float32 models)
    assert float(at.metric[0].value) <= 1e-4                                 # regrouping
    text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert "FAIL" not in text and "✗" not in text


def test_defaults_on_the_default_zoo_model():
    at = page()
    checks_pass(at)
    assert at.session_state["model"] == "gelu-2l"
    assert any("rank 32 ≤ 32" in m.value for m in at.markdown)  # d_head 32: W_QK and W_OV


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


def test_zero_layer_model_explains_itself():
    at = page(model="attn-only-0l")
    assert any("no attention layers" in i.value for i in at.info)
