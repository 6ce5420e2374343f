"""Experiments that train (``mechlib.device.costs(..., trains=True)``: the toy model of superposition, its sparse
autoencoder) run in a process of their own, away from the server's interpreter.

Such an experiment is thousands of optimizer steps on small tensors, each step many short torch calls made from
Python. As a page's computation in the server it shared the interpreter with every student's rerun: under a class of
30 with 5 training (``bench.classroom_load --clients 30 --train 5``), the toy (0.9 s alone) took 9 s and the toy with
its SAE (2.7 s alone) 15 s, and the pages' computations in those seconds 4–7 s each, where they took under 1 s
before and after. One worker process, started on first use and kept, runs them one at a time, on one torch thread
(their tensors are too small to share out); it dies with its server (``local_workers.die_with``). The results are
the same as in the server's own process (``tests/app/test_apart.py``).
"""

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import torch

from classroom.training.local_workers import die_with, spawning

__all__ = ["run"]

_pools: list[ProcessPoolExecutor] = []  # the one pool, once started


def _start(server: int) -> None:
    """Once per worker: one torch thread, and die with the server."""
    torch.set_num_threads(1)
    die_with(server)


def run(experiment: Callable, args: tuple):
    """``experiment(*args)`` in the worker process: its result, or its error raised here. A worker that died
    (killed for memory, say) raises ``RuntimeError``, and the next call starts a new one."""
    try:
        with spawning():  # a bare __main__ while the worker may start (``local_workers.spawning``)
            if not _pools:
                _pools.append(ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_start, initargs=(os.getpid(),)))
            pool = _pools[0]
            future = pool.submit(experiment, *args)
        return future.result()
    except BrokenProcessPool as error:
        with spawning():
            if _pools and _pools[0] is pool:
                _pools.clear()
        pool.shutdown(wait=False, cancel_futures=True)
        raise RuntimeError(f"the process computing {experiment.__name__} stopped unexpectedly (out of memory?); "
                           "reload the page to start it again") from error
