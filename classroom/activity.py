"""What the class is doing now, server-wide: which sessions ran a script lately. A training takes every core while
no one else needs them, and one beside a class (``training_threads``)."""

import math
import threading
import time

import torch

from classroom.training.local_queue import QUEUE

QUIET_S = 2.0  # a session that ran a script this recently may run the next any moment

_lock = threading.Lock()
_last_run: dict[str, float] = {}  # session id -> when its last script run ended (monotonic s); inf while one runs


def run_started(session: str) -> None:
    with _lock:
        _last_run[session] = math.inf


def run_ended(session: str) -> None:
    now = time.monotonic()
    with _lock:
        _last_run[session] = now
        for quiet in [other for other, ended in _last_run.items() if now - ended > QUIET_S]:
            del _last_run[quiet]


def training_threads(session: str) -> int:
    """How many threads ``session``'s training may use now: as many as the server's own computations (every core,
    or ``MECHLIB_THREADS``) while no other session runs a script or ran one in the last ``QUIET_S`` and no other
    training runs; else one. Alone on 2 cores the preset trained in 3.4–4.2 s on two threads against 5.0–6.7 s on
    one; beside two students rerunning a page it took 38 s on two against 5.0 s on one, its threads waiting on each
    other while the pages held the cores."""
    now = time.monotonic()
    with _lock:
        busy = any(now - ended <= QUIET_S for other, ended in _last_run.items() if other != session)
    return 1 if busy or QUEUE.running > 1 else torch.get_num_threads()
