"""The server's training queue: at most a few trainings at once, one per session, the others waiting in arrival
order with an estimate of their wait; and the time a running training has left, for its progress line."""

import heapq
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from classroom.admission import Gate

__all__ = ["seconds_left", "expected_seconds_left", "seconds_until_slot", "estimate_wait", "SessionBusy", "Ticket", "TrainingQueue",
           "QUEUE"]


def seconds_left(step: int, steps: int, elapsed_s: float) -> float:
    """Seconds until step ``steps`` at the rate this training has measured: ``step`` (≥ 1) steps in ``elapsed_s``."""
    return (steps - step) * elapsed_s / step


def expected_seconds_left(step: int, steps: int, elapsed_s: float, usual_steps: int | None) -> float | None:
    """Seconds until a training that usually stops early (a preset, once its circuit forms) is expected to stop, at
    the rate it has measured: until ``usual_steps`` (or ``steps``, if sooner). None without a usual stop, or once
    past it: it then stops at whichever evaluation finds the circuit, and only ``seconds_left`` to ``steps``
    bounds it. A bound alone misleads: the preset's bound was 216 s on a run that ended 17 s in."""
    if usual_steps is None or step > usual_steps:
        return None
    return seconds_left(step, min(usual_steps, steps), elapsed_s)


def seconds_until_slot(remaining_s: list[float], ahead: int, duration_s: float, limit: int) -> float:
    """Seconds until a slot frees for a waiting training with ``ahead`` others before it in the queue. Of the
    ``limit`` slots, the running trainings' free after their ``remaining_s`` and the idle ones now; each training
    ahead takes the first slot to free and holds it for ``duration_s`` (a typical training's wall time)."""
    slots = sorted(remaining_s + [0.0] * (limit - len(remaining_s)))
    for _ in range(ahead):
        heapq.heapreplace(slots, slots[0] + duration_s)
    return slots[0]


def estimate_wait(running: list[tuple[int, int, float]], ahead: int, durations: list[float],
                  limit: int) -> float | None:
    """Seconds until a slot frees for a waiting training with ``ahead`` others before it (``seconds_until_slot``),
    given each running training's (step, steps, elapsed_s) and the wall times of recently finished ones: a running
    training's remaining time from its own measured steps/s (before its first step: the median finished training's
    wall time, less its time so far), and that median for each one ahead. None while that needs a finished training
    and none has finished yet."""
    typical = statistics.median(durations) if durations else None
    remaining = []
    for step, steps, elapsed in running:
        if step:
            remaining.append(seconds_left(step, steps, elapsed))
        elif typical is not None:
            remaining.append(max(typical - elapsed, 0.0))
        else:
            return None
    if ahead and typical is None:
        return None
    return seconds_until_slot(remaining, ahead, typical or 0.0, max(limit, len(remaining)))


class SessionBusy(Exception):
    """A session asked for a second training while its first still runs or waits."""


@dataclass(eq=False)
class Ticket:
    """One training's place in the queue: whose it is, its steps, and once it runs, since when and how far."""
    owner: str
    steps: int
    started: float | None = None  # time.monotonic() when it got its slot
    step: int = 0                  # the last step it reported (``advance``)

    def advance(self, step: int) -> None:
        self.step = step


class TrainingQueue:
    """At most ``limit`` trainings at once, server-wide, and one per session (``owner``); the others wait in arrival
    order at the admission gate (``admission.Gate``, a slot each). The wall times of the last ``recent`` finished
    trainings estimate how long a waiting one waits."""

    def __init__(self, limit: int, recent: int = 8):
        self.limit = limit
        self._gate = Gate(lambda: self.limit)
        self._durations: deque[float] = deque(maxlen=recent)
        self._owners: set[str] = set()  # sessions with a training running or waiting

    @property
    def running(self) -> int:
        return len(self._gate.holding)

    def wait_s(self, ticket: Ticket) -> float | None:
        """Seconds until a slot frees for the waiting ``ticket`` (``estimate_wait``)."""
        with self._gate.changed:
            now = time.monotonic()
            running = [(other.step, other.steps, now - other.started) for other in self._gate.holding]
            return estimate_wait(running, self._gate.waiting.index(ticket), list(self._durations), self.limit)

    @contextmanager
    def slot(self, owner: str, steps: int, on_wait: Callable[[int, float | None], None],
             poll_s: float = 0.5) -> Iterator[Ticket]:
        """Wait for a free slot, calling ``on_wait(position, wait_s)`` (1 = next; ``wait_s`` as ``wait_s``)
        meanwhile; free it on exit. A training that ends without an error adds its wall time to the recent ones.

        Raises ``SessionBusy`` at once if ``owner`` already has a training running or waiting. If ``on_wait`` raises
        (the user left the page), the place in the queue is given up.
        """
        ticket = Ticket(owner, steps)
        with self._gate.changed:
            if owner in self._owners:
                raise SessionBusy("this session already has a training running or waiting for a slot; one training "
                                  "per session at a time")
            self._owners.add(owner)
        try:
            with self._gate.hold(ticket, 1, on_wait=lambda position: on_wait(position, self.wait_s(ticket)),
                                 poll_s=poll_s):
                ticket.started = time.monotonic()
                yield ticket
                self._durations.append(time.monotonic() - ticket.started)
        finally:
            with self._gate.changed:
                self._owners.discard(owner)


QUEUE = TrainingQueue(limit=2)
