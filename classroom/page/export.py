"""Slide-ready export: figures as PNG and SVG, tables as CSV, everything in one zip.

Rendering is plotly's own static export, kaleido 1.x, which drives the installed Chromium (Debian's
``/usr/bin/chromium``, or chromium / chromium-browser / google-chrome on PATH). No browser is ever downloaded:
where none is found, PNG and SVG raise :class:`ExportError` and :func:`bundle` falls back to plotly JSON.

One headless Chromium is kept open for the process (started by the first render, reused afterwards) and
renders are serialised by one process-wide lock, so thirty students exporting at once queue for one browser
rather than starting thirty. A render that fails closes that browser; the next render starts a fresh one.
"""

import asyncio
import atexit
import io
import re
import shutil
import threading
import zipfile
from collections.abc import Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import kaleido
import pandas as pd
import plotly
import plotly.graph_objects as go

__all__ = ["ExportError", "SCALE", "png", "svg", "csv", "bundle", "available", "size"]

SCALE = 3  # PNG pixels per layout pixel: a figure drawn 780 × 420 on screen becomes 2340 × 1260, sharp on a projector
DEFAULT_SIZE = (700, 500)  # plotly's size for a figure whose layout sets none (the app sets both: sections.figure)
BROWSERS = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
TIMEOUT_S = 60  # to start the browser, and to render one figure
WAIT_S = 20     # the longest a download waits for the browser while it draws for others
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"  # the page loads nothing from the web
NO_BROWSER = "PNG and SVG export need Chromium (Debian: apt-get install chromium); none was found"
T = TypeVar("T")


class ExportError(Exception):
    """PNG or SVG cannot be rendered here; the message says what is missing."""


def _find_browser() -> str | None:
    """The first of ``BROWSERS`` that is an executable file here, as a path."""
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    return None


def available() -> str | None:
    """``None`` where PNG and SVG can be rendered (a browser is installed; it is started by the first render, not
    here), else the reason, in ExportError's words."""
    return NO_BROWSER if _find_browser() is None else None


class _Browser:
    """One kaleido.Kaleido (a headless Chromium with plotly.js loaded) on an event loop in its own thread."""

    def __init__(self, path: str):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="kaleido", daemon=True).start()
        try:
            self.kaleido = self._run(self._open(path))
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise

    async def _open(self, path: str) -> kaleido.Kaleido:
        browser = kaleido.Kaleido(path=path, timeout=TIMEOUT_S, plotlyjs=str(PLOTLY_JS), mathjax=False)
        await browser.open()
        return browser

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(TIMEOUT_S)

    def render(self, figure: dict, opts: dict) -> bytes:
        return self._run(self.kaleido.calc_fig(figure, opts))

    def close(self) -> None:
        try:
            self._run(self.kaleido.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)


_lock = threading.Lock()
_browser: _Browser | None = None


def _close_browser() -> None:
    global _browser
    if _browser is not None:
        browser, _browser = _browser, None
        browser.close()


atexit.register(_close_browser)


def _start(path: str) -> _Browser:
    try:
        return _Browser(path)
    except Exception as error:
        raise ExportError(f"PNG and SVG export need a working Chromium; {path} did not start ({error!r})") from error


def size(fig: go.Figure) -> tuple[int, int]:
    """(width, height) in layout px that ``fig`` is rendered at: its layout's, else ``DEFAULT_SIZE``'s. A figure
    the app shows has both set to the size it has on screen, so its export has the screen's aspect ratio."""
    return fig.layout.width or DEFAULT_SIZE[0], fig.layout.height or DEFAULT_SIZE[1]


