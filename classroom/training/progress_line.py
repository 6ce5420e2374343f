"""A training's progress bar on its page: its place in the queue while it waits, then its step, its time and its
time left at its own measured rate (``estimates``). The Train page's trainings and the Dictionary learning page's
sparse autoencoders say the same, through this one bar."""

import time

import streamlit as st

from classroom.training import estimates
from classroom.training.door import TRAININGS

__all__ = ["ProgressLine"]

SHOWN_S = 0.5  # a step is drawn at most this often


class ProgressLine:
    """``st.progress`` for a training of at most ``steps`` steps that usually stops near ``usual_steps`` (a preset
    stops once its circuit forms), or None. Pass ``waiting``, ``started`` and ``stepped`` to ``TRAININGS.train``;
    ``show`` at each evaluation."""

    def __init__(self, steps: int, usual_steps: int | None = None):
        self.steps, self.usual = steps, usual_steps
        self.bar = st.progress(0.0, text="Waiting for a free training slot…")
        self.start = self.shown = 0.0  # monotonic seconds: the training's start, the last step drawn

    def elapsed(self) -> float:
        """Seconds since the training started, its wait in the queue excluded."""
        return time.monotonic() - self.start

    def timing(self, step: int) -> str:
        elapsed, steps, usual = self.elapsed(), self.steps, self.usual
        most = estimates.seconds_left(step, steps, elapsed)
        expected = estimates.expected_seconds_left(step, steps, elapsed, usual)
        left = (f"about {most:.0f} s left" if usual is None else
                f"usually stops near step {usual:,}: about {expected:.0f} s left, at most {most:.0f} s"
                if expected is not None else f"past step {usual:,}, where it usually stops: at most {most:.0f} s left")
        return f"step {step:,} of at most {steps:,} · {elapsed:.1f} s · {step / elapsed:.0f} steps/s · {left}"

    def waiting(self, position: int, wait_s: float | None) -> None:
        limit = TRAININGS.limit()
        eta = ("no training worker is connected to this class's Redis: the teacher starts them (README, Running a "
               "larger class)" if not limit else
               "no training has finished on this server yet to estimate the wait" if wait_s is None
               else f"about {wait_s:.0f} s until a slot frees, from the trainings measured here")
        self.bar.progress(0.0, text=f"Waiting for a free training slot: position {position} in the queue "
                                    f"({TRAININGS.running()} of {limit} running) · {eta}")

    def started(self) -> None:
        self.start = time.monotonic()

    def stepped(self, step: int) -> None:
        """At most every ``SHOWN_S``; any Streamlit call is where a rerun or a closed tab stops the training."""
        if time.monotonic() - self.shown > SHOWN_S:
            self.shown = time.monotonic()
            self.bar.progress(step / self.steps, text=self.timing(step))

    def show(self, step: int, measured: str) -> None:
        """An evaluation's line: the timing, then ``measured`` (its loss, say)."""
        self.bar.progress(step / self.steps, text=f"{self.timing(step)} · {measured}")

    def empty(self) -> None:
        self.bar.empty()
