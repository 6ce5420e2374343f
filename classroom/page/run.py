"""One script run of one session, as the page layout draws it: the top row's places, the part being drawn and what
it collected, where its questions go, the slides it drew, and what the page computed before its parts. Made at the
start of each run (``begin``, by the app) and reached through ``current()``: the one piece of state a run's modules
share, instead of attributes set on thread-locals across modules (each session's run has its own thread)."""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go
from streamlit.delta_generator import DeltaGenerator

from classroom.page.snippet import Records

__all__ = ["Collected", "Run", "begin", "current"]


@dataclass
class Collected:
    """What one section showed: its figures (with the code that reproduces each), tables and numbers."""

    title: str
    figures: dict[str, go.Figure] = field(default_factory=dict)
    snippets: dict[str, Callable[[], str]] = field(default_factory=dict)  # each written when asked
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    numbers: dict[str, str] = field(default_factory=dict)
    records: Records = field(default_factory=Records)  # the experiments it ran and the values derived from them


@dataclass
class Run:
    """``page``: the page's file. The top row (``slides.chrome``): ``link`` (the link to this view), ``join`` (a
    live class's code, presenting), ``settings``, ``nav`` (Previous, part, Next) and ``stage`` (where the slide is
    drawn) in presentation mode, ``popover`` (the slide's settings, made on first use), ``titles`` (the parts').
    The part's line on a slide: ``note``, ``notes_column``, ``notes`` (its popover, made on first use),
    ``export``; ``places`` counts the part's slides as they are placed (None once it is done) and ``discard``
    holds the places the current slide does not show. The part being drawn: ``collected`` and ``questions``
    (where its questions go). ``records``: what the page computed before its parts."""

    page: str = ""
    link: DeltaGenerator | None = None
    join: DeltaGenerator | None = None
    settings: DeltaGenerator | None = None
    nav: tuple[DeltaGenerator, ...] | None = None
    stage: DeltaGenerator | None = None
    popover: DeltaGenerator | None = None
    titles: list[str] = field(default_factory=list)
    note: DeltaGenerator | None = None
    notes_column: DeltaGenerator | None = None
    notes: DeltaGenerator | None = None
    export: DeltaGenerator | None = None
    places: int | None = None
    discard: list[DeltaGenerator] = field(default_factory=list)
    collected: Collected | None = None
    questions: DeltaGenerator | None = None
    records: Records = field(default_factory=Records)


_local = threading.local()


def begin() -> Run:
    """A new run: nothing drawn, nothing computed yet."""
    _local.run = Run()
    return _local.run


def current() -> Run:
    """This thread's run (a run made outside the app, by a test drawing one part, begins here)."""
    return getattr(_local, "run", None) or begin()
