"""How long slide export takes: classroom.page.export's long-lived Chromium beside a fresh browser per call.

Run from the repository root: .venv/bin/python -m bench.export_speed
Figures: a 30 × 30 heatmap (500 × 450) and a 3-bar chart (460 × 400). Prints
  - the first png() of the process (it starts the one headless Chromium that every later call reuses);
  - per figure and format, the first call and the median of the next 5 (png() at scale 3, svg());
  - side by side, a fresh browser per call (kaleido.calc_fig_sync without a server, what plotly's
    ``fig.to_image`` does; started with the same local Chromium and plotly.js), median of 3;
  - 4 threads each exporting 5 figures (png) at once: wall time and the slowest single call (renders queue on
    one process-wide lock, so the wall time should be about 20 × one render).
Needs Chromium (Debian: apt-get install chromium).
"""

import statistics
import threading
import time

import kaleido
import numpy as np
import plotly.graph_objects as go

from classroom.page import export


def heatmap() -> go.Figure:
    z = np.random.default_rng(0).normal(size=(30, 30))  # [query_pos, key_pos]
    return go.Figure(go.Heatmap(z=z, zmid=0, colorscale="RdBu"), layout={"width": 500, "height": 450})


def bar() -> go.Figure:
    return go.Figure(go.Bar(x=["a", "b", "c"], y=[3, 1, 2]), layout={"width": 460, "height": 400})


def seconds(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def fresh_browser_png(fig: go.Figure) -> bytes:
    opts = {"format": "png", "width": fig.layout.width, "height": fig.layout.height, "scale": export.SCALE}
    kopts = {"path": export._find_browser(), "plotlyjs": str(export.PLOTLY_JS), "mathjax": False}
    return kaleido.calc_fig_sync(fig, opts, kopts=kopts)


def main() -> None:
    if reason := export.available():
        raise SystemExit(reason)
    figures = {"heatmap 30x30": heatmap(), "bar": bar()}
    print(f"first png() of the process (starts Chromium): {seconds(export.png, figures['heatmap 30x30']):.2f} s")
    print(f"{'figure':<14} {'format':<6} {'first':>8} {'next 5 (median)':>16}")
    for name, fig in figures.items():
        for render in (export.png, export.svg):
            first = seconds(render, fig)
            rest = statistics.median(seconds(render, fig) for _ in range(5))
            print(f"{name:<14} {render.__name__:<6} {first:>7.3f}s {rest:>15.3f}s")
    for name, fig in figures.items():
        fresh = statistics.median(seconds(fresh_browser_png, fig) for _ in range(3))
        kept = statistics.median(seconds(export.png, fig) for _ in range(3))
        print(f"{name:<14} png: fresh browser per call {fresh:.3f} s, long-lived {kept:.3f} s ({fresh / kept:.0f}×)")

    calls: list[float] = []

    def student(i: int) -> None:
        for j in range(5):
            calls.append(seconds(export.png, figures["heatmap 30x30"] if (i + j) % 2 else figures["bar"]))

    threads = [threading.Thread(target=student, args=(i,)) for i in range(4)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    print(f"4 threads × 5 png(): {wall:.2f} s wall, {len(calls)} calls, slowest call {max(calls):.2f} s, "
          f"mean {statistics.mean(calls):.3f} s")


if __name__ == "__main__":
    main()
