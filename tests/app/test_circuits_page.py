"""AppTest for the four Circuits pages: every part, its widgets, and the numbers it checks."""

import dataclasses
import html
import json
import re

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from classroom.page import glossary
from classroom.page.text import literal
from mechlib import circuits, induction, patching, zoo
from mechlib.checks import Check
from mechlib.config import ModelConfig
from mechlib.device import costs
from mechlib.model import Transformer
from tests.app.helpers import APP, next_part, open_page, open_page_with_model, reveal, shown_checks

REAL_ONE_LAYER = circuits.one_layer


FILES = {"zero layers": "app_pages/circuits_zero.py", "one layer": "app_pages/circuits_one.py",
         "two layers": "app_pages/circuits_two.py", "the phase change": "app_pages/circuits_phase.py"}


def page(which: str, **state) -> AppTest:
    return open_page(FILES[which], **state)


def reading(at: AppTest) -> str:
    """The page's model, as the line under its radio names it."""
    (name,) = [m.value.removeprefix("Reading **").removesuffix("**.") for m in at.markdown
               if m.value.startswith("Reading **")]
    return name


def numbers(at: AppTest, pattern: str) -> list[float]:
    found = [match for md in at.markdown for match in re.findall(pattern, md.value)]
    return [float(x) for match in found for x in (match if isinstance(match, tuple) else (match,))]


def test_zero_layers_show_four_computed_figures_and_verdicts_from_them():
    at = page("zero layers")
    assert not at.error
    z = circuits.zero_layer(zoo.load("attn-only-0l"))
    shown = [m.value for m in at.metric]
    assert len(shown) == 4 and all(v.endswith(" nats") for v in shown)
    assert [float(v.split()[0]) for v in shown] == pytest.approx(
        [z.ceiling.model_kl, z.ceiling.best_fit_kl, z.ceiling.unigram_kl, z.ceiling.entropy], rel=0.01)
    kl, bound = numbers(at, r"KL \*\*([-+.e\d]+) nats\*\* against a bound of \*\*([\d.]+) nats\*\*")
    assert kl <= 0.01 and bound == pytest.approx(0.1 * z.ceiling.entropy, abs=1e-3)
    text = " ".join(m.value for m in at.markdown)
    assert "✓ learned" in text and "has learned the bigram statistics" in text
    assert "within 0.01 nats of the best rank-128 fit" in text and "✓ as good as its width allows" in text
    assert any("shortformer" in m.value and "W_E W_U + b_U exactly" in m.value for m in at.markdown)
    table = at.dataframe[0].value
    assert len(table) == 8 and table["model probability"].is_monotonic_decreasing
    at.selectbox(key="z_token").select_index(5).run()
    assert not at.exception and not at.dataframe[0].value.equals(table)


def test_one_layer_copying_and_path_expansion_at_the_models_tolerance():
    at = page("one layer")
    assert not at.error and "FAIL" not in " ".join(m.value for m in at.markdown)
    (bar,) = numbers(at, r"\*\*4 of 4 heads copy\*\*: a head counts when its copying score is above what a random "
                         r"head reaches, \*\*([\d.]+)\*\*")
    assert bar == round(circuits.random_copying(1000, 128, 32).bar(4), 2) and 0.05 < bar < 0.2   # the shipped heads: 0.4
    ((difference, scaled, tolerance, passed),) = shown_checks(at)                    # the path expansion, the only one
    assert passed and scaled <= tolerance == 1e-5 and difference <= 1e-4              # float32's tolerance, not a literal
    assert any(m.value.startswith("The paths' sum against the logits of a separate forward pass, in the model's own "
                                  "precision: max") for m in at.markdown)
    at.slider(key="c_head").set_value(3).run()
    assert not at.exception and len(at.dataframe[0].value) == 15
    at.text_input(key="c_prompt").set_value("return the value").run()
    assert not at.exception
    ((difference, _, _, passed),) = shown_checks(at)
    assert passed and difference <= 1e-4


def one_layer_with_a_wrong_path_sum(model, ids) -> circuits.OneLayer:
    """The real reading, but the paths' sum misses the logits by 0.5."""
    return dataclasses.replace(REAL_ONE_LAYER(model, ids), path_check=Check(0.5, 0.5, 1e-5))


