"""AppTest for the Residual stream page: the ledger balances against a separate forward pass, the lens ends at
the model's logits, DLA adds up, the subspace sentence follows the computed verdict, and every question reveals
the answer mechlib computes for the model on screen."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from classroom.session import DEFAULT_PROMPT
from mechlib import data, residual, zoo
from mechlib.config import ModelConfig
from mechlib.model import Transformer
from tests.app.helpers import open_page, open_page_with_model, reveal, shown_checks


def page(**state) -> AppTest:
    return open_page("app_pages/residual.py", **state)


def text(at: AppTest) -> str:
    """The page's Markdown as read: the glossary's tooltips (<abbr> tags) left out."""
    return re.sub(r"<[^>]+>", "", " ".join(m.value for m in at.markdown))


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
    at.radio(key="input").set_value("repeated random tokens").run()
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
    assert "Shortformer positions enter the queries and keys only, never the stream: no pos_embed term." in text(at)
    assert not any(h.value == "Do heads write to separate subspaces?" for h in at.subheader)
    # one kind of term, no blocks to read between, no heads: only the attribution's question is left to ask
    assert [r.key for r in at.radio if r.key.startswith("predict ")] == ["predict dla"]
    assert at.radio(key="predict dla").options == ["the token embedding", "a bias"]


def test_the_ledger_grid_is_as_tall_as_its_terms(monkeypatch):
    """attn-only-0l's ledger has one term: a grid of a fixed 420 px drew it above a column of empty rows. The grid
    takes the height of its rows, one term or many."""
    from classroom.page import layout

    real, heights = layout.table, {}

    def recording(frame, name, *args, **options):
        heights[name] = (len(frame), options.get("height", "auto"))
        real(frame, name, *args, **options)

    monkeypatch.setattr(layout, "table", recording)
    page(model="attn-only-0l")
    assert heights["ledger"] == (1, "content")


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
                                             "know them, so it reads them all as one token. Choose an example above, "
                                             "or use words from Python's documentation."]
    at.text_input(key="prompt").set_value("the class of an object is its type").run()
    assert not at.warning


def test_the_start_page_says_this_page_runs_on_the_sidebars_model():
    at = open_page("app_pages/home.py")
    assert next(c.value for c in at.caption if c.value.startswith("every component reads")).endswith(
        "Runs on the model chosen in the sidebar.")


# Questions: each revealed on two zoo models at the page's defaults (the default prompt, position len − 2), where
# mechlib's answers differ.
SETTINGS = ["gelu-2l", "attn-only-2l"]


@pytest.fixture(scope="module")
def pages() -> dict[str, AppTest]:
    return {name: page(model=name) for name in SETTINGS}


def defaults(name: str) -> tuple:
    """The model, the default prompt's ids and the default position: what the page shows on opening."""
    model = zoo.load(name)
    ids = data.prompt_ids(model.tokenizer, DEFAULT_PROMPT, model.cfg.n_ctx).ids
    return model, ids, len(ids) - 2




def expected_ledger(name: str) -> str:
    model, ids, position = defaults(name)
    return residual.term_kind(residual.ledger_at(model, ids, position).largest)


def expected_depth(name: str) -> str:
    model, ids, _ = defaults(name)
    return residual.depth(model, ids).largest


def expected_lens(name: str) -> str:
    model, ids, position = defaults(name)
    n = model.cfg.n_layers
    options = ["the embeddings"] + [f"after block {b}" for b in range(n - 1)] + ["only at the end"]
    return options[residual.lens(model, ids, position).first_top]


def top_attribution(name: str) -> residual.Attribution:
    model, ids, position = defaults(name)
    return residual.attribution(model, ids, position, residual.lens(model, ids, position).candidates[0])


def expected_dla(name: str) -> str:
    return residual.term_kind(top_attribution(name).largest)


def expected_subspaces(name: str) -> str:
    return f"{residual.subspaces(zoo.load(name)).versus_random} random"


@pytest.mark.parametrize("key, why, expected", [
    ("ledger", "along x̂_final, of ‖x_final‖", expected_ledger),
    ("depth", "Mean ‖output‖: ", expected_depth),
    ("lens", "Its rank read at each boundary: ", expected_lens),
    ("dla", "nats of the total", expected_dla),
    ("subspaces", "random pairs. Another model", expected_subspaces),
])
def test_each_question_reveals_the_live_answer(pages, key, why, expected):
    answers = {name: reveal(pages[name], key)[0] for name in SETTINGS}
    assert answers == {name: expected(name) for name in SETTINGS}
    assert len(set(answers.values())) == 2, answers


def test_the_lens_answer_is_the_first_boundary_ranking_the_final_top_token_first(pages):
    """gelu-2l reaches its final top token only at the end; attn-only-2l already after block 0."""
    assert expected_lens("gelu-2l") == "only at the end" and expected_lens("attn-only-2l") == "after block 0"
    assert "Its rank read at each boundary: the embeddings 747, after block 0 5, after block 1 1." in text(pages["gelu-2l"])


def test_the_exercise_checks_the_head_with_the_largest_direct_share(pages):
    answers = {}
    for name in SETTINGS:
        at, correct = pages[name], top_attribution(name).top_heads
        box = at.selectbox(key="exercise dla head")
        assert box.options == [f"L{l}H{h}" for l in range(2) for h in range(zoo.load(name).cfg.n_heads)]
        box.set_value(next(head for head in box.options if head not in correct)).run()
        assert ":red[**✗ not this one: try again**]" in text(at)
        at.selectbox(key="exercise dla head").set_value(correct[0]).run()
        assert ":green[**✓ right**]" in text(at)
        at.button(key="reveal button dla head").click().run()
        shown = next(m.value for m in at.markdown if m.value.startswith("**L") and "direct share is" in m.value)
        answers[name] = re.match(r"\*\*(.+?)\*\*", shown)[1]
        assert answers[name] == ", ".join(correct)
    assert answers == {"gelu-2l": "L1H1", "attn-only-2l": "L1H0"}


def test_presentation_mode_shows_one_section_and_next_moves_on():
    at = page(present=True)
    assert not at.exception
    assert [h.value for h in at.subheader] == ["The ledger at one position"]
    assert "Notes" in [e.label for e in at.expander]  # the prose folds away
    next(b for b in at.button if b.label == "Next").click().run()
    assert not at.exception
    assert [h.value for h in at.subheader] == ["The stream through depth"]
