"""A training in its worker, the same on either backend: this server's worker processes (``local_workers``) and the
class's RQ workers (``rq_jobs``) differ only in how a report reaches the page and how the page's stop reaches them.

``run_training`` calls the training with its reports wired to the page: each evaluation's ``train.Progress`` and
every 10th step go out as ``Report``s, the training follows the thread count the page allows, and it stops at its
next report once the page has asked it to (``Cancelled``). What comes back is the model as safetensors bytes and
its evaluation history (``Trained``): what crosses back to the page, whichever way."""

import os
from collections.abc import Callable

import torch

from classroom.training.errors import Cancelled
from mechlib import io
from mechlib.train import Progress, TrainResult

__all__ = ["STEP", "PROGRESS", "Report", "Trained", "WORKER_NICE", "yield_to_pages", "run_training"]

STEP, PROGRESS = "step", "progress"
Report = tuple[str, int | Progress]  # (STEP, every 10th step) or (PROGRESS, an evaluation's report)
Trained = tuple[bytes, list[dict[str, float]]]  # the model's safetensors bytes, its evaluation history
EVERY = 10  # a step is reported every this many: each report is a round trip (ten steps take about 0.15 s)
WORKER_NICE = 10  # added to a worker's scheduling niceness: the pages come first, trainings take the idle CPU


def yield_to_pages() -> None:
    """Once per worker, either backend's: lower its priority by ``WORKER_NICE``. With 25 students on the pages and 5
    pressing the preset (``bench/classroom_load.py --clients 30 --train 5``), two workers at the pages' priority
    took both cores: the students' p95 rose from 1.4 s to 3.4 s. Niced, a worker still gets the cores the students
    leave idle between their moves."""
    os.nice(WORKER_NICE)


def run_training(fn: Callable[..., TrainResult], kwargs: dict, send: Callable[[str, int | Progress], bool],
                 threads: Callable[[], int] | None = None) -> Trained:
    """In the worker: ``fn(**kwargs, on_progress=…, on_step=…)``, calling ``send(kind, value)`` with each progress
    report and every 10th step (a ``Report``); ``send`` returns True once the page has asked the training to stop,
    and it then stops there with ``Cancelled``. ``threads()``, where given, is how many threads the training may use
    now, looked at again every 10th step; without it, the worker's own count. Errors in the training (a refused
    setting: ``ValueError``) propagate."""

    def report(kind: str, value: int | Progress, step: int) -> None:
        if send(kind, value):
            raise Cancelled(f"stopped at step {step}")

    def follow() -> None:
        if threads is not None and (allowed := threads()) != torch.get_num_threads():
            torch.set_num_threads(allowed)

    def on_step(step: int) -> None:
        if step % EVERY == 0:
            follow()
            report(STEP, step, step)

    def on_progress(progress: Progress) -> None:
        report(PROGRESS, progress, progress.step)

    follow()
    result = fn(**kwargs, on_progress=on_progress, on_step=on_step)
    return io.to_bytes(result.model), result.history
