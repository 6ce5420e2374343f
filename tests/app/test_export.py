"""Slide export: PNG at layout size × scale, SVG at layout size, CSV that reads back, and a zip that says what it holds.

Tests that render need Chromium (the ``chromium`` fixture, tests/unit/conftest.py).
"""

import io
import re
import struct
import threading
import zipfile
from xml.etree import ElementTree

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from classroom.page import export
from mechlib import figures

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NO_CHROMIUM = "PNG and SVG export need Chromium (Debian: apt-get install chromium); none was found"


@pytest.fixture
def no_chromium(monkeypatch):
    monkeypatch.setattr(export, "_find_browser", lambda: None)


def bar(width: int | None = 460, height: int | None = 400) -> go.Figure:
    return go.Figure(go.Bar(x=["a", "b", "c"], y=[3, 1, 2]), layout={"width": width, "height": height})


def heatmap() -> go.Figure:
    z = np.arange(900.0).reshape(30, 30)  # [query_pos, key_pos]
    return go.Figure(go.Heatmap(z=z, zmid=0, colorscale="RdBu"), layout={"width": 500, "height": 450, "title": "heads"})


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, which follows the 8-byte signature and its own length and type."""
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_is_layout_size_times_scale(chromium):
    assert png_size(export.png(bar(460, 400))) == (1380, 1200)
    assert png_size(export.png(bar(None, None), scale=1)) == (700, 500)


def test_a_shown_figures_png_has_its_aspect_ratio_at_least_twice_its_size(chromium):
    """The page draws a figure at ``figures.fit_width``'s size (a column 382 px wide, a slide 1100 px); its PNG is that
    size times SCALE ≥ 2, so the aspect ratio is the screen's exactly."""
    assert export.SCALE >= 2
    bars = figures.component_bars(np.array([1.0, -0.5, 2.0]), ["embed", "L0H0", "L0 MLP"], "ledger", "length")
    for width in (382, 1100):
        shown = figures.fit_width(go.Figure(bars), width)
        png_width, png_height = png_size(export.png(shown))
        assert (png_width, png_height) == (width * export.SCALE, bars.layout.height * export.SCALE)
        assert png_width / png_height == pytest.approx(width / bars.layout.height, rel=1e-9)
        assert export.size(shown) == (width, bars.layout.height)


def test_svg_has_the_layout_size(chromium):
    root = ElementTree.fromstring(export.svg(bar(460, 400)))
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert (root.get("width"), root.get("height")) == ("460", "400")


def test_export_leaves_the_figure_unchanged(chromium):
    fig = heatmap()
    before = fig.to_dict()
    export.png(fig)
    export.svg(fig)
    export.bundle({"heads": fig}, {}, {}, {})
    assert fig.to_dict() == before


