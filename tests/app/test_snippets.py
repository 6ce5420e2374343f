"""Every figure's "reproduce in Python" snippet runs as printed and rebuilds the figure the page shows: the
same traces, value for value. Each page is opened as a fresh session would see it, and on a second setting."""

import json

import pytest

from tests.app.helpers import open_exports, open_page

PAGES = {  # page: settings of a second session beyond the defaults, so the snippets' values are not all defaults
    "app_pages/equivalence.py": {"H": 4, "S": 6},
    "app_pages/patterns.py": {"input": "repeated random tokens", "head": 1},
    "app_pages/residual.py": {"input": "random tokens"},
    "app_pages/circuits_one.py": {"c_head": 2},
    "app_pages/circuits_two.py": {},
    "app_pages/circuits_phase.py": {"c_step": 1200},
    "app_pages/lstm.py": {"l_seg": 6},
    "app_pages/which_input.py": {"w_baseline": "mean", "w_metric": "log-probability"},
    "app_pages/dictionary.py": {"d_sparsity": 0.0, "d_decay": 0.9, "d_n": 6, "d_m": 3},
}


def snippets_and_charts(at) -> list[tuple[str, dict]]:
    snippets = [code.value for code in at.code if code.value.rstrip().endswith("fig.show()")]
    charts = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    assert len(snippets) == len(charts) > 0, (len(snippets), len(charts))
    return list(zip(snippets, charts))


def rebuilt(snippet: str) -> dict:
    namespace: dict = {}
    exec(compile(snippet.replace("fig.show()", ""), "<snippet>", "exec"), namespace)  # noqa: S102
    return json.loads(namespace["fig"].to_json())


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("setting", ["fresh", "changed"])
def test_every_snippet_rebuilds_its_figure(page, setting):
    at = open_exports(open_page(page, **(PAGES[page] if setting == "changed" else {})))
    for snippet, chart in snippets_and_charts(at):
        fig = rebuilt(snippet)
        assert fig["data"] == chart["data"], snippet
        assert title(fig) == title(chart), snippet


def title(figure: dict) -> str:
    """The figure's title as words: the page breaks it into lines that fit the chart's width on screen."""
    return figure["layout"].get("title", {}).get("text", "").replace("<br>", " ")
