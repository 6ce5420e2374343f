"""Trainings run in worker processes, away from the server's interpreter: the local backend's transport.

A training in the server's own process is a thread among the students' script runs. Each of its hundreds of
small torch calls per step gives up Python's global interpreter lock and waits to take it back from threads
busy drawing pages, so it crawls: the induction preset took 236 s instead of 3.5 s beside two students rerunning
a page (measured with the load script that became ``bench/classroom_load.py``). A worker process has its own
interpreter. ``run`` sends it the training (any picklable callable returning a ``train.TrainResult`` and taking
``on_progress``/``on_step``), which runs there as ``body.run_training``; its reports come back through the
manager's queues and ``relay.relay`` hands them to the calling thread, and stops it at its next report if the
caller leaves (a closed tab).
The pool keeps ``local_queue.QUEUE.limit`` workers, started with "spawn" on first use and kept, so torch is imported
once per worker, not once per training; if one dies, the next training starts a new pool. The workers and the
manager watch their server: killed, even with ``kill -9``, they exit within a second, and the resource tracker
with them. A training uses as many threads as its caller says at each moment (``run``'s ``threads``): all the cores
while the server has nothing else to do, one beside a class.
"""

import multiprocessing
import os
import pickle
import queue
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing.managers import SyncManager

from classroom.training.body import Report, Trained, run_training, yield_to_pages
from classroom.training.local_queue import QUEUE
from classroom.training.relay import relay
from mechlib.train import Progress, TrainResult

__all__ = ["run", "warm", "die_with", "spawning"]

_lock = threading.Lock()
_shared: dict[str, object] = {}

WATCH_S = 0.5  # how often a worker or the manager looks whether its server is still there


def die_with(server: int) -> None:
    """In a worker or the manager: exit as soon as the server that started it is gone. A killed parent's children
    are handed to another process (their parent id changes); nothing else tells them, and they kept running with
    parent 1, ten minutes later. The resource tracker exits once the last of them has."""
    def watch() -> None:
        while os.getppid() == server:
            time.sleep(WATCH_S)
        os._exit(0)

    threading.Thread(target=watch, name="server watch", daemon=True).start()


def _start_worker(server: int) -> None:
    """Once per worker: import torch and mechlib, die with the server, and yield the CPU to the pages
    (``body.yield_to_pages``)."""
    import mechlib.train  # noqa: F401  (the import is the work: torch and mechlib, once per worker)

    die_with(server)
    yield_to_pages()


def _ready() -> bool:
    return True


@contextmanager
def spawning() -> Iterator[None]:
    """Hold the pool's lock, with a bare ``__main__`` module, while processes may start: a process started meanwhile
    (the manager, a worker) does not run the server's app script again.

    A "spawn" child first re-runs its parent's ``__main__`` from that module's file (``multiprocessing.spawn``).
    Streamlit runs each script as ``sys.modules["__main__"]`` with the app's ``__file__`` and leaves it there, so
    the manager and each worker executed the whole app outside any session: 255 "missing ScriptRunContext"
    warnings in the server's log when the Train page first started them, and the app's start-up work in every
    process. A ``__main__`` without a file leaves the children nothing to re-run; a training needs only mechlib and
    this module."""
    with _lock:
        script, sys.modules["__main__"] = sys.modules["__main__"], types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = script


def _pool() -> tuple[ProcessPoolExecutor, object]:
    """The process-wide pool and the manager its queues live in, made on first use; the workers start at once."""
    with spawning():
        if not _shared:
            context = multiprocessing.get_context("spawn")
            _shared["manager"] = SyncManager(ctx=context)
            _shared["manager"].start(die_with, (os.getpid(),))
            _shared["pool"] = ProcessPoolExecutor(QUEUE.limit, mp_context=context, initializer=_start_worker,
                                                  initargs=(os.getpid(),))
            for _ in range(QUEUE.limit):
                _shared["pool"].submit(_ready)
        return _shared["pool"], _shared["manager"]


def _forget(pool: ProcessPoolExecutor) -> None:
    """A worker or the manager died (killed for memory, say): drop them, so the next training starts new ones."""
    with _lock:
        if _shared.get("pool") is pool:
            _shared.clear()
    pool.shutdown(wait=False, cancel_futures=True)


def warm() -> None:
    """Start the workers now (a page calls this on every run; only the first starts them), so the first training
    does not wait for them."""
    _pool()


def _work(fn: Callable[..., TrainResult], kwargs: dict, messages, cancel, threads) -> Trained:
    """In the worker: ``body.run_training`` on ``threads.value`` threads, putting each report on ``messages`` with
    its value pickled (so the manager, which only passes them on, never imports torch); stop once ``cancel`` is
    set."""

    def send(kind: str, value) -> bool:
        messages.put((kind, pickle.dumps(value)))
        return cancel.is_set()

    return run_training(fn, kwargs, send, threads=lambda: threads.value)


class _Channel:
    """``relay.Channel`` through the manager: the reports' queue, the stop's event, the thread count's value (passed
    on at each poll), and the pool's future of the training."""

    POLL_S = 0.1

    def __init__(self, future: Future, messages, cancel, allowed, threads: Callable[[], int]):
        self.future, self.messages, self.cancel, self.allowed, self.threads = future, messages, cancel, allowed, threads
        self.wanted = allowed.value

    def receive(self, wait: bool) -> Report | None:
        if (now := self.threads()) != self.wanted:
            self.allowed.value = self.wanted = now
        try:
            kind, value = self.messages.get(timeout=self.POLL_S) if wait else self.messages.get_nowait()
        except queue.Empty:
            return None
        return kind, pickle.loads(value)

    def ended(self) -> bool:
        return self.future.done()  # every put happens before the worker returns

    def result(self) -> Trained:
        return self.future.result()

    def stop(self) -> None:
        self.future.cancel()  # not started yet: never starts
        try:
            self.cancel.set()  # started: stops within ten steps
        except (OSError, EOFError):
            pass  # the manager is gone, and the worker with it


def run(fn: Callable[..., TrainResult], kwargs: dict, on_progress: Callable[[Progress], None],
        on_step: Callable[[int], None], threads: Callable[[], int]) -> Trained:
    """``fn(**kwargs, on_progress=…, on_step=…)`` in a worker process: (the trained model as safetensors bytes, its
    history). ``on_progress(progress)`` and ``on_step(step)`` (every 10th step) run here, in the caller's thread
    (``relay.relay``); if either raises, or the caller is stopped, the worker stops within ten steps. ``threads()``,
    asked here every 0.1 s, is how many threads the training may use now; the worker follows within ten steps. A
    training's weights do not depend on it (``tests/app/test_workers.py``). Errors in the training (a refused size,
    say) are raised here; a worker that died raises ``RuntimeError`` and the next training gets a new one."""
    pool, manager = _pool()
    try:
        messages, cancel, allowed = manager.Queue(), manager.Event(), manager.Value("i", threads())
        with spawning():  # a pool starts a worker on a submit that finds none idle
            future = pool.submit(_work, fn, kwargs, messages, cancel, allowed)
    except (BrokenProcessPool, OSError, EOFError) as error:
        _forget(pool)
        raise RuntimeError("the training processes had stopped; they are restarted: press the button again") from error
    try:
        return relay(_Channel(future, messages, cancel, allowed, threads), on_progress, on_step)
    except (BrokenProcessPool, OSError, EOFError) as error:
        _forget(pool)
        raise RuntimeError("the training process stopped unexpectedly (out of memory?); press the button again") from error
