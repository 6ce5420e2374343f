"""The server's admission: what may run at once. One first-come-first-served gate, used twice: the memory budget
(computations hold their estimate in MB) and the training slots (a training holds one slot).

mechlib enforces none of this: a notebook builds any model its machine holds. The app asks here before it asks
mechlib to build or compute."""

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["BudgetError", "budget_mb", "require_budget", "TooLong", "Gate", "MemoryBudget", "MEMORY", "WAIT_S"]


class BudgetError(ValueError):
    """A computation whose estimated memory is above the budget, or that found no room under it in time."""


def budget_mb() -> float:
    """Memory the server's computations may use together, in MB (``MECHLIB_MEMORY_BUDGET_MB``, default 1024);
    one request alone may use all of it."""
    return float(os.environ.get("MECHLIB_MEMORY_BUDGET_MB", 1024))


def require_budget(estimate_mb: float, what: str) -> None:
    """Refuse ``what`` when its estimate is above the budget, saying both figures."""
    if estimate_mb > budget_mb():
        raise BudgetError(f"{what} would need about {estimate_mb:,.0f} MB, above this server's budget of "
                          f"{budget_mb():,.0f} MB per request; choose smaller sizes")


class TooLong(Exception):
    """A wait at a gate passed its deadline."""


class Gate:
    """Holders share a ``capacity``; each holds an amount while it runs. A newcomer waits in arrival order until it
    is first and its amount fits beside the running ones', then holds it until it leaves. ``waiting`` and
    ``holding`` are the tickets (whatever the callers pass) in order, for estimates of a wait."""

    def __init__(self, capacity: Callable[[], float]):
        self.capacity = capacity
        self.changed = threading.Condition()  # held while reading or changing the lists below
        self.waiting: list[object] = []
        self.holding: list[object] = []
        self.held = 0.0

    @contextmanager
    def hold(self, ticket: object, amount: float, deadline: float = float("inf"),
             on_wait: Callable[[int], None] = lambda position: None, poll_s: float = 0.5) -> Iterator[None]:
        """Hold ``amount`` for ``ticket`` once its turn comes. Meanwhile ``on_wait(position)`` (1: next) is called
        at least every ``poll_s``; past ``deadline`` (``time.monotonic()``) the wait ends with ``TooLong``. If
        either raises, the place in the line is given up."""
        with self.changed:
            self.waiting.append(ticket)
        try:
            while True:
                with self.changed:
                    if self.waiting[0] is ticket and self.held + amount <= self.capacity():
                        self.waiting.pop(0)
                        self.holding.append(ticket)
                        self.held += amount
                        break
                    position = self.waiting.index(ticket) + 1
                on_wait(position)
                with self.changed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TooLong
                    self.changed.wait(min(poll_s, left))
        finally:
            with self.changed:
                if ticket in self.waiting:
                    self.waiting.remove(ticket)
                    self.changed.notify_all()
        try:
            yield
        finally:
            with self.changed:
                self.holding.remove(ticket)
                self.held -= amount
                self.changed.notify_all()


WAIT_S = 30.0  # how long a computation waits for room under the memory budget before it is refused


class MemoryBudget:
    """The memory budget holds server-wide, not per request: a computation holds its estimate while it runs; one
    whose estimate alone is above the budget is refused at once, one that would take the running ones' sum past it
    waits (first come, first served) and is refused after ``wait_s``. Ten fast moves of a size slider used to
    start ten overlapping computations and took a server from 0.8 to 4.4 GB."""

    def __init__(self):
        self.gate = Gate(budget_mb)

    @property
    def held_mb(self) -> float:
        return self.gate.held

    @contextmanager
    def hold(self, estimate_mb: float, what: str, wait_s: float = WAIT_S) -> Iterator[None]:
        require_budget(estimate_mb, what)
        try:
            with self.gate.hold(object(), estimate_mb, deadline=time.monotonic() + wait_s, poll_s=wait_s):
                yield
        except TooLong:
            raise BudgetError(f"{what} would need about {estimate_mb:,.0f} MB, and this server's other computations "
                              f"held {self.held_mb:,.0f} of its {budget_mb():,.0f} MB for {wait_s:.0f} s; try again "
                              "in a moment") from None


MEMORY = MemoryBudget()  # the server's one budget
