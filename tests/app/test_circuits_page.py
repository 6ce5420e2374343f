"""AppTest for the Circuits page: every section, its widgets, and the numbers it checks."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.helpers import open_page


def page(**state) -> AppTest:
    return open_page("app_pages/circuits.py", **state)


def numbers(at: AppTest, pattern: str) -> list[float]:
    found = [match for md in at.markdown for match in re.findall(pattern, md.value)]
    return [float(x) for match in found for x in (match if isinstance(match, tuple) else (match,))]


def test_zero_layers_kl_and_token_table():
    at = page(section="zero layers")
    assert not at.error
    kl, entropy = numbers(at, r"\*\*([\d.]+) nats\*\*")
    assert kl < 0.1 * entropy and 2.5 < entropy < 3.5
    table = at.dataframe[0].value
    assert len(table) == 8 and table["model probability"].is_monotonic_decreasing
    at.selectbox(key="z_token").select_index(5).run()
    assert not at.exception and not at.dataframe[0].value.equals(table)


def test_one_layer_copying_and_path_expansion():
    at = page(section="one layer")
    assert not at.error and "FAIL" not in " ".join(m.value for m in at.markdown)
    assert any("4 of 4 heads copy" in m.value for m in at.markdown)
    assert numbers(at, r"max \|difference\| \*\*([-+.e\d]+)\*\*")[0] <= 1e-4
    at.slider(key="c_head").set_value(3).run()
    assert not at.exception and len(at.dataframe[0].value) == 15
    at.text_input(key="c_prompt").set_value("return the value").run()
    assert not at.exception and numbers(at, r"max \|difference\| \*\*([-+.e\d]+)\*\*")[0] <= 1e-4


def test_two_layers_name_the_circuit_and_prove_it_by_ablation():
    at = page(section="two layers")
    assert not at.error
    circuit = next(m.value for m in at.markdown if m.value.startswith("**The circuit, as found.**"))
    assert "L0H1 is a previous-token head" in circuit and "L1H1 K-composes with it" in circuit
    k_composition, ceiling = numbers(at, r"K-composition is \*\*([\d.]+)\*\*.*?ceiling of \*\*([\d.]+)\*\*")
    assert 0.088 < k_composition < ceiling == pytest.approx(0.221, abs=0.01)  # above random, below what spectra allow
    before, after = numbers(at, r"falls from \*\*([\d.]+)\*\* to \*\*([\d.]+)\*\*")
    assert before >= 0.9 and after < 0.1
    virtual = at.dataframe[0].value
    assert list(virtual.columns) == ["virtual head", "V-composition", "‖W_OV^0 W_OV^1‖_F"] and len(virtual) == 4


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


def test_sections_work_on_the_sidebars_model_or_say_why_not():
    at = page(section="one layer")
    at.radio(key="c_model_attn-only-1l").set_value("the sidebar's model").run()   # gelu-2l: LayerNorm
    assert not at.exception and not at.error
    assert any("exact only without LayerNorm" in i.value for i in at.info)
    at = page(section="two layers")
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()   # gelu-2l has two layers
    assert not at.exception and not at.error
    assert any(m.value.startswith("**The circuit, as found.**") for m in at.markdown)
    at = page(section="zero layers")
    at.radio(key="c_model_attn-only-0l").set_value("the sidebar's model").run()
    assert any("does not fit this section" in i.value for i in at.info)
    assert not at.exception and not at.error


def test_a_random_model_without_tokenizer_uses_ids():
    at = page(section="two layers", model="random")
    at.radio(key="c_model_attn-only-2l").set_value("the sidebar's model").run()
    assert not at.exception and not at.error
    assert any("no tokenizer" in i.value for i in at.info)
