"""The server's training queue: at most a few trainings at once, the others waiting in arrival order with an
estimate of their wait (``estimates``)."""

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from classroom.admission import Gate
from classroom.training.estimates import estimate_wait

__all__ = ["Ticket", "TrainingQueue", "QUEUE"]


@dataclass(eq=False)
class Ticket:
    """One training's place in the queue: its steps, and once it runs, since when and how far."""
    steps: int
    started: float | None = None  # time.monotonic() when it got its slot
    step: int = 0                  # the last step it reported (``advance``)

    def advance(self, step: int) -> None:
        self.step = step


class TrainingQueue:
    """At most ``limit`` trainings at once, server-wide; the others wait in arrival order at the admission gate
    (``admission.Gate``, a slot each). The wall times of the last ``recent`` finished trainings estimate how long a
    waiting one waits."""

    def __init__(self, limit: int, recent: int = 8):
        self.limit = limit
        self._gate = Gate(lambda: self.limit)
        self._durations: deque[float] = deque(maxlen=recent)

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
    def slot(self, steps: int, on_wait: Callable[[int, float | None], None], poll_s: float = 0.5) -> Iterator[Ticket]:
        """Wait for a free slot, calling ``on_wait(position, wait_s)`` (1 = next; ``wait_s`` as ``wait_s``)
        meanwhile; free it on exit. A training that ends without an error adds its wall time to the recent ones.
        If ``on_wait`` raises (the user left the page), the place in the queue is given up."""
        ticket = Ticket(steps)
        with self._gate.hold(ticket, 1, on_wait=lambda position: on_wait(position, self.wait_s(ticket)),
                             poll_s=poll_s):
            ticket.started = time.monotonic()
            yield ticket
            self._durations.append(time.monotonic() - ticket.started)


QUEUE = TrainingQueue(limit=2)
