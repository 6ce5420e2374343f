"""Device and precision policy, chosen once per process, and the memory budget.

On import: the device is picked (CUDA when present, else CPU; ``MECHLIB_DEVICE`` forces one),
float32 matmuls are pinned to IEEE precision (no TF32, so identities hold to float32 bounds),
and torch's intra-op thread count is set once (``MECHLIB_THREADS``, default: all cores).
"""

import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch

__all__ = ["DEVICE", "to_numpy", "BudgetError", "budget_mb", "require_budget", "costs", "experiment_mb", "MemoryBudget",
           "MEMORY", "device_label",
           "median_ms"]


def _pick_device() -> torch.device:
    forced = os.environ.get("MECHLIB_DEVICE", "").strip()
    if not forced:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(forced)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"MECHLIB_DEVICE={forced!r} asks for CUDA, but torch sees no CUDA device")
    return device


DEVICE: torch.device = _pick_device()

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
torch.set_num_threads(int(os.environ.get("MECHLIB_THREADS", os.cpu_count() or 1)))


def to_numpy(x: torch.Tensor) -> np.ndarray:
    """The one tensor → numpy conversion of the page experiments: detached and copied to the CPU first,
    so it holds for tensors on any device (``.numpy()`` of a CUDA tensor raises)."""
    return x.detach().cpu().numpy()


class BudgetError(ValueError):
    """A computation whose estimated memory is above the budget, or that found no room under it in time."""


def budget_mb() -> float:
    """Memory the server's computations may use together, in MB (``MECHLIB_MEMORY_BUDGET_MB``, default 1024);
    one request alone may use all of it."""
    return float(os.environ.get("MECHLIB_MEMORY_BUDGET_MB", 1024))


def require_budget(estimate_mb: float, what: str) -> None:
    """Refuse ``what`` when its estimate is above the budget, saying both figures."""
    if estimate_mb > budget_mb():
        raise BudgetError(
            f"{what} would need about {estimate_mb:,.0f} MB, above this server's budget of "
            f"{budget_mb():,.0f} MB per request; choose smaller sizes"
        )


def costs(estimate_mb: Callable[..., float]) -> Callable[[Callable], Callable]:
    """Declare an experiment's memory in MB, from the arguments it is called with (``model, *args``, or the sizes
    and seed of one that builds its own models), so that a server holds that under its budget before running it
    (``experiment_mb``), not only a model's forward."""
    def declare(experiment: Callable) -> Callable:
        experiment.estimate_mb = estimate_mb
        return experiment
    return declare


def experiment_mb(experiment: Callable, *args) -> float:
    """What ``experiment(*args)`` will hold: its declared cost (``costs``), else one sequence's forward of the model
    it is given first."""
    declared = getattr(experiment, "estimate_mb", None)
    return declared(*args) if declared else args[0].cfg.estimate_mb(batch=1)


WAIT_S = 30.0  # how long a computation waits for room under the budget before it is refused


class MemoryBudget:
    """Admission control: the budget holds server-wide, not per request. A computation holds its estimate while it
    runs; one whose estimate alone is above the budget is refused at once, one that would take the running ones'
    sum past it waits (first come, first served) and is refused after ``wait_s``. Ten fast moves of a size slider
    used to start ten overlapping computations and took a server from 0.8 to 4.4 GB."""

    def __init__(self):
        self._changed = threading.Condition()
        self._queue: deque[object] = deque()
        self.held_mb = 0.0

    @contextmanager
    def hold(self, estimate_mb: float, what: str, wait_s: float = WAIT_S) -> Iterator[None]:
        require_budget(estimate_mb, what)
        ticket, deadline = object(), time.monotonic() + wait_s
        with self._changed:
            self._queue.append(ticket)
            try:
                while not (self._queue[0] is ticket and self.held_mb + estimate_mb <= budget_mb()):
                    if not self._changed.wait(timeout=deadline - time.monotonic()):
                        raise BudgetError(
                            f"{what} would need about {estimate_mb:,.0f} MB, and this server's other computations "
                            f"held {self.held_mb:,.0f} of its {budget_mb():,.0f} MB for {wait_s:.0f} s; try again "
                            "in a moment")
            finally:
                self._queue.remove(ticket)
                self._changed.notify_all()
            self.held_mb += estimate_mb
        try:
            yield
        finally:
            with self._changed:
                self.held_mb -= estimate_mb
                self._changed.notify_all()


MEMORY = MemoryBudget()  # the server's one budget


def device_label() -> str:
    """'CPU' or the GPU's name, for the sidebar badge."""
    if DEVICE.type == "cuda":
        return f"GPU: {torch.cuda.get_device_name(DEVICE)}"
    return f"CPU ({torch.get_num_threads()} threads)"


def median_ms(fn: Callable[[], object], repeats: int = 5) -> float:
    """The median wall time of ``fn`` over ``repeats`` runs, in ms; on a GPU, waiting for its work to finish."""
    times = []
    for _ in range(repeats):
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)
