"""AppTest for the Circuits page: every section, its widgets, and the numbers it checks."""

import dataclasses
import re

import pytest
from streamlit.testing.v1 import AppTest

from mechlib import circuits, zoo
from mechlib.checks import Check
from tests.app.helpers import open_page, shown_checks

REAL_ONE_LAYER = circuits.one_layer


def page(**state) -> AppTest:
    return open_page("app_pages/circuits.py", **state)


def numbers(at: AppTest, pattern: str) -> list[float]:
    found = [match for md in at.markdown for match in re.findall(pattern, md.value)]
    return [float(x) for match in found for x in (match if isinstance(match, tuple) else (match,))]


def test_zero_layers_show_four_computed_figures_and_verdicts_from_them():
    at = page(section="zero layers")
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
    assert any("shortformer" in c.value and "W_E W_U + b_U exactly" in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert len(table) == 8 and table["model probability"].is_monotonic_decreasing
    at.selectbox(key="z_token").select_index(5).run()
    assert not at.exception and not at.dataframe[0].value.equals(table)


def test_one_layer_copying_and_path_expansion_at_the_models_tolerance():
    at = page(section="one layer")
    assert not at.error and "FAIL" not in " ".join(m.value for m in at.markdown)
    (bar,) = numbers(at, r"\*\*4 of 4 heads copy\*\*: a head counts when its copying score is above what a random "
                         r"head reaches, \*\*([\d.]+)\*\*")
    assert bar == round(circuits.random_copying(1000, 128, 32).bar(4), 2) and 0.05 < bar < 0.2   # the shipped heads: 0.4
    ((difference, scaled, tolerance, passed),) = shown_checks(at)                    # the path expansion, the only one
    assert passed and scaled <= tolerance == 1e-5 and difference <= 1e-4              # float32's tolerance, not a literal
    assert any(m.value.startswith("**Path expansion**") and "forward pass, in the model's own precision: max" in m.value
               for m in at.markdown)
    at.slider(key="c_head").set_value(3).run()
    assert not at.exception and len(at.dataframe[0].value) == 15
    at.text_input(key="c_prompt").set_value("return the value").run()
    assert not at.exception
    ((difference, _, _, passed),) = shown_checks(at)
    assert passed and difference <= 1e-4


def one_layer_with_a_wrong_path_sum(model, head, ids) -> circuits.OneLayer:
    """The real reading, but the paths' sum misses the logits by 0.5."""
    return dataclasses.replace(REAL_ONE_LAYER(model, head, ids), path_check=Check(0.5, 0.5, 1e-5))


def test_a_failing_path_expansion_is_shown_red(monkeypatch):
    monkeypatch.setattr(circuits, "one_layer", one_layer_with_a_wrong_path_sum)
    at = page(section="one layer")
    assert not at.exception and not at.error
    assert shown_checks(at) == [(0.5, 0.5, 1e-5, False)]
    line = next(m.value for m in at.markdown if m.value.startswith("**Path expansion**"))
    assert line.endswith("max |difference| **5.0e-01**, scaled **5.0e-01** against a tolerance of **1e-05** · "
                         "max(1, |reference|) — :red[**✗ FAIL**].")


def test_two_layers_name_the_circuit_and_prove_it_by_ablation():
    at = page(section="two layers")
    assert not at.error
    assert at.subheader[0].value.endswith("(attn-only-2l)")
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
    at = page(section="two layers")
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()
    assert not at.exception and not at.error
    assert at.subheader[0].value.endswith("(gelu-2l)")
    verdict = next(m.value for m in at.markdown if m.value.startswith("**No induction circuit found in gelu-2l.**"))
    assert re.search(r"no previous-token head before layer 1: the best, L0H\d, scores 0\.1\d < 0\.5", verdict)
    assert "no induction head" in verdict
    assert verdict.endswith("; the ablation is not tested: no induction head found.") and "ablating" not in verdict
    assert not any("is a previous-token head" in m.value or "Ablation proof" in m.value for m in at.markdown)


def test_phase_change_replays_the_snapshots():
    at = page(section="the phase change")
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


def test_sections_work_on_the_sidebars_model_or_say_why_not():
    at = page(section="one layer")
    at.radio(key="c_model_attn-only-1l").set_value("the sidebar's model").run()   # gelu-2l: LayerNorm
    assert not at.exception and not at.error
    assert any("exact only without LayerNorm" in i.value for i in at.info)
    at = page(section="zero layers")
    at.radio(key="c_model_attn-only-0l").set_value("the sidebar's model").run()
    assert any("does not fit this section" in i.value for i in at.info)
    assert not at.exception and not at.error


def test_a_random_model_without_tokenizer_uses_ids():
    at = page(section="two layers", model="random")
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()
    assert not at.exception and not at.error
    assert any("no tokenizer" in i.value for i in at.info)
    assert any(m.value.startswith("**No induction circuit found in the sidebar's random model.**") for m in at.markdown)


@pytest.mark.parametrize("vocab, ctx", [(3, 2), (1000, 6)])
def test_a_random_model_too_small_to_score_induction_gets_the_zoo_model_and_the_reason(vocab, ctx):
    """Two layers, but a context or vocabulary too small for repeated sequences: the section says what it needs
    and shows attn-only-2l instead of failing."""
    at = page(section="two layers", model="random", vocab=vocab, ctx=ctx)
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()
    assert not at.exception and not at.error
    assert any("does not fit this section" in i.value and "induction scores need a context of 7 tokens or more" in i.value
               for i in at.info)
    assert at.subheader[0].value.endswith("(attn-only-2l)")


def test_a_random_model_with_one_dimensional_heads_claims_no_copying():
    """d_head 1: a random head scores ±1, so the bar lies above 1 and the page says no head can pass it."""
    at = page(section="one layer", model="random", layers=1, d_model=16, heads=16)
    at.radio(key="c_model_attn-only-1l").set_value("the sidebar's model").run()
    assert not at.exception and not at.error
    line = next(m.value for m in at.markdown if "heads copy" in m.value)
    assert line.startswith("**0 of 16 heads copy**") and line.endswith(", so none can: a score is at most 1.")


def test_under_the_hood_shows_the_reference_and_the_fast_path_one_click_further():
    at = page(section="zero layers")
    assert len(at.code) == 1 and "def composition_score_reference" in at.code[0].value
    at.toggle(key="c_fast").set_value(True).run()
    assert not at.exception and "def composition_scores" in at.code[1].value and "cholesky" in at.code[1].value
