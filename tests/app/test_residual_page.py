"""AppTest for the Residual stream page: the ledger balances against a separate forward pass, the lens ends at
the model's logits, DLA adds up, and the subspace sentence follows the computed verdict."""

import pytest
from streamlit.testing.v1 import AppTest

from mechlib.config import ModelConfig
from mechlib.model import Transformer
from tests.app.helpers import open_page, open_page_with_model, shown_checks


def page(**state) -> AppTest:
    return open_page("app_pages/residual.py", **state)


def text(at: AppTest) -> str:
    return " ".join(m.value for m in at.markdown)


def checks_pass(at: AppTest, expected: int = 4) -> None:
    """Ledger against the logits and (with blocks) the residual, lens, DLA: each passes within its shown tolerance."""
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    shown = shown_checks(at)
    assert len(shown) == expected, shown
    assert all(passed and scaled <= t and d <= 10 * t for d, scaled, t, passed in shown), shown
    assert "FAIL" not in text(at)


def test_defaults_show_every_kind_of_term():
    at = page()
    checks_pass(at)
    terms = at.dataframe[0].value["term"].tolist()
    assert terms[:2] == ["embed", "pos_embed"] and "L1 MLP" in terms and "L1 MLP bias" in terms and "L0 attn bias" in terms
    assert "read through the final LayerNorm and W_U, against the logits of a separate forward pass" in text(at)
    assert "against a tolerance of **1e-05**" in text(at)  # gelu-2l is float32: the tolerance is the model's
    assert "Through LayerNorm each term is divided by the scale" in text(at)


def test_subspace_sentence_follows_the_verdict():
    at = page()  # gelu-2l: 8 heads of 32 dimensions in a 128-dimensional stream, overlapping like random ones
    assert any(h.value == "Do heads write to separate subspaces?" for h in at.subheader)
    assert "could write 256 dimensions, more than the stream's 128, so they cannot all be orthogonal" in text(at)
    assert "Random 32-dimensional subspaces overlap 0.250" in text(at) and "overlap **about random**" in text(at)
    # 256 dimensions in 128 force a mean overlap of (256/128 − 1) / 7: "not separate" is a count, not a finding
    assert ("every pair's overlap ≤ 0.01): impossible with these sizes: 8 heads writing 256 dimensions into 128 "
            "overlap 0.143 on average at the least, whatever their weights") in text(at)
    assert "**no**" not in text(at)
    at = page(model="attn-only-2l")  # its layer-0 heads share directions
    assert "overlap **above random**: they share directions more than chance would" in text(at)
    at = page(model="attn-only-1l")  # 4 heads × 32 = d_model: they could have been orthogonal, so "no" is a finding
    assert "every pair's overlap ≤ 0.01): **no**." in text(at) and "impossible" not in text(at)


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
    assert "minus that of" in at.get("plotly_chart")[-2].proto.spec
    at.radio(key="input").set_value("random tokens").run()
    checks_pass(at)


def test_without_layernorm_the_read_out_is_W_U_alone():
    at = page(model="attn-only-2l")
    checks_pass(at)
    assert "Without LayerNorm the read-out is linear" in text(at)
    assert "read through W_U (this model has no final LayerNorm)" in text(at) and "final LayerNorm and" not in text(at)


def test_zero_layer_model_is_checked_against_the_logits():
    at = page(model="attn-only-0l")
    checks_pass(at, expected=3)  # no residual after a last block: the ledger is checked against the logits only
    assert at.dataframe[0].value["term"].tolist() == ["embed"]  # shortformer: positions are not in the stream
    assert "only the logits are an independent reference" in text(at)
    assert any("Shortformer positions enter the queries and keys only" in c.value for c in at.caption)
    assert not any(h.value == "Do heads write to separate subspaces?" for h in at.subheader)


def test_one_head_has_no_pair_to_compare():
    at = page(model="random", layers=1, heads=1)
    checks_pass(at)
    assert "This model has one head: there is no pair to compare." in text(at)


@pytest.mark.parametrize("d_head", [16, 24])
def test_heads_as_wide_as_the_stream_have_nothing_to_compare(d_head):
    """d_head ≥ d_model: every head writes the whole stream, as a random subspace would. The old page called
    d_head = d_model "above random" and d_head > d_model "below random" (overlap 0.5 against 1.5)."""
    cfg = ModelConfig(n_layers=1, d_model=16, n_heads=2, d_head=d_head, d_vocab=40, n_ctx=12, seed=3)
    at = open_page_with_model("app_pages/residual.py", Transformer(cfg))
    checks_pass(at)
    assert (f"Nothing to compare here: with d_head = {d_head} ≥ d_model = 16 each head can write the whole stream, so "
            "every pair of heads overlaps completely (1), as every pair of random subspaces would.") in text(at)
    assert "random**" not in text(at) and "Separate subspaces" not in text(at)
    assert "rank ≤ min(d_head, d_model) = 16; together the 2 heads could write 32 dimensions" in text(at)


def test_a_prompt_of_mostly_unknown_words_gets_a_warning_and_a_known_one_does_not():
    at = page()
    assert not at.warning
    at.text_input(key="prompt").set_value("the xyzzy plugh frobnitz quux").run()
    assert not at.exception
    assert [w.value for w in at.warning] == ["80% of the prompt's tokens are <unk>: this model's vocabulary does not "
                                             "know them, so it reads them all as one token. Use words from Python's "
                                             "documentation."]
    at.text_input(key="prompt").set_value("the class of an object is its type").run()
    assert not at.warning


def test_the_start_page_says_this_page_runs_on_the_sidebars_model():
    at = open_page("app_pages/home.py")
    assert next(c.value for c in at.caption if c.value.startswith("every component reads")).endswith(
        "Runs on the model chosen in the sidebar.")
