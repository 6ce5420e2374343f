"""AppTest for the LSTM analogy page: every widget moved, the decompositions checked, the separating test shown."""

import re

from streamlit.testing.v1 import AppTest

from tests.app.helpers import open_page


def page(**state) -> AppTest:
    return open_page("app_pages/lstm.py", **state)


def checks(at: AppTest) -> list[float]:
    return [float(x) for md in at.markdown for x in re.findall(r"max \|difference\| \*\*([-+.e\d]+)\*\*", md.value)]


def test_defaults_show_the_analogy_and_both_decompositions():
    at = page()
    assert not at.exception and not at.error
    differences = checks(at)
    assert len(differences) == 2 and all(d <= 1e-4 for d in differences)
    assert list(at.table[0].value.index) == ["cell state c_t", "input gate i_t", "output gate o_t"]
    assert len(at.table[1].value) == 4  # where the analogy breaks


def test_the_separating_test_and_every_widget():
    at = page()
    table = at.dataframe[0].value.set_index("model")
    assert table.loc["transformer (attn-only-2l)", "second occurrence (nats)"] < 1.0
    assert table.loc["LSTM", "second occurrence (nats)"] > 3.0
    at.slider(key="l_test").set_value(8).run()
    assert not at.exception and at.dataframe[0].value.set_index("model").loc["LSTM", "second occurrence (nats)"] > 3.0
    at.slider(key="l_seg").set_value(6).run()
    assert not at.exception and len(checks(at)) == 2
    at.radio(key="l_input").set_value("prompt").run()
    at.text_input(key="l_prompt").set_value("x" * 80).run()
    assert not at.exception and any("only the first 48" in i.value for i in at.info)