def test_threads_exporting_at_once_each_get_their_own_figure(chromium):
    sizes: dict[int, tuple[int, int]] = {}

    def export_one(i: int) -> None:
        sizes[i] = png_size(export.png(bar(300 + 10 * i, 200), scale=1))

    threads = [threading.Thread(target=export_one, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sizes == {i: (300 + 10 * i, 200) for i in range(4)}


def test_csv_round_trips_with_a_header_and_no_index():
    table = pd.DataFrame({"head": ["0.1", "1.0"], "score": [0.25, -1.5], "token": ["→ a, b", "ü"]}, index=[7, 9])
    data = export.csv(table)
    assert data.decode("utf-8").splitlines()[0] == "head,score,token"
    read = pd.read_csv(io.BytesIO(data), dtype={"head": str})
    pd.testing.assert_frame_equal(read, table.reset_index(drop=True))


def test_bundle_holds_each_file_under_a_safe_unique_name(chromium):
    figures = {"QK circuit (L1)": bar(), "qk circuit (l1)": heatmap()}
    tables = {"Scores: head 1.0": pd.DataFrame({"head": ["1.0"], "score": [0.93]})}
    numbers = {"induction score": "0.93", "loss": "1.25 nats"}
    snippets = {"QK circuit (L1)": "circuits.qk(model, 1, 0)\n"}
    with zipfile.ZipFile(io.BytesIO(export.bundle(figures, tables, numbers, snippets))) as archive:
        assert sorted(archive.namelist()) == sorted([
            "figures/qk_circuit_l1.png", "figures/qk_circuit_l1.svg", "figures/qk_circuit_l1-2.png",
            "figures/qk_circuit_l1-2.svg", "tables/scores_head_1_0.csv", "numbers.csv", "snippets/qk_circuit_l1.py",
            "README.txt"])
        assert png_size(archive.read("figures/qk_circuit_l1-2.png")) == (1500, 1350)
        read = pd.read_csv(io.BytesIO(archive.read("numbers.csv")), dtype=str)
        assert read.to_dict("list") == {"name": ["induction score", "loss"], "value": ["0.93", "1.25 nats"]}
        assert archive.read("snippets/qk_circuit_l1.py").decode() == "circuits.qk(model, 1, 0)\n"
        readme = archive.read("README.txt").decode()
        assert "figures/qk_circuit_l1-2.png, figures/qk_circuit_l1-2.svg: qk circuit (l1)" in readme
        assert "tables/scores_head_1_0.csv: Scores: head 1.0" in readme


def test_without_chromium_png_and_svg_say_what_is_missing(no_chromium):
    assert export.available() == NO_CHROMIUM
    for render in (export.png, export.svg):
        with pytest.raises(export.ExportError) as raised:
            render(bar())
        assert str(raised.value) == NO_CHROMIUM


def test_a_browser_that_does_not_start_is_an_export_error(monkeypatch):
    monkeypatch.setattr(export, "_find_browser", lambda: "/nonexistent/chromium")
    monkeypatch.setattr(export, "_browser", None)  # the running one, if any, comes back after the test
    with pytest.raises(export.ExportError, match="^PNG and SVG export need a working Chromium; "
                                                 "/nonexistent/chromium did not start"):
        export.png(bar())
    assert export._browser is None


def test_without_chromium_bundle_holds_json_figures_and_says_why(no_chromium):
    fig = heatmap()
    data = export.bundle({"Heads": fig}, {"t": pd.DataFrame({"a": [1]})}, {"n": "2"}, {"s": "x = 1\n"})
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert sorted(archive.namelist()) == ["README.txt", "figures/heads.json", "numbers.csv", "snippets/s.py",
                                              "tables/t.csv"]
        assert pio.from_json(archive.read("figures/heads.json").decode()).to_dict() == fig.to_dict()
        readme = archive.read("README.txt").decode()
    assert readme.splitlines()[0] == f"Figures are plotly JSON, not PNG/SVG: {NO_CHROMIUM}."
    assert "figures/heads.json: Heads" in readme


class _Failing:
    def render(self, figure: dict, opts: dict) -> bytes:
        raise TimeoutError("no answer in 60 s")

    def close(self) -> None:
        raise RuntimeError("already gone")


def test_a_render_that_fails_is_an_export_error_and_the_zip_falls_back(monkeypatch):
    monkeypatch.setattr(export, "_find_browser", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(export, "_browser", _Failing())
    with pytest.raises(export.ExportError, match=r"^Chromium failed to draw the figure \(TimeoutError"):
        export.png(bar())
    assert export._browser is None  # the next export starts a new browser
    monkeypatch.setattr(export, "_start", lambda path: _Failing())
    names = zipfile.ZipFile(io.BytesIO(export.bundle({"bars": bar()}, {}, {}, {}))).namelist()
    assert "figures/bars.json" in names and not any(name.endswith(".png") for name in names)


def test_an_export_that_waits_too_long_for_the_browser_is_refused(monkeypatch):
    monkeypatch.setattr(export, "_find_browser", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(export, "WAIT_S", 0.2)
    with export._lock:  # another student's figure is being drawn
        with pytest.raises(export.ExportError, match=r"^the server has been drawing other students' figures"):
            export.svg(bar())


def colour_bar_ticks(svg: bytes) -> tuple[list[float], float]:
    """(y of each colour-bar tick label, their font size in px) in a plotly SVG."""
    bar = re.search(r'<g class="cbaxis.*?</g></g>', svg.decode())[0]
    labels = re.findall(r"<text[^>]*>", bar)
    ys = sorted(float(re.search(r"translate\(0,([-\d.]+)\)", label)[1]) for label in labels)
    return ys, float(re.search(r"font-size: ([\d.]+)px", bar)[1])


def test_a_three_row_depth_heatmaps_colour_bar_ticks_stay_apart(chromium):
    norms = np.array([np.linspace(1, 3, 16), np.linspace(10, 30, 16), np.linspace(20, 45, 16)])  # [boundary, pos]
    fig = figures.depth_heatmap(norms, [f"tok{i}" for i in range(16)])
    for shown in (figures.fit_width(go.Figure(fig), 462), figures.fit_width(figures.for_slides(fig), 1100)):
        ys, size = colour_bar_ticks(export.svg(shown))
        assert len(ys) >= 2 and min(np.diff(ys)) >= 1.2 * size, (ys, size)