def test_a_failing_path_expansion_is_shown_red(monkeypatch):
    monkeypatch.setattr(circuits, "one_layer", one_layer_with_a_wrong_path_sum)
    at = page("one layer")
    assert not at.exception and not at.error
    assert shown_checks(at) == [(0.5, 0.5, 1e-5, False)]
    line = next(m.value for m in at.markdown if m.value.startswith("The paths' sum"))
    assert line.endswith("max |difference| **5.0e-01**, scaled **5.0e-01** against a tolerance of **1e-05** · "
                         "max(1, |reference|) — :red[**✗ FAIL**].")


def test_two_layers_name_the_circuit_and_prove_it_by_ablation():
    at = page("two layers")
    assert not at.error
    assert reading(at) == "attn-only-2l"
    circuit = next(m.value for m in at.markdown if m.value.startswith("**The circuit, as found in attn-only-2l.**"))
    assert "L0H1 is a previous-token head" in circuit and "L1H1 K-composes with it" in circuit
    k_composition, random, ceiling = numbers(at, r"K-composition is \*\*([\d.]+)\*\*, against ([\d.]+).*?ceiling of \*\*([\d.]+)\*\*")
    assert 0.086 < random < k_composition < ceiling == pytest.approx(0.221, abs=0.01)  # above random, below the spectra
    before, after = numbers(at, r"falls from \*\*([\d.]+)\*\* to \*\*([\d.]+)\*\*")
    assert before >= 0.9 and after < 0.1
    assert any("✓ it depends on the previous-token head" in m.value for m in at.markdown)
    assert not any("No induction circuit" in m.value for m in at.markdown)
    virtual = at.dataframe[0].value
    assert list(virtual.columns) == ["virtual head", "V-composition", "‖W_OV^A W_OV^B‖_F", "above random?"]
    assert len(virtual) == 4 and (virtual["above random?"] == "✗ no").all()           # 0.086 at best, random 0.088
    assert any(m.value.startswith("None of these pairs V-composes above random") for m in at.markdown)
    (bar,) = numbers(at, r"picked from 16: a pair is above random past \*\*([\d.]+)\*\*")     # Bonferroni over 16 pairs
    assert bar == pytest.approx(0.095, abs=0.002) and virtual["V-composition"].max() < bar
    assert re.search(r"copying score 0\.9\d against 0\.0\d for a random head — :green\[\*\*✓ copies", circuit)


def test_gelu_2l_has_no_induction_circuit_and_the_page_says_what_is_missing():
    """The sidebar's default, gelu-2l: its best previous-token head scores 0.10, so no role is claimed."""
    at = page("two layers")
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()
    assert not at.exception and not at.error
    assert reading(at) == "gelu-2l"
    verdict = next(m.value for m in at.markdown if m.value.startswith("**No induction circuit found in gelu-2l.**"))
    assert re.search(r"no previous-token head before layer 1: the best, L0H\d, scores 0\.1\d < 0\.5", verdict)
    assert "no induction head" in verdict
    assert verdict.endswith("; the ablation is not tested: no induction head found.") and "ablating" not in verdict
    assert not any("is a previous-token head" in m.value or "Ablation proof" in m.value for m in at.markdown)


def test_phase_change_replays_the_snapshots():
    at = page("the phase change")
    assert not at.error
    first = at.select_slider(key="c_step").options[0]
    at.select_slider(key="c_step").set_value(int(first)).run()
    assert not at.exception
    assert numbers(at, r"best induction score \*\*([\d.]+)\*\*")[0] < 0.3  # before training: no induction head
    per_checkpoint = at.dataframe[0].value
    assert per_checkpoint["best induction score"].iloc[-1] >= 0.9
    assert per_checkpoint["in-context-learning score (nats)"].iloc[-1] < -1 < per_checkpoint["in-context-learning score (nats)"].iloc[0]
    (formed,) = [int(m.replace(",", "")) for md in at.markdown
                 for m in re.findall(r"first appears at step \*\*([\d,]+)\*\*", md.value)]
    first = per_checkpoint[per_checkpoint["best induction score"] >= 0.5]["step"].iloc[0]
    assert formed == first and (per_checkpoint[per_checkpoint["step"] < first]["best induction score"] < 0.5).all()


def test_pages_work_on_the_sidebars_model_or_say_why_not():
    at = page("one layer")
    at.radio(key="c_model_attn-only-1l").set_value("the sidebar's model").run()   # gelu-2l: LayerNorm
    assert not at.exception and not at.error
    assert any("exact only without LayerNorm" in i.value for i in at.info)
    at = page("zero layers")
    at.radio(key="c_model_attn-only-0l").set_value("the sidebar's model").run()
    assert any("does not fit this page" in i.value for i in at.info)
    assert not at.exception and not at.error


