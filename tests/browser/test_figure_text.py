"""Every figure of every page, exported as its export menu exports it, keeps its text readable: every text
element lies inside the image, no two text elements overlap (an axis title on its tick labels, a legend on an
axis title, colour-bar ticks on each other), and the figure has the size the page draws it at.

The pages run in AppTest (reading mode, which draws every question's evidence, and presentation mode, every
part and slide with every answer revealed); each figure is rendered by ``classroom.page.export.svg`` and measured in
headless Chromium. A text element's box is the font's em box of its glyphs, less the font's internal leading
(``LEADING`` of its height at the top and at the bottom), turned as the text is turned.
"""

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import plotly.graph_objects as go
import pytest
from streamlit.testing.v1 import AppTest

from classroom import keys
from classroom.page import export, layout
from tests.app.helpers import APP
from tests.browser.conftest import wait_for_app

PAGES = ["app_pages/equivalence.py", "app_pages/patterns.py", "app_pages/residual.py", "app_pages/circuits_zero.py",
         "app_pages/circuits_one.py", "app_pages/circuits_two.py", "app_pages/circuits_phase.py", "app_pages/lstm.py",
         "app_pages/which_input.py", "app_pages/dictionary.py"]
LEADING = 0.15  # of a text's em box, top and bottom, that holds no ink
SLACK_PX = 1    # two texts whose boxes meet by no more than this do not overlap

MEASURE = Path(__file__).with_name("figure_text.js").read_text()


def _charts(at: AppTest) -> list[dict]:
    assert not at.exception, at.exception
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def _reveal_all(at: AppTest) -> None:
    """Press every "Reveal" the page shows, as a teacher would, until no question is left closed."""
    for _ in range(20):
        closed = [b for b in at.button if (b.key or "").startswith("reveal button") and not b.label.startswith("Hide")]
        if not closed:
            return
        closed[0].click().run()
    raise AssertionError("the page kept asking for reveals")


def _open(page: str, **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=240)
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(page).run()
    return at


def shown_figures() -> Iterator[tuple[str, int, dict]]:
    """Every figure every page draws, as it is drawn: (where, the width its place has in px, the figure as plotly
    JSON). Reading mode draws everything at once; presentation mode is walked through every slide of every part,
    each question revealed (a part's slides are counted once its evidence is drawn)."""
    seen: set[str] = set()

    def new(where: str, at: AppTest) -> Iterator[tuple[str, int, dict]]:
        room = layout.SLIDE_PX if at.session_state.get(keys.PRESENT) else layout.PAGE_PX
        for spec in _charts(at):
            if (name := f"{where}: {spec['layout'].get('title', {}).get('text', '')}") not in seen:
                seen.add(name)
                yield name, room, spec

    for page in PAGES:
        yield from new(f"{page}, reading", _open(page, **{keys.READ: True}))
        at = _open(page, **{keys.PRESENT: True})
        for part in at.selectbox(key=keys.PART).options:
            at.selectbox(key=keys.PART).set_value(part).run()
            _reveal_all(at)
            for slide in range(at.session_state[keys.COUNTS].get(part, 1)):
                if slide:  # the first is drawn already
                    at.session_state[keys.SUB] = slide
                    at.run()
                    _reveal_all(at)
                yield from new(f"{page}, {part}, slide {slide + 1}", at)


def measure(page, svg: bytes) -> dict:
    """{size: [width, height], clipped: [text outside the image], overlaps: [pairs of texts that overlap]}."""
    page.set_content(f"<html><body style='margin:0'>{svg.decode()}</body></html>")
    return page.evaluate(MEASURE, {"leading": LEADING, "slack": SLACK_PX})


def test_every_exported_figure_has_its_text_inside_and_apart_at_the_screens_size(page):
    with ThreadPoolExecutor(1) as renderer:  # Chromium draws one page's figures while the next page runs
        shown = [(where, room, spec, renderer.submit(export.svg, go.Figure(spec)))
                 for where, room, spec in shown_figures()]
        assert len(shown) >= 60, [where for where, *_ in shown]  # every page drew its figures in both modes
        problems = {}
        for where, room, spec, svg in shown:
            layout = spec["layout"]
            assert 0 < layout["width"] <= room and layout["height"] > 0, (where, layout.get("width"))
            found = measure(page, svg.result())
            assert found["size"] == [layout["width"], layout["height"]], where  # the export draws the screen's size
            if found["clipped"] or found["overlaps"]:
                problems[where] = found["clipped"] + found["overlaps"]
    assert not problems, "\n".join(f"{where}: {texts}" for where, texts in problems.items())


SCREENS = [  # (path, viewport): reading mode (every chart drawn) with the sidebar open, with two charts side by side,
    # and presentation mode on two projectors, on a slide with a chart and no question
    ("equivalence?read=true", (1280, 720)), ("lstm?present=true", (1280, 720)), ("lstm?present=true", (1920, 1080))]


@pytest.mark.parametrize("path, viewport", SCREENS)
def test_charts_on_screen_have_the_size_their_export_renders(browser, server, path, viewport):
    """Each chart on screen is drawn at its figure's layout size, which is the size its PNG and SVG render at
    (times SCALE for the PNG): the export's aspect ratio is the screen's, to the pixel."""
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    page = context.new_page()
    page.goto(f"{server}/{path}")
    wait_for_app(page, charts=1)
    drawn = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')]
        .map(plot => { const box = plot.querySelector('.main-svg').getBoundingClientRect();
                       return [box.width, box.height, plot.layout.width, plot.layout.height]; })""")
    context.close()
    assert drawn and all((width, height) == (layout_width, layout_height)
                         for width, height, layout_width, layout_height in drawn), drawn
