"""How long the Equivalence page takes on the server, at the seed's sizes (B=1, S=20, V=50,000, D=512, H=8).

Run from the repository root: .venv/bin/python -m bench.equivalence_rerun
Prints: the cold computation (mechlib.equivalence.run on a warm process), the first page run
(cold caches, model of the sidebar described, imports done), and warm reruns (st.cache_data hit):
the whole script run as AppTest measures it, which is the server's time for one rerun.
"""

import statistics
import time
from pathlib import Path

import torch
from streamlit.testing.v1 import AppTest

from mechlib import equivalence

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    equivalence.run(**equivalence.SEED_SIZES, seed=99)  # warm the process (imports, thread pool)
    cold = [timed(lambda s=s: equivalence.run(**equivalence.SEED_SIZES, seed=s)) for s in range(5)]
    print(f"mechlib.equivalence.run, new seed each time (no cache): median {statistics.median(cold) * 1e3:.0f} ms "
          f"(min {min(cold) * 1e3:.0f}, max {max(cold) * 1e3:.0f}) over 5")

    at = AppTest.from_file(APP, default_timeout=120)
    first = timed(at.run)
    assert not at.exception, at.exception
    print(f"first page run (cold caches): {first * 1e3:.0f} ms")
    warm = [timed(at.run) for _ in range(20)]
    assert not at.exception
    print(f"warm rerun (cache hit), whole script: median {statistics.median(warm) * 1e3:.0f} ms "
          f"(min {min(warm) * 1e3:.0f}, max {max(warm) * 1e3:.0f}) over 20 — goal ≤ 300 ms")
    moved = []
    for row in range(100, 120):  # a slider that needs no recomputation, only a new figure
        at.slider(key="row").set_value(row)
        moved.append(timed(at.run))
    print(f"moving the W_O row slider: median {statistics.median(moved) * 1e3:.0f} ms over 20")


if __name__ == "__main__":
    main()
