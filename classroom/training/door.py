"""Where the class's trainings run: the one door the Train page uses (``TRAININGS``), with two backends behind it,
chosen once, where the class's shared state lives (``state.backend``).

By default (``LocalTrainings``) a training waits in this server's queue (``local_queue.QUEUE``) and runs in one of
this server's worker processes (``local_workers``). When the shared state is in Redis, it is a job in an RQ queue
there (``rq_jobs.RedisTrainings``) that any worker process reaching that Redis runs, so every replica of a class
shares one queue, one limit and one wait estimate. Either way the training runs as ``body.run_training`` in its
worker and reaches the page through ``relay.relay``, and ``train`` returns the trained model's safetensors bytes and
its history, or raises ``errors.SessionBusy`` (a second training for one session, ``claim.one_per_session``),
``ValueError`` (a training that refused its settings) or ``RuntimeError`` (its worker died: the message says so)."""

from collections.abc import Callable
from typing import Protocol

from classroom.admission import MEMORY
from classroom.state import backend
from classroom.state.local_kv import LocalKV
from classroom.training import local_queue, local_workers
from classroom.training.body import Trained
from classroom.training.claim import one_per_session
from mechlib.train import Progress, TrainResult

__all__ = ["Trainings", "LocalTrainings", "TRAININGS"]


class Trainings(Protocol):
    def limit(self) -> int:
        """How many trainings may run at once."""

    def running(self) -> int:
        """How many run now."""

    def warm(self) -> None:
        """Make ready what the first training would otherwise wait for."""

    def train(self, owner: str, steps: int, memory_mb: float, fn: Callable[..., TrainResult], kwargs: dict,
              on_wait: Callable[[int, float | None], None], on_start: Callable[[], None],
              on_progress: Callable[[Progress], None], on_step: Callable[[int], None],
              threads: Callable[[], int]) -> Trained:
        """``fn(**kwargs, on_progress=…, on_step=…)`` for ``owner`` (a session) once a slot frees; meanwhile
        ``on_wait(position, wait_s)`` (1 = next; ``wait_s`` None while nothing measured estimates it), then
        ``on_start()`` once it runs. ``threads()``: how many threads it may use now, where the backend can follow it.
        If a callback raises (the student left), the training stops within ten steps and the exception propagates."""


class LocalTrainings:
    """This server's queue and worker processes; the training's memory is held under this server's budget."""

    def __init__(self):
        self.claims = LocalKV()  # each session's claim on its one training

    def limit(self) -> int:
        return local_queue.QUEUE.limit

    def running(self) -> int:
        return local_queue.QUEUE.running

    def warm(self) -> None:
        local_workers.warm()

    def train(self, owner, steps, memory_mb, fn, kwargs, on_wait, on_start, on_progress, on_step, threads) -> Trained:
        with (one_per_session(self.claims, owner), local_queue.QUEUE.slot(steps, on_wait) as held,
              MEMORY.hold(memory_mb, "this training")):
            on_start()

            def stepped(step: int) -> None:
                held.advance(step)  # the queue's estimates for those waiting read it
                on_step(step)

            def evaluated(progress: Progress) -> None:
                held.advance(progress.step)
                on_progress(progress)

            return local_workers.run(fn, kwargs, on_progress=evaluated, on_step=stepped, threads=threads)


def _server_trainings() -> Trainings:
    """The server's: Redis's RQ queue when the shared state is in Redis, else this server's own."""
    if (client := backend.client()) is None:
        return LocalTrainings()
    from classroom.training.rq_jobs import RedisTrainings
    return RedisTrainings(client)


TRAININGS = _server_trainings()  # the server's: every session trains through this one
