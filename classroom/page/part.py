"""What the section being drawn showed: its figures (with the code that reproduces each), tables, numbers and the
mechlib experiments it ran, collected for its export menu; one per script thread (each session's run has its own)."""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go


@dataclass
class Collected:
    """What one section showed: its figures (with the code that reproduces each), tables and numbers."""

    title: str
    figures: dict[str, go.Figure] = field(default_factory=dict)
    snippets: dict[str, str] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    numbers: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[Callable, tuple]] = field(default_factory=list)  # the mechlib experiments it ran, in order


class Refused(Exception):
    """A part's computation was refused for its memory; the refusal is on screen, and the page's other parts are
    drawn."""


RUN = threading.local()  # the section being drawn by this script thread (each session's run has its own thread)


def current() -> Collected | None:
    return getattr(RUN, "collected", None)


@contextmanager
def collecting(title: str) -> Iterator[Collected]:
    RUN.collected = Collected(title)
    try:
        yield RUN.collected
    finally:
        RUN.collected = None


def record(name: str, value: str) -> None:
    """A number the section shows (a check, a metric), for its bundle's numbers.csv."""
    if (collected := current()) is not None:
        collected.numbers[name] = value


def record_call(experiment: Callable, model_key: tuple | None, args: tuple) -> None:
    """A mechlib experiment the part ran, for its figures' snippets: ``experiments.compute`` reports each, with its
    model's key (None for one that builds its own models) and its arguments."""
    if (collected := current()) is not None:
        collected.calls.append((experiment, (model_key, args)))