def test_a_random_model_without_tokenizer_uses_ids():
    at = page("two layers", model="random")
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()
    assert not at.exception and not at.error
    assert any("no tokenizer" in i.value for i in at.info)
    assert any(m.value.startswith("**No induction circuit found in the sidebar's random model.**") for m in at.markdown)


@pytest.mark.parametrize("vocab, ctx", [(3, 2), (1000, 6)])
def test_a_random_model_too_small_to_score_induction_gets_the_zoo_model_and_the_reason(vocab, ctx):
    """Two layers, but a context or vocabulary too small for repeated sequences: the section says what it needs
    and shows attn-only-2l instead of failing."""
    at = page("two layers", model="random", vocab=vocab, ctx=ctx)
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()
    assert not at.exception and not at.error
    assert any("does not fit this page" in i.value and "induction scores need a context of 7 tokens or more" in i.value
               for i in at.info)
    assert reading(at) == "attn-only-2l"


def test_a_random_model_with_one_dimensional_heads_claims_no_copying():
    """d_head 1: a random head scores ±1, so the bar lies above 1 and the page says no head can pass it."""
    at = page("one layer", model="random", layers=1, d_model=16, heads=16)
    at.radio(key="c_model_attn-only-1l").set_value("the sidebar's model").run()
    assert not at.exception and not at.error
    line = next(m.value for m in at.markdown if "heads copy" in m.value)
    assert line.startswith("**0 of 16 heads copy**") and line.endswith(", so none can: a score is at most 1.")


def test_under_the_hood_shows_the_reference_and_the_fast_path_one_click_further():
    at = page("two layers")
    hood = [c.value for c in at.code if c.value.lstrip().startswith(("def", "@"))]  # not the snippets, not the link
    assert len(hood) == 1 and "def composition_score_reference" in hood[0]
    at.toggle(key="c_fast").set_value(True).run()
    hood = [c.value for c in at.code if c.value.lstrip().startswith(("def", "@"))]
    assert not at.exception and "def composition_scores" in hood[1] and "cholesky" in hood[1]


# ---------------------------------------------------------------------------------------------------------------
# The URL, presentation mode, the glossary


def test_each_pages_model_is_bound_to_the_url_and_the_train_page_can_preset_it():
    assert page("two layers").radio(key="c_model_attn-only-2l").value == "zoo: attn-only-2l"  # fresh session
    at = AppTest.from_file(APP, default_timeout=180)                               # a link to the sidebar's model
    at.query_params["c_model_attn-only-2l"] = "the sidebar's model"
    at.run()
    at.switch_page(FILES["two layers"]).run()
    assert not at.exception and at.radio(key="c_model_attn-only-2l").value == "the sidebar's model"
    assert reading(at) == "gelu-2l"
    # the Train page sets the radio's state before switching here, so the page opens on the trained model
    at = page("two layers", **{"c_model_attn-only-2l": "the sidebar's model"})
    assert not at.exception and reading(at) == "gelu-2l"


def test_every_other_widget_starts_on_its_fresh_sessions_value():
    at = page("zero layers")
    z = circuits.zero_layer(zoo.load("attn-only-0l"))
    assert at.selectbox(key="z_token").value == z.example != z.ids[0]
    assert page("two layers").toggle(key="c_fast").value is False
    at = page("the phase change")
    assert at.select_slider(key="c_step").value == zoo.snapshot_steps("attn-only-2l")[-1]


def test_presentation_mode_shows_one_part_at_a_time_and_next_moves_on():
    at = page("two layers", present=True)
    assert not at.exception and [s.value for s in at.subheader] == ["Two layers: how heads compose"]
    assert next_part(at) == [f"part 1 of 5 · slide {k} of 3" for k in (1, 2, 3)]  # Q-, K- and V-composition
    assert not at.exception and [s.value for s in at.subheader] == ["Virtual heads"]
    assert any(e.label == "Notes" for e in at.expander)                            # the prose, folded


@pytest.mark.parametrize("section, terms", [
    ("zero layers", ["shortformer"]),
    ("one layer", ["skip-trigram", "copying score", "W_p", "W_QK"]),
    ("two layers", ["K-composition", "virtual head", "induction"])])
