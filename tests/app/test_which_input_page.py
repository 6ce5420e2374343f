"""AppTest for "Which input, or which mechanism?": the page draws on its defaults with every check passing, each
question reveals the answer mechlib computes for the model on screen (the zoo's attn-only-2l, and a random model of
its shape, where the answers differ), the composition and interaction verdicts flip on the random model, a game of
too many players is sampled with its standard errors and one of too many forward passes is refused, and
presentation mode shows one part at a time."""

import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from classroom import pages
from mechlib import induction, shapley, zoo
from mechlib import token_attribution as tokens
from mechlib.model import Transformer
from tests.app.helpers import open_page, open_page_with_model, reveal, shown_checks

PAGE = "app_pages/which_input.py"
SIDEBARS = {pages.circuits_model_key("attn-only-2l"): pages.SIDEBARS_MODEL}  # the page reads the sidebar's model


def text(at: AppTest) -> str:
    """The page's Markdown as read: the glossary's tooltips (<abbr> tags) left out."""
    return re.sub(r"<[^>]+>", "", " ".join(m.value for m in at.markdown))


def checks_pass(at: AppTest, expected: int) -> None:
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    shown = shown_checks(at)
    assert len(shown) == expected, shown
    assert all(passed and scaled <= t for _, scaled, t, passed in shown), shown


def random_twin() -> Transformer:
    """A model of attn-only-2l's shape with random weights (seed 0): no previous-token head, no induction head."""
    return Transformer(zoo.load("attn-only-2l").cfg)


def test_defaults_draw_every_part_with_its_checks():
    at = open_page(PAGE)
    # efficiency in both games, DLA against the direct game, SHAP's efficiency, the convolution in float32 and float64
    checks_pass(at, 6)
    assert [h.value for h in at.subheader] == ["Heads as players", "Two heads together", "Tokens as players",
                                               "Heads as channels"]
    assert "Reading **attn-only-2l**." in text(at)
    captions = " ".join(c.value for c in at.caption)
    assert "exact over all 2^9 coalitions: **513** forward passes of 40 positions" in captions
    assert len(at.get("plotly_chart")) == 4  # the heads' values, SHAP, LIME, the induction head's attention
    table = at.dataframe[0].value
    assert list(table["player"]) == list(shapley.players(zoo.load("attn-only-2l")))
    np.testing.assert_allclose(table["DLA of the logit difference (nats)"], table["direct φ (nats)"], atol=1e-3)
    assert "The pair, found by their scores on repeated sequences: **L0H1**" in text(at)


def test_another_baseline_and_metric_say_why_the_direct_game_leaves_direct_logit_attribution():
    at = open_page(PAGE, w_baseline="resample", w_metric="log-probability")
    checks_pass(at, 6)  # DLA is still checked, against the game it is: zero baseline, logit difference
    assert "with the resample baseline a player's credit is what it writes less what it writes on the baseline; the " \
           "log-probability is not linear in the stream" in text(at)
    assert "log p('" in text(at)


@pytest.fixture(scope="module")
def questions() -> dict[str, AppTest]:
    return {"trained": open_page(PAGE, read=False), "random": open_page_with_model(PAGE, random_twin(), read=False,
                                                                                  **SIDEBARS)}


def expected(setting: str) -> dict[str, str]:
    """Every question's answer, computed by the rule its reveal states, for the page's defaults (seed 0, the zero
    baseline, the logit difference, <unk> for an absent token)."""
    model = zoo.load("attn-only-2l") if setting == "trained" else random_twin()
    prompt = shapley.induction_prompt(model.cfg.d_vocab, model.cfg.n_ctx, 0)
    game = shapley.shapley(model, prompt.ids, prompt.metric, "zero", prompt.corrupted)
    previous = induction.induction_circuit(model).previous
    direct, total = (dict(zip(game.players, g.values)) for g in (game.direct, game.total))
    little = direct[previous] <= game.share_max * abs(total[previous])
    shap, lime = (tokens.token_attribution(model, prompt.ids, prompt.metric, method, "unk", None, 0)
                  for method in ("shapley sampling", "lime"))
    length = len(prompt.ids) // 2
    roles = {len(prompt.ids) - 1: "the last token", length - 1: "its earlier copy",
             length: "the answer, after that copy"}
    top = int(np.argmax(shap.values)) + 1
    return {"w top total": game.top_total_head,
            "w previous direct": ("little or none: at most 25% of its total-game credit" if little
                                  else "yes: more than 25% of its total-game credit"),
            "w shap top": roles.get(top, "another token"),
            "w lime agrees": "yes" if int(np.argmax(lime.values)) + 1 == top else "no"}


