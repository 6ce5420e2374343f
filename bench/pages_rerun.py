"""How long the Patterns and Residual pages take on the server, on the default zoo model (gelu-2l).

Run from the repository root: .venv/bin/python -m bench.pages_rerun
For each page: the first run (caches cold), a warm rerun (cache hit), and moving a slider to
values not seen before (each a cache miss: the model runs and every check is recomputed).
"""

import statistics
import time
from pathlib import Path

import torch
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
SLIDERS = {"app_pages/patterns.py": ("dest", range(3, 15)), "app_pages/residual.py": ("rpos", range(1, 13))}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; model gelu-2l, the default prompt (16 tokens)")
    for page, (key, values) in SLIDERS.items():
        at = AppTest.from_file(APP, default_timeout=120)
        at.run()
        at.switch_page(page)
        first = timed(at.run)
        warm = [timed(at.run) for _ in range(10)]
        moved = []
        for value in values:
            at.slider(key=key).set_value(value)
            moved.append(timed(at.run))
        assert not at.exception, at.exception
        print(f"{page}: first run {first * 1e3:.0f} ms; warm rerun median {statistics.median(warm) * 1e3:.0f} ms; "
              f"moving '{key}' to a new value median {statistics.median(moved) * 1e3:.0f} ms "
              f"(max {max(moved) * 1e3:.0f}) over {len(moved)}")


if __name__ == "__main__":
    main()
