"""AppTest for the Residual stream page: the ledger balances, the lens ends at the logits, DLA adds up."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.helpers import open_page


def page(**state) -> AppTest:
    return open_page("app_pages/residual.py", **state)


def checks_pass(at: AppTest, expected: int = 3) -> None:
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    differences = [float(m) for md in at.markdown for m in re.findall(r"max \|difference\| \*\*([-+.e\d]+)\*\*", md.value)]
    assert len(differences) == expected and all(d <= 1e-3 for d in differences), differences  # ledger, lens, DLA
    assert "FAIL" not in " ".join(m.value for m in at.markdown)


def test_defaults_show_every_kind_of_term():
    at = page()
    checks_pass(at)
    terms = at.dataframe[0].value["term"].tolist()
    assert terms[:2] == ["embed", "pos_embed"] and "L1 MLP" in terms and "L1 MLP bias" in terms and "L0 attn bias" in terms
    assert any("Through LayerNorm each term is divided by the scale" in m.value for m in at.markdown)
    assert any("two random 32-dimensional subspaces overlap **0.250**" in m.value for m in at.markdown)


def test_position_and_tokens_move():
    at = page()
    at.slider(key="rpos").set_value(3).run()
    checks_pass(at)
    options = at.selectbox(key="dla_token").options
    at.selectbox(key="dla_token").set_value(at.selectbox(key="dla_token").options[1]).run()
    checks_pass(at)
    assert len(options) == 10
    at.selectbox(key="dla_other").select_index(2).run()
    checks_pass(at)
    at.radio(key="input").set_value("random tokens").run()
    checks_pass(at)


def test_without_layernorm_the_shares_are_exact():
    at = page(model="attn-only-2l")
    checks_pass(at)
    assert any("Without LayerNorm the read-out is linear" in m.value for m in at.markdown)


def test_zero_layer_model_has_only_embeddings():
    at = page(model="attn-only-0l")
    checks_pass(at)
    assert at.dataframe[0].value["term"].tolist() == ["embed"]  # shortformer: positions are not in the stream
