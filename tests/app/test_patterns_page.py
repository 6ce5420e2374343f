"""AppTest for the Patterns and messages page: every widget moved, every check read off the page."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from mechlib.config import ModelConfig
from mechlib.model import Transformer
from tests.app.helpers import open_page, open_page_with_model, reveal, shown_checks


def page(**state) -> AppTest:
    return open_page("app_pages/patterns.py", **state)


def text(at: AppTest) -> str:
    """What the page says, without the glossary's tooltips (their definitions are not the page's sentences)."""
    said = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    return re.sub(r'<abbr title="[^"]*">([^<]*)</abbr>', r"\1", said)


def checks_pass(at: AppTest) -> None:
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    shown = shown_checks(at)
    # regrouping against the model's results (float32), non-uniqueness (float64, twice), scores, messages (float32)
    assert [t for *_, t, _ in shown] == [1e-5, 1e-10, 1e-10, 1e-5, 1e-5], shown
    assert all(passed and scaled <= t and d <= 10 * t for d, scaled, t, passed in shown), shown
    assert "FAIL" not in text(at) and "✗" not in text(at)


def test_defaults_on_the_default_zoo_model():
    at = page()
    checks_pass(at)
    assert at.session_state["model"] == "gelu-2l"
    assert "A (V W_O) of each of layer 1's 4 heads against the per-head results the model computed" in text(at)
    # rank ≤ d_head (32 < 128) cannot fail: shown as the spectra's cut, without a badge
    assert "This is linear algebra, not a finding about the model" in text(at)
    assert text(at).count("numerically zero below 1e-10): rank 32") == 2  # W_QK and W_OV
    assert "rank ≤ d_head**]" not in text(at) and ":green[**✓ rank" not in text(at)


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
    checks_pass(at)
    assert "Here d_head = 64 ≥ d_model = 64: a d_model × d_model matrix has only 64 singular values" in text(at)
    assert "rank ≤ d_head**]" not in text(at) and "not a finding about the model" not in text(at)


@pytest.mark.parametrize("d_head", [16, 24])
def test_heads_as_wide_as_the_stream(d_head):
    """d_head = d_model with two heads got the old text "With one head …"; d_head > d_model raised IndexError."""
    cfg = ModelConfig(n_layers=1, d_model=16, n_heads=2, d_head=d_head, d_vocab=40, n_ctx=12, seed=3)
    at = open_page_with_model("app_pages/patterns.py", Transformer(cfg))
    checks_pass(at)
    assert f"Here d_head = {d_head} ≥ d_model = 16: a d_model × d_model matrix has only 16 singular values, none past " \
           "d_head, so rank ≤ d_head holds for any matrix and says nothing about this head." in text(at)
    assert "one head" not in text(at) and "A (V W_O) of each of layer 0's 2 heads" in text(at)


def test_zero_layer_model_explains_itself():
    at = page(model="attn-only-0l")
    assert any("no attention layers" in i.value for i in at.info)


def test_the_start_page_says_this_page_runs_on_the_sidebars_model():
    at = open_page("app_pages/home.py")
    assert next(c.value for c in at.caption if c.value.startswith("a head is a pattern")).endswith(
        "Runs on the model chosen in the sidebar.")




def effective_rank_option(model, layer: int, head: int) -> str:
    """The option the rank question accepts, by the rule its reveal states, computed here from mechlib alone."""
    from mechlib import patterns

    bins = patterns.effective_rank_bins(model.cfg.d_head, model.cfg.d_model)
    first, last = bins[patterns.bin_of(bins, patterns.effective_rank(patterns.ranks(model, layer, head).spectra["W_OV"]))]
    return f"{first}" if first == last else f"{first} to {last}"


def test_the_regrouping_and_rank_answers_follow_the_model():
    from mechlib import zoo

    wide = ModelConfig(n_layers=1, d_model=16, n_heads=2, d_head=24, d_vocab=40, n_ctx=12, seed=3)
    square = ModelConfig(n_layers=1, d_model=16, n_heads=1, d_vocab=40, n_ctx=12, seed=3)  # d_head = d_model
    default = page()
    assert reveal(default, "regrouping")[0] == "((QKᵀ)V)O needs fewer"  # d_head 32 < d_model 128
    assert default.radio(key="predict rank").options == ["1", "2 to 16", "17 to 32", "33 to 128"]
    assert reveal(default, "rank")[0] == effective_rank_option(zoo.load("gelu-2l"), 1, 0) == "17 to 32"
    at = open_page_with_model("app_pages/patterns.py", Transformer(square))
    assert reveal(at, "regrouping")[0] == "the same"  # n²·d_head + n·d_head·D = n·d_head·D + n²·D when d_head = D
    model = Transformer(wide)
    at = open_page_with_model("app_pages/patterns.py", model)
    assert at.radio(key="predict rank").options == ["1", "2 to 8", "9 to 16"]  # nothing past d_model: no bin past it
    assert reveal(at, "rank")[0] == effective_rank_option(model, 0, 0) == "2 to 8"


def test_where_a_position_looks_is_revealed_from_the_live_pattern():
    from mechlib import data, patterns, zoo
    from classroom.session import DEFAULT_PROMPT

    model = zoo.load("gelu-2l")
    ids = data.prompt_ids(model.tokenizer, DEFAULT_PROMPT, model.cfg.n_ctx).ids
    answers = {}
    for layer, head in [(1, 0), (0, 0), (0, 3)]:
        answers[layer, head] = reveal(page(layer=layer, head=head), "pattern")[0]
        assert answers[layer, head] == patterns.where_looked(patterns.scores(model, ids, layer, head).pattern, len(ids) - 1)
    assert answers == {(1, 0): "another earlier position", (0, 0): "the previous position", (0, 3): "position 0"}


def test_presentation_mode_shows_one_section_and_next_moves_on():
    at = page(present=True)
    assert [h.value for h in at.subheader] == ["Regrouping: ((QKᵀ)V)O = (QKᵀ)(VO)"]
    assert "Notes" in {e.label for e in at.expander}
    assert "Next" in {b.label for b in at.button}  # Previous links to the step before, the Equivalence page
    next(b for b in at.button if b.label == "Next").click().run()
    assert [h.value for h in at.subheader] == ["Two d_model × d_model matrices per head, each of rank ≤ d_head"]
    assert at.session_state["part"] == "Two d_model × d_model matrices per head, each of rank ≤ d_head"


def test_a_computation_is_timed_where_it_runs_for_the_next_to_state():
    """A section's computation on the page's model is timed where it runs (a cache hit is not a computation), so the
    next one on that model states the time (``timings``, whose own tests check the sentences)."""
    from classroom import timings
    from classroom.model_choice import ModelChoice

    page(layer=0, head=1)
    held, took = timings._last[("mechlib.patterns.scores", ModelChoice("zoo", "gelu-2l"))]
    assert 0 < took < 60 and held > 0
    assert timings.expected("mechlib.patterns.scores", ModelChoice("zoo", "gelu-2l"), held) == (
        f"it took {took:,.1f} s on this model last time")
