"""What the section being drawn showed: its figures (with the code that reproduces each), tables, numbers and the
mechlib experiments it ran, collected for its export menu; and what the page computed before its parts, which the
parts' snippets start from; kept in this run's ``run.Run``."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from classroom.page import run
from classroom.page.run import Collected
from classroom.page.snippet import Call, Records


class Refused(Exception):
    """A part's computation was refused for its memory; the refusal is on screen, and the page's other parts are
    drawn."""


def current() -> Collected | None:
    """The part being drawn in this run (``run.current()``), or None between parts."""
    return run.current().collected


@contextmanager
def collecting(title: str) -> Iterator[Collected]:
    this = run.current()
    this.collected = Collected(title)
    try:
        yield this.collected
    finally:
        this.collected = None


def record(name: str, value: str) -> None:
    """A number the section shows (a check, a metric), for its bundle's numbers.csv."""
    if (collected := current()) is not None:
        collected.numbers[name] = value


def records() -> list[Records]:
    """What the page computed before its parts, then what the part being drawn computed."""
    page = run.current().records
    return [page] if (collected := current()) is None else [page, collected.records]


def record_call(experiment: Callable, model_key, args: tuple, result) -> None:
    """A mechlib experiment the door ran (``experiments.compute``), with its model's key (a ``ModelChoice``; None
    for one that builds its own models), its arguments and its result, for the figures' snippets."""
    records()[-1].calls.append(Call(experiment, model_key, args, result))


def derived(fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` (a mechlib function of a result, say), recorded so that a figure drawn from it writes
    the call in its snippet."""
    value = fn(*args, **kwargs)
    records()[-1].derived.append((value, fn, args, kwargs))
    return value


def given(value, name: str, code: str):
    """``value``, made by ``code`` of the page's own (which binds it to ``name``), for the figures drawn from it."""
    records()[-1].given.append((value, name, code))
    return value
