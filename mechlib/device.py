"""Device and precision policy, chosen once per process, and what a computation costs.

On import: the device is picked (CUDA when present, else CPU; ``MECHLIB_DEVICE`` forces one),
float32 matmuls are pinned to IEEE precision (no TF32, so identities hold to float32 bounds),
and torch's intra-op thread count is set once (``MECHLIB_THREADS``, default: all cores).
"""

import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

__all__ = ["DEVICE", "to_numpy", "costs", "experiment_mb", "device_label", "median_ms"]


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


def costs(estimate_mb: Callable[..., float], what: str | None = None,
          trains: bool = False) -> Callable[[Callable], Callable]:
    """Declare an experiment's memory in MB, from the arguments it is called with (``model, *args``, or the sizes
    and seed of one that builds its own models), so that a caller can know it before running it (``experiment_mb``):
    a server holds it under its budget; mechlib itself refuses nothing for its size. ``what`` names the computation
    in a sentence ("this attention layer would need about 140 MB…"). ``trains``: it fits a model from plain values,
    thousands of optimizer steps of small tensors, each step many short torch calls made from Python; a server
    answering many users runs such an experiment in a process of its own."""
    def declare(experiment: Callable) -> Callable:
        experiment.estimate_mb, experiment.what, experiment.trains = estimate_mb, what, trains
        return experiment
    return declare


def experiment_mb(experiment: Callable, *args) -> float:
    """What ``experiment(*args)`` will hold beside the model's weights (held once, by whoever built the model): its
    declared cost (``costs``), else the activations of one forward of the model it is given first, on the ids it is
    given next."""
    declared = getattr(experiment, "estimate_mb", None)
    return declared(*args) if declared else args[0].cfg.activations_mb(1, len(args[1]))


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
