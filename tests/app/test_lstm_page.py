"""AppTest for the LSTM analogy page: every widget moved, the decompositions checked against their shown
tolerance, the sizes and conclusions read from the models and the table."""

import json
import re

from streamlit.testing.v1 import AppTest

from mechlib import zoo
from tests.app.helpers import open_page

CHECK = re.compile(r"max \|difference\| \*\*([-+.e\d]+)\*\*, scaled \*\*([-+.e\d]+)\*\* against a tolerance of "
                   r"\*\*([-+.e\d]+)\*\* · max\(1, \|value\|\) — :(green|red)\[\*\*(✓ pass|✗ FAIL)\*\*\]")


def page(**state) -> AppTest:
    return open_page("app_pages/lstm.py", **state)


def checks(at: AppTest) -> list[tuple[float, float, float, bool]]:
    """(max |difference|, scaled, tolerance, shown as passed) of each check line."""
    return [(float(d), float(s), float(t), mark == "✓ pass")
            for md in at.markdown for d, s, t, _, mark in CHECK.findall(md.value)]


def assert_checks_hold(at: AppTest) -> None:
    shown = checks(at)
    assert len(shown) == 2
    for difference, scaled, tolerance, passed in shown:
        assert passed == (scaled <= tolerance)   # the badge follows the numbers it shows
        assert difference >= scaled and passed   # and on the shipped models every check passes
    assert not any("FAIL" in md.value or "✗" in md.value for md in at.markdown)


def chart(at: AppTest, title: str) -> dict:
    specs = [json.loads(c.proto.spec)["layout"] for c in at.get("plotly_chart")]
    return next(s for s in specs if s["title"]["text"].startswith(title))


def test_defaults_show_the_analogy_and_both_decompositions():
    at = page()
    assert not at.exception and not at.error
    assert_checks_hold(at)
    assert list(at.table[0].value.index) == ["cell state c_t", "input gate i_t", "output gate o_t"]
    assert len(at.table[1].value) == 4  # where the analogy breaks
    assert "nothing is ever erased" not in at.table[1].value.to_string()
    cancelling = next(md.value for md in at.markdown if "components write against x̂_final" in md.value)
    assert re.search(r"Here \d+ of \d+ components", cancelling) and "**-" in cancelling


def test_parameter_counts_are_the_models_own():
    intro = page().markdown[0].value
    for name in ("lstm", "attn-only-2l"):
        assert f"`{name}` with {sum(p.numel() for p in zoo.load(name).parameters()):,}" in intro


def test_axes_name_heads_and_time_steps():
    at = page()
    assert chart(at, "‖message‖ each last-layer head")["yaxis"]["title"]["text"] == "head"
    assert chart(at, "What each step left in the final cell")["xaxis"]["title"]["text"] == "time step: token"


def test_conclusions_read_the_table():
    at = page()
    table = at.dataframe[0].value.set_index("model")
    text = " ".join(md.value for md in at.markdown)
    repeat = table["second occurrence (nats)"].idxmin()
    held_out = table["held-out text (nats per character)"].idxmin()
    assert f"On the second occurrence the {repeat} predicts better" in text
    assert f"On ordinary held-out text the {held_out} predicts better" in text
    assert repeat == "transformer (attn-only-2l)" and held_out == "LSTM"  # the shipped models


def test_the_separating_test_and_every_widget():
    at = page()
    table = at.dataframe[0].value.set_index("model")
    assert table.loc["transformer (attn-only-2l)", "second occurrence (nats)"] < 1.0
    assert table.loc["LSTM", "second occurrence (nats)"] > 3.0
    at.slider(key="l_test").set_value(8).run()
    assert not at.exception and at.dataframe[0].value.set_index("model").loc["LSTM", "second occurrence (nats)"] > 3.0
    assert at.slider(key="l_test").max == zoo.load("attn-only-2l").cfg.n_ctx // 2 - 1
    at.slider(key="l_seg").set_value(6).run()
    assert not at.exception
    assert_checks_hold(at)
    at.radio(key="l_input").set_value("prompt").run()
    at.text_input(key="l_prompt").set_value("x" * 80).run()
    assert not at.exception and any("only the first 48 are used" in i.value for i in at.info)
    assert_checks_hold(at)