def test_the_prose_defines_its_jargon_in_tooltips(section, terms):
    shown = " ".join(m.value for m in page(section).markdown)
    for term in terms:
        assert f'<abbr title="{html.escape(glossary.TERMS[term])}">{term}</abbr>' in shown, term


def heatmap_labels(at: AppTest) -> list[str]:
    """The x-axis labels of the page's first token heatmap (the QK circuit)."""
    import json

    spec = json.loads(next(chart for chart in at.get("plotly_chart") if "QK circuit" in chart.proto.spec).proto.spec)
    return spec["data"][0]["x"]


@pytest.mark.parametrize("present", [False, True])
def test_one_layer_tables_show_words_by_default_and_every_token_on_request(present):
    """Words only in either mode (one default, so a link shows the same tables in both); off, punctuation comes back.
    The tables are the head's, computed: the page shows ``token_tables``' labels and its copy ranks."""
    at = page("one layer", present=present)
    assert at.toggle(key="c_words").value is True and "c_words" not in at.query_params
    t = circuits.token_tables(zoo.load("attn-only-1l"), 0, 0, True)
    assert heatmap_labels(at) == t.labels and all(label.isalpha() for label in t.labels)
    top, chance = numbers(at, r"among the top \*\*(\d+)\*\* of all 1,000 tokens\. A head that does not copy would "
                              r"reach only about the top \*\*(\d+)\*\*")
    assert (top, chance) == (max(t.copy_ranks) + 1, round(t.chance_rank)) and top < chance / 3
    at.toggle(key="c_words").set_value(False).run()
    every = circuits.token_tables(zoo.load("attn-only-1l"), 0, 0, False).labels
    assert not at.exception and heatmap_labels(at) == every and not all(label.isalpha() for label in every)
    link = AppTest.from_file(APP, default_timeout=180)                               # a link with the toggle off
    link.query_params.update({"c_words": "false", "present": str(present).lower()})
    link.run()
    link.switch_page(FILES["one layer"]).run()
    assert not link.exception and link.toggle(key="c_words").value is False and heatmap_labels(link) == every


def test_the_exercise_points_where_the_patterns_are():
    at = page("two layers")
    task = next(m.value for m in at.markdown if "Find the previous-token head" in m.value)
    assert "Read the patterns in this section." in task and "above" not in task


def test_the_qk_circuit_is_labelled_with_the_readings_w_p():
    at = page("one layer")
    assert any("W_QK = W_p" in chart.proto.spec for chart in at.get("plotly_chart"))


# ---------------------------------------------------------------------------------------------------------------
# Questions: each revealed answer is this run's, so it changes with the data




def test_the_bigram_question_is_answered_from_w_e_w_u_for_the_chosen_token():
    z = circuits.zero_layer(zoo.load("attn-only-0l"))
    at = page("zero layers")
    first = reveal(at, "bigram")[0]                                                # "of": "the"
    other = next(i for i, row in enumerate(z.next_tokens) if literal(row["model's next token"][0]) != first)
    at.selectbox(key="z_token").select_index(other).run()
    another = reveal(at, "bigram")[0]
    assert [first, another] == [literal(z.next_tokens[i]["model's next token"][0]) for i in (z.ids.index(z.example), other)]


def test_the_copying_question_is_answered_from_the_heads_ov_eigenvalues():
    at = page("one layer")
    zoo_answer = reveal(at, "copying L0H0")[0]
    o = circuits.one_layer(zoo.load("attn-only-1l"), (0, 2, 3))
    assert zoo_answer == ("yes" if o.copying[0] > o.copying_bar else "no")
    model = Transformer(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_vocab=50, n_ctx=16, seed=0))
    at = open_page_with_model(FILES["one layer"], model,
                              **{"c_model_attn-only-1l": "the sidebar's model"})
    random_answer = reveal(at, "copying L0H0")[0]
    o = circuits.one_layer(model, (0, 2, 3))
    assert random_answer == ("yes" if o.copying[0] > o.copying_bar else "no") != zoo_answer


def test_the_ablation_question_accepts_every_head_the_ablation_breaks():
    at = page("two layers")
    zoo_answer = reveal(at, "ablation")[0]
    for head in ("L1H2", "L1H0"):  # a broken head other than the best one is right; an unbroken one is not
        at.radio(key="predict ablation").set_value(head).run()
        mark = next(m.value for m in at.markdown if m.value.startswith("This run: **"))
        assert ("✓ as you predicted" in mark) == (head in induction.induction_circuit(zoo.load("attn-only-2l")).broken)
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()     # gelu-2l
    sidebar_answer = reveal(at, "ablation")[0]
    expected = [", ".join(induction.induction_circuit(zoo.load(name)).broken) or "none of them"
                for name in ("attn-only-2l", "gelu-2l")]
    assert [zoo_answer, sidebar_answer] == expected == ["L1H1, L1H2, L1H3", "none of them"]


