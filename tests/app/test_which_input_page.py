"""AppTest for "Which input, or which mechanism?": the page draws on its defaults with every check passing, each
question reveals the answer mechlib computes for the model on screen (the zoo's attn-only-2l, and a random model of
its shape, where the answers differ), the composition, interaction and path verdicts on the pair the games name flip on
the random model, a game of too many players is sampled with its standard errors, a large model's prompt is shortened
so that its orderings fit the cost limit, a game of which not even two orderings fit is refused with its numbers, and
presentation mode shows one part at a time."""

import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from classroom import pages
from mechlib import ModelConfig, induction, shapley, zoo
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
    assert "The pair, found by the games above: **L1H3**, the head after layer 0 with the most direct" in text(at)
    assert "and **L0H1**, the head before it whose credit grows most" in text(at)


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
    # the pair the games name: attn-only-2l's L0H1 → L1H3 (the strongest K path by patching), not the pair by
    # induction score (L1H1, whose path from L0H1 carries 25 %, under the 30 % bar)
    assert (":green[**✓ L0H1 and L1H3 work only together (I at least 33% of their own credit, at least 1 nats)**]"
            in text(trained))
    assert ":green[**✓ the path carries the prediction (≥ 30%)**]" in text(trained)
    assert "The strongest K path is L0H1 → L1H3" in text(trained)
    assert "do not work only together (the rule:" in text(random) and "work only together (I at" not in text(random)
    assert "test.safetensors does not predict the second copy" in text(random).replace("\\", "")
    assert "does not predict the second copy" not in text(trained)


def test_too_many_players_for_every_coalition_are_sampled_with_standard_errors():
    at = open_page(PAGE, model="random", heads=8, **SIDEBARS)  # 2 layers × 8 heads + the direct path: 17 > 16
    assert not at.exception and not at.error, at.exception
    captions = " ".join(c.value for c in at.caption)
    assert "too many for every coalition here, so 16 random orderings are sampled" in captions
    assert "**259** forward passes" in captions  # 16 orderings × 16 inner coalitions, the empty and full ones, the run
    columns = at.dataframe[0].value.columns
    assert "± direct φ (nats)" in columns and "± total φ (nats)" in columns
    assert "Sampled from 16 orderings (258 coalitions per game): the largest standard error is" in text(at)


def test_a_game_of_many_heads_is_sampled_and_patching_refused_on_memory():
    at = open_page(PAGE, model="random", heads=16, **SIDEBARS)  # 2 layers × 16 heads + the direct path: 33 players
    assert not at.exception, at.exception
    assert "so 16 random orderings are sampled" in " ".join(c.value for c in at.caption)
    assert not at.warning  # within the cost limit: nothing refused for its forward passes
    assert any(m.label == "interaction, total game" and "±" in m.value for m in at.metric)  # drawn before patching
    (error,) = [e.value for e in at.error]  # the door's own refusal, on memory: 16² paths per batch
    assert error.startswith("activation patching on repeated sequences would need about ") and "1,024 MB" in error


SIDEBAR_MODEL = ModelConfig(n_layers=2, d_model=64, n_heads=8, d_vocab=1000, n_ctx=64, seed=0)  # heads=8's


def test_a_large_models_prompt_is_shortened_until_its_orderings_fit_the_cost_limit(monkeypatch):
    """A cost limit (forward passes × positions × parameters) where 16 orderings of heads=8's 17 players fit at
    6-token segments and not at 7: the page plays the game on the shorter prompt and says why."""
    shape = Transformer(SIDEBAR_MODEL)
    cap = shapley.shapley_cost(shape, 12, "zero", shapley.PERMUTATIONS)
    assert shapley.shapley_cost(shape, 14, "zero", shapley.PERMUTATIONS) > cap
    monkeypatch.setattr(shapley, "COST_MAX", cap)
    at = open_page(PAGE, model="random", heads=8, **SIDEBARS)
    assert not at.exception, at.exception
    (warning,) = [w.value for w in at.warning]  # only the tokens' 804 forward passes are over its 259
    assert warning.startswith("SHAP and LIME on this prompt together: 804 forward passes"), warning
    assert ("6 random tokens from seed 0 (6, not the 20 induction is scored at: at 20 fewer than 16 orderings of "
            "the sidebar's random model's game fit this server's cost limit for one part)") in text(at)
    captions = " ".join(c.value for c in at.caption)
    assert "so 16 random orderings are sampled" in captions and "**259** forward passes of 12 positions" in captions


def test_a_game_of_which_not_even_two_orderings_fit_is_refused_with_its_numbers(monkeypatch):
    """The default random model (9 players): a cost limit one parameter-position short of two orderings at the
    shortest prompt (3-token segments: 6 positions)."""
    cfg = ModelConfig(n_layers=2, d_model=64, n_heads=4, d_vocab=1000, n_ctx=64, seed=0)  # the sidebar's default
    shape = Transformer(cfg)
    monkeypatch.setattr(shapley, "COST_MAX", shapley.shapley_cost(shape, 6, "zero", 2) - 1)
    at = open_page(PAGE, model="random", **SIDEBARS)
    assert not at.exception, at.exception
    warnings = [w.value for w in at.warning]
    refusal = (f"not even two orderings of the game fit, and one gives no standard error: two orderings of 9 players "
               f"take 19 forward passes of 6 positions through the sidebar's random model ({cfg.n_params():,} "
               f"parameters), {19 * 6 * cfg.n_params():.2e} parameter-positions, over this server's")
    assert [w for w in warnings if refusal in w and "(18 forward passes)" in w] == [
        next(w for w in warnings if w.startswith("The game of 9 players:")),
        next(w for w in warnings if w.startswith("The pair of heads, chosen by that game:"))], warnings
    assert any(w.startswith("SHAP and LIME on this prompt together: ") for w in warnings), warnings
    assert not at.get("plotly_chart") and not at.dataframe  # no game, no pair, no tokens


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