def _render(fig: go.Figure, format: str, scale: int) -> bytes:
    """``fig`` drawn by Chromium at ``size(fig)`` times ``scale``; ``fig`` is not touched."""
    global _browser
    if (path := _find_browser()) is None:
        raise ExportError(NO_BROWSER)
    width, height = size(fig)
    opts = {"format": format, "width": width, "height": height, "scale": scale}
    if not _lock.acquire(timeout=WAIT_S):  # one browser draws for the whole server: a queue past this is refused
        raise ExportError(f"the server has been drawing other students' figures for {WAIT_S} s; try again shortly")
    try:
        if _browser is None:
            _browser = _start(path)
        return _browser.render(fig.to_dict(), opts)  # to_dict: a copy, so the figure itself is never changed
    except ExportError:
        raise
    except Exception as error:  # a render that timed out or failed: the next export starts a new browser
        try:
            _close_browser()
        except Exception:  # noqa: BLE001 (a browser that is already gone)
            pass
        raise ExportError(f"Chromium failed to draw the figure ({error!r})") from error
    finally:
        _lock.release()


def png(fig: go.Figure, scale: int = SCALE) -> bytes:
    """The figure as PNG: ``size(fig)`` × scale pixels, its aspect ratio the layout's."""
    return _render(fig, "png", scale)


def svg(fig: go.Figure) -> bytes:
    """The figure as SVG, ``size(fig)`` px."""
    return _render(fig, "svg", 1)


def csv(table: pd.DataFrame) -> bytes:
    """The table as CSV: UTF-8, a header row, no index."""
    return table.to_csv(index=False).encode("utf-8")


def file_name(name: str) -> str:
    """``name`` as a file name: lowercase, [a-z0-9_-] only."""
    return re.sub(r"[^a-z0-9_-]+", "_", name.lower()).strip("_") or "unnamed"


def _safe_names(names: list[str]) -> dict[str, str]:
    """Each name as a file name (``file_name``), unique (a repeat gets -2, -3, …)."""
    safe: dict[str, str] = {}
    for name in names:
        stem = file_name(name)
        candidate, n = stem, 1
        while candidate in safe.values():
            n += 1
            candidate = f"{stem}-{n}"
        safe[name] = candidate
    return safe


def bundle(figures: dict[str, go.Figure], tables: dict[str, pd.DataFrame], numbers: dict[str, str],
           snippets: dict[str, str]) -> bytes:
    """One zip for a slide deck: figures/<name>.png and .svg, tables/<name>.csv, numbers.csv (name,value),
    snippets/<name>.py and README.txt listing them. Where PNG/SVG cannot be rendered (:class:`ExportError`) each
    figure is figures/<name>.json (plotly JSON, ``plotly.io.read_json`` reopens it) and README.txt says why."""
    files: dict[str, bytes] = {}
    lines: list[str] = []
    figure_names = _safe_names(list(figures))
    try:
        for name, fig in figures.items():
            stem = f"figures/{figure_names[name]}"
            files[f"{stem}.png"], files[f"{stem}.svg"] = png(fig), svg(fig)
            lines.append(f"{stem}.png, {stem}.svg: {name}")
    except ExportError as error:
        files = {f"figures/{figure_names[name]}.json": fig.to_json().encode("utf-8") for name, fig in figures.items()}
        lines = [f"figures/{figure_names[name]}.json: {name}" for name in figures]
        lines.insert(0, f"Figures are plotly JSON, not PNG/SVG: {error}.")
    for name, safe in _safe_names(list(tables)).items():
        files[f"tables/{safe}.csv"] = csv(tables[name])
        lines.append(f"tables/{safe}.csv: {name}")
    files["numbers.csv"] = csv(pd.DataFrame({"name": list(numbers), "value": list(numbers.values())}, dtype=str))
    lines.append("numbers.csv: " + (", ".join(numbers) or "no numbers"))
    for name, safe in _safe_names(list(snippets)).items():
        files[f"snippets/{safe}.py"] = snippets[name].encode("utf-8")
        lines.append(f"snippets/{safe}.py: {name}")
    files["README.txt"] = ("\n".join(lines) + "\n").encode("utf-8")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return buffer.getvalue()
