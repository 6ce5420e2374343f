"""The one door every page's mechlib experiment goes through: cached server-wide on plain values, its memory
estimate and expected time stated before it runs, the estimate held under the server's budget, and its call recorded
for the part's "Reproduce in Python"."""

from collections.abc import Callable

import streamlit as st

from classroom import timings
from classroom.admission import MEMORY, BudgetError
from classroom.model_choice import ModelChoice
from classroom.page import part
from classroom.training import apart
from mechlib.device import experiment_mb

__all__ = ["compute"]


def compute(experiment: Callable, *args, key: ModelChoice | None = None):
    """``experiment(*args)`` from mechlib, cached server-wide on plain values: the experiment's name and its
    arguments, the model among them (``args[0]``, when ``key`` names it: ``session.current_model``'s key) replaced
    by its key, never the model itself. While it computes, the spinner states its memory estimate (``experiment_mb``:
    its declared ``costs``, else the model's forward) against the budget and its expected time (``timings``); the
    estimate is held under the server-wide budget (``MEMORY``). One over the budget, or that finds no room in time,
    stops the part with the server's message, naming what it computes, before it starts (``part.Refused``; the
    page's other parts are drawn), or the page when no part is being drawn."""
    mb = experiment_mb(experiment, *args)
    model, plain = (args[0], args[1:]) if key is not None else (None, args)
    try:  # by keyword: Streamlit's hashing reads a positional argument's name from the signature at every call
        result = _cached(name=_name(experiment), key=key, _experiment=experiment, _model=model, args=plain, _mb=mb)
        part.record_call(experiment, key, plain, result)
        return result
    except BudgetError as error:
        st.error(f"{error}.", icon=":material/block:")
        if part.current() is not None:
            raise part.Refused from None
        st.stop()


def _name(experiment: Callable) -> str:
    return f"{experiment.__module__}.{experiment.__qualname__}"


CACHE_SIZE = "256MB"  # the results' pickled bytes, least recently used first out: see ``_cached``


@st.cache_data(max_size=CACHE_SIZE, show_spinner=False)
def _cached(name: str, key: ModelChoice | None, _experiment: Callable, _model, args: tuple, _mb: float):
    """Keyed on the experiment's name, the model's key and the arguments. On a cache miss only: the spinner with its
    cost, the estimate held under the budget, the computation timed (``timings``: under the model's key, or the
    arguments of an experiment that builds its own models). The spinner is here, not around the call: on a hit
    (every follower of a live class, most reruns) it would start a thread for nothing, a wait of its own for the
    interpreter's lock when thirty sessions run at once. A session waiting for another's computation of the same
    value shows its page's earlier screen meanwhile. An experiment that trains runs in a process of its own
    (``training.apart``).

    Bounded by bytes, not entries: a Which input game is 1 KB and 0.1–3 s to compute, an Equivalence run up to 5 MB
    and 50 ms. With 256 entries a class of 30 dragging sliders evicted the games again and again (943 misses in
    3 minutes; Which input's p95 3.0 s); with 256 MB nothing a page needed was evicted (649 misses, its p95 0.9 s)
    and the worst case is 256 MB, not 256 of the largest results (``bench.classroom_load --clients 30``)."""
    what = getattr(_experiment, "what", None) or f"{_experiment.__name__} on this model"
    with (st.spinner(timings.cost_line(_mb, timings.expected(name, key, _mb))), MEMORY.hold(_mb, what),
          timings.timed(name, key if key is not None else args, _mb)):
        if key is not None:
            return _experiment(_model, *args)
        return apart.run(_experiment, args) if getattr(_experiment, "trains", False) else _experiment(*args)