def test_each_question_reveals_the_computed_answer_and_hides_its_evidence_until_then(questions):
    answers = {}
    for setting, at in questions.items():
        assert not at.exception
        assert not at.get("plotly_chart")  # every figure answers a question: none before its reveal
        answers[setting] = {key: reveal(at, key)[0] for key in expected(setting)}
        assert answers[setting] == expected(setting), setting
        assert len(at.get("plotly_chart")) == 4
    assert answers["trained"] == {"w top total": "L0H1",
                                  "w previous direct": "little or none: at most 25% of its total-game credit",
                                  "w shap top": "its earlier copy", "w lime agrees": "no"}
    differ = [key for key in answers["trained"] if answers["trained"][key] != answers["random"][key]]
    assert "w top total" in differ and len(differ) >= 2, answers


def test_the_verdicts_flip_on_a_random_model_of_the_same_shape():
    trained, random = open_page(PAGE), open_page_with_model(PAGE, random_twin(), **SIDEBARS)
    assert "the sidebar's random model" not in text(trained)
    for at in (trained, random):
        checks_pass(at, 6)  # identities hold for any weights
    assert ":green[**✓ L0H1 works through composition" in text(trained)
    assert "does not work through composition" in text(random) and "works through composition:" not in text(random)
    assert ":green[**✓ worth more together than apart**]" in text(trained)
    assert ":red[**✗ not worth more together than apart**]" in text(random)
    assert "test.safetensors does not predict the second copy" in text(random).replace("\\", "")
    assert "does not predict the second copy" not in text(trained)


def test_too_many_players_for_every_coalition_are_sampled_with_standard_errors():
    at = open_page(PAGE, model="random", heads=8, **SIDEBARS)  # 2 layers × 8 heads + the direct path: 17 > 16
    assert not at.exception and not at.error, at.exception
    captions = " ".join(c.value for c in at.caption)
    assert "too many for every coalition here, so 16 random orderings are sampled" in captions
    assert "**259** forward passes" in captions  # 16 orderings × 16 inner coalitions, the empty and full ones, the run
    assert "± total φ (nats)" in at.dataframe[0].value.columns
    assert "Sampled: the largest standard error is" in text(at)


def test_a_model_too_large_for_the_servers_forward_passes_is_refused_with_both_counts():
    at = open_page(PAGE, model="random", d_model=1024, heads=16, vocab=50_000, **SIDEBARS)  # 111 M parameters
    assert not at.exception, at.exception
    warnings = [w.value for w in at.warning]
    assert ("The game of 33 players, sampled with 2 orderings: 67 forward passes through the sidebar's random model, "
            "more than the 22 this server runs for one part. Choose a smaller model in the sidebar, or run it from a "
            "notebook.") in warnings
    assert any(w.startswith("SHAP and LIME on this prompt together: 1,480 forward passes") for w in warnings), warnings
    assert any(m.label == "interaction, total game" for m in at.metric)  # drawn before patching is refused
    (error,) = [e.value for e in at.error]  # the door's own refusal, on memory
    assert error.startswith("activation patching on repeated sequences would need about ") and "1,024 MB" in error


def test_presentation_mode_shows_one_part_and_next_moves_on():
    at = open_page(PAGE, present=True)
    assert not at.exception
    assert [h.value for h in at.subheader] == ["Heads as players"]
    next(b for b in at.button if b.label == "Next").click().run()
    assert not at.exception
    heading = [h.value for h in at.subheader]
    while heading == ["Heads as players"]:  # the part's own slides (its questions, its figure) first
        next(b for b in at.button if b.label == "Next").click().run()
        assert not at.exception
        heading = [h.value for h in at.subheader]
    assert heading == ["Two heads together"]


def test_the_start_page_lists_the_page_from_the_registry():
    at = open_page("app_pages/home.py")
    linked = [link.proto.page for link in at.get("page_link")]
    assert linked.count("which-input") >= 2  # its lesson step, its line among the pages (and the SHAP paragraph)
    assert any(c.value.startswith("Shapley values over heads beside direct logit attribution") for c in at.caption)