@pytest.fixture
def fresh_caches():
    """The page's cached checkpoint scores, forgotten before and after a test that changes them."""
    st.cache_data.clear()
    yield
    st.cache_data.clear()


def test_the_phase_change_question_finds_the_jump_in_the_checkpoints_scores(monkeypatch, fresh_caches):
    shipped = induction.phase_change("attn-only-2l")
    answer = reveal(page("the phase change"), "jump")[0]
    low, high = (int(end.replace(",", "")) for end in answer.split(" to "))
    assert low <= shipped.jump[1] <= high and shipped.jump[1] == shipped.formed_at and answer == "0 to 1,200"
    # the same steps, with the score rising between 4,500 and 4,800 instead
    late = [0.05] * 16 + [0.9] * 5
    monkeypatch.setattr(induction, "phase_change", costs(induction.phase_change.estimate_mb)(
        lambda name: dataclasses.replace(shipped, induction=late, formed_at=shipped.steps[16])))
    st.cache_data.clear()
    moved = reveal(page("the phase change"), "jump")[0]
    assert moved == "3,900 to 4,800"  # the bin holding step 4,800, the first checkpoint past the jump


def exercise_answer(at: AppTest) -> list[str]:
    at.button(key="reveal button previous-token head").click().run()
    (shown,) = [found[1] for m in at.markdown if (found := re.match(r"\*\*(.+?)\*\*\. Mean attention", m.value))]
    return shown.split(", ")


def test_the_previous_token_exercise_is_checked_against_the_live_scores():
    at = page("two layers")
    assert exercise_answer(at) == induction.two_layers(zoo.load("attn-only-2l"), 0).previous_token_heads == ["L0H1"]
    at.selectbox(key="exercise previous-token head").set_value("L0H1").run()
    assert any(m.value == ":green[**✓ right**]" for m in at.markdown)
    at.selectbox(key="exercise previous-token head").set_value("L0H0").run()
    assert any(m.value == ":red[**✗ not this one: try again**]" for m in at.markdown)
    at = page("two layers", model="copying-2l", **{"c_model_attn-only-2l": "the sidebar's model"})
    assert reading(at) == "copying-2l"
    assert exercise_answer(at) == induction.two_layers(zoo.load("copying-2l"), 0).previous_token_heads == ["L0H0"]


def test_activation_patching_finds_the_previous_token_heads_path_into_an_induction_heads_keys():
    at = page("two layers")
    p = patching.patching(zoo.load("attn-only-2l"), 0)
    line = next(m.value for m in at.markdown if m.value.startswith("Logit difference: **"))
    assert f"**{p.strongest[0]} → {p.strongest[1]}**, effect **{p.strongest[2]:.0%}** — :green[**✓ it carries" in line
    assert ":green[**✓ a previous-token head" in line and ":green[**✓ an induction head" in line
    assert line.endswith("what the ablation above found by removing it.")
    assert patching_charts(at) == 4


def patching_charts(at: AppTest) -> int:
    """The patching section's heatmaps on the page (each title says what is corrupted)."""
    return sum("corrupted" in json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart"))


def test_the_patching_question_is_graded_by_its_rule_and_hides_its_evidence_until_revealed():
    at = page("two layers", read=False)
    assert patching_charts(at) == 0 and not any(m.value.startswith("Logit difference:") for m in at.markdown)
    answer, _ = reveal(at, "patching")
    carriers = patching.patching(zoo.load("attn-only-2l"), 0).carriers
    assert answer == ", ".join(carriers) and carriers == ("L1H3",) and patching_charts(at) == 4
    for head in ("L1H3", "L1H1"):
        at.radio(key="predict patching").set_value(head).run()
        mark = next(m.value for m in at.markdown if m.value.startswith("This run: **") and "keys" in m.value)
        assert ("✓ as you predicted" in mark) == (head in carriers)
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()     # gelu-2l: no prediction to break
    assert reveal(at, "patching")[0] == "none of them"
    assert any(m.value.startswith("**Nothing to break.** gelu-2l's logit difference") for m in at.markdown)
