"""The page's side of a training in a worker, the same on either backend: the worker's reports (``body.Report``)
handed to the page's callbacks in the page's own thread, the training's end noticed, its result returned or its
error raised, and the worker told to stop however the page leaves. A transport carries the reports over its
``Channel``: this server's manager (``local_workers``) or the class's Redis (``rq_jobs``)."""

from collections.abc import Callable
from typing import Protocol

from classroom.training.body import PROGRESS, Report, Trained
from mechlib.train import Progress

__all__ = ["Channel", "relay"]


class Channel(Protocol):
    """One training's way between the page and its worker."""

    def receive(self, wait: bool) -> Report | None:
        """The worker's next report; None when none came within the channel's poll interval (``wait``) or at once
        (not ``wait``)."""

    def ended(self) -> bool:
        """Asked when a wait brought no report: whether the worker has finished, every report it sent by then in the
        channel. Raises ``RuntimeError`` for a worker that died."""

    def result(self) -> Trained:
        """Once ended: what the training returned; raises what it raised (a refused setting: ``ValueError``)."""

    def stop(self) -> None:
        """Ask the worker to stop at its next report, or never to start."""


def relay(channel: Channel, on_progress: Callable[[Progress], None], on_step: Callable[[int], None]) -> Trained:
    """Each report the worker sends over ``channel`` to ``on_progress`` or ``on_step``, here in the caller's thread,
    until the training ends: its result, or its error raised here. However this ends (the end, an error, or a
    callback that raised because the student left) the worker is told to stop, so a training the page has left
    stops within ten steps."""

    def hand(report: Report) -> None:
        kind, value = report
        (on_progress if kind == PROGRESS else on_step)(value)

    try:
        while True:
            if (report := channel.receive(wait=True)) is not None:
                hand(report)
            elif channel.ended():
                while (report := channel.receive(wait=False)) is not None:
                    hand(report)
                return channel.result()
    finally:
        channel.stop()
