"""What the server process does for every session: garbage collection kept cheap, and warm-ups of the slowest first
computations."""

import gc
import sys
import threading
import time

import streamlit as st

from classroom.admission import budget_mb
from mechlib import bigrams, equivalence, zoo

_frozen_modules = [0]  # len(sys.modules) at the last gc.freeze(), process-wide


def freeze_libraries() -> None:
    """Keep full garbage collections cheap: ``gc.freeze()`` moves every object alive now (torch, plotly, pandas
    and mechlib loaded: ~260,000 objects) to a generation collections skip. Libraries keep importing more as
    pages first use them (torch's compiler and sympy arrive with the first einops call), so this freezes again
    at the start of any run after the set of imported modules has grown: a handful of times per process."""
    if len(sys.modules) > _frozen_modules[0]:
        _frozen_modules[0] = len(sys.modules)
        gc.collect()
        gc.freeze()


GC_EVERY_S = 2.0  # the server's full garbage collections: at most one per this many seconds


_last_collection = [0.0]


_collecting = threading.Lock()


def collect_garbage() -> None:
    """A full ``gc.collect()`` at the end of a run, at most once per ``GC_EVERY_S`` across the server. Streamlit's
    own (``runner.postScriptGC``, off in .streamlit/config.toml) runs one after every run of every session with
    the GIL held: with thirty sessions' figures and export menus alive it took ~80 ms, and 55 % of the server's
    time under a class of 30 (py-spy --gil while ``bench/classroom_load`` ran). Collections are still needed: a
    plotly figure is a cycle of objects, so without them a class's garbage held 500 MB more. The shared models idle
    past their lifetime go first (``zoo.sweep``)."""
    now = time.monotonic()
    if now - _last_collection[0] < GC_EVERY_S or not _collecting.acquire(blocking=False):
        return
    try:
        _last_collection[0] = now
        zoo.sweep()  # the idle stored models first, so this collection frees them
        gc.collect()
    finally:
        _collecting.release()


def _warm(model) -> None:
    """The warm-up's work, slowest last: the Equivalence page's run at its seed sizes (drawing its 206 MB W_E table,
    once per seed, took 0.3–1.2 s here; with it drawn, and its one-hot check kept, the page's first run takes
    10 ms), then the best fit."""
    sizes = equivalence.SEED_SIZES
    equivalence.run(sizes["batch"], sizes["seq"], sizes["d_vocab"], sizes["d_model"], sizes["n_heads"], seed=0,
                    memory_mb=budget_mb())
    bigrams.best_fit_kl(model.tokenizer.to_json(), model.cfg.d_model)


@st.cache_resource(show_spinner=False)
def warm_up() -> None:
    """Once per server process, in the background, the first computations a class waits for longest: the
    Equivalence page's W_E table for the sidebar's default seed, so that the teacher's first open of the page (a
    live class follows the teacher there) reads it from the process's cache instead of drawing it; and
    the zero-layer section's best rank-d_model fit (``bigrams.best_fit_kl``, 10–20 s of CPU), so the first
    student to open Circuits: zero layers reads it instead of waiting for it (a student who comes sooner waits
    for this thread's result)."""
    threading.Thread(target=_warm, args=(zoo.load("attn-only-0l"),), daemon=False,
                     name="warm-up").start()  # not a daemon (script threads are): torch aborts the process at exit
    # if a daemon thread is still inside a computation
