"""This server's worker processes (``local_workers``): a training follows the threads it is given, the workers yield
to the pages and never run the server's script, and they die with their server. What every backend promises (the
same model and reports, errors raised, a stop honoured) is ``tests/app/test_training_jobs.py``'s contract."""

import os
import time
from pathlib import Path

import torch

from classroom.training import body, local_queue, local_workers
from mechlib import io, train
from mechlib.config import ModelConfig
from mechlib.data import RandomTokens, WithRepeats

ROOT = Path(__file__).resolve().parents[2]

CFG = ModelConfig(n_layers=2, d_model=32, n_heads=2, d_vocab=20, n_ctx=24, seed=3)
DATA = WithRepeats(RandomTokens(20), lengths=(4, 5, 6, 7))
KWARGS = {"cfg": CFG, "data": DATA, "steps": 40, "seed": 7, "eval_every": 10, "watch": 5}
THREADS = torch.get_num_threads()  # this process's, as mechlib.device set them


def one() -> int:
    """Threads for a training: one, as beside a class."""
    return 1


def train_noting_threads(on_progress, on_step, **kwargs) -> train.TrainResult:
    """``train.train`` in a worker, with the thread count it ran each step on as the history's last row."""
    seen = []

    def step(number: int) -> None:
        on_step(number)
        seen.append(torch.get_num_threads())

    result = train.train(**kwargs, on_progress=on_progress, on_step=step)
    return train.TrainResult(result.model, [*result.history, {"threads": seen}])


def test_a_training_follows_the_threads_it_is_given_and_its_weights_do_not_depend_on_them():
    """The server gives a training every core while the class is quiet and one beside it, and changes its mind
    mid-training (``activity.training_threads``); the same seed must give the same model either way. Float sums
    split over threads could differ: on this torch build the weights are bit for bit the same."""
    calls = [0]

    def alternating() -> int:  # asked every 0.1 s: one thread, then two, then one…
        calls[0] += 1
        return 1 + (calls[0] // 3) % 2

    kwargs = {**KWARGS, "steps": 400, "eval_every": 400}
    model, history = local_workers.run(train_noting_threads, kwargs, lambda p: None, lambda step: None, threads=alternating)
    assert set(history[-1]["threads"]) == {1, 2}, "the worker did not follow the count it was given"
    torch.set_num_threads(1)
    try:
        here = train.train(**kwargs)
    finally:
        torch.set_num_threads(THREADS)
    loaded = io.load(model)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), here.model.state_dict().values()))
    assert history[:-1] == here.history


def test_workers_train_below_the_pages_priority():
    pool, _ = local_workers._pool()  # the pool itself: a training's own code cannot tell its niceness back
    assert pool.submit(os.nice, 0).result() == min(19, os.nice(0) + body.WORKER_NICE)


def test_new_workers_do_not_run_the_servers_script_again(tmp_path, monkeypatch):
    """Streamlit leaves ``sys.modules["__main__"]`` as the app's script (``__file__`` = app.py); a "spawn" child re-runs
    that file first, so every worker and the manager ran the whole app outside a session (255 "missing
    ScriptRunContext" warnings when the Train page started them). Here the script only leaves a mark when run."""
    import sys
    import types

    mark = tmp_path / "ran"
    script = tmp_path / "app.py"
    script.write_text(f"open({str(mark)!r}, 'a').write('ran\\n')\n")
    as_streamlit_leaves_it = types.ModuleType("__main__")
    as_streamlit_leaves_it.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", as_streamlit_leaves_it)
    if "pool" in local_workers._shared:                                  # new processes, started while the script is __main__
        local_workers._forget(local_workers._shared["pool"])
    try:
        _, history = local_workers.run(train.train, KWARGS, on_progress=lambda p: None, on_step=lambda step: None,
                                 threads=one)
        assert history[-1]["step"] == 40 and sys.modules["__main__"] is as_streamlit_leaves_it
        assert not mark.exists()                             # neither the manager nor a worker ran the script
    finally:
        local_workers._forget(local_workers._shared["pool"])


SERVER = """
import sys, threading, time
from classroom.training import local_workers
from mechlib import train
from mechlib.config import ModelConfig
from mechlib.data import RandomTokens

kwargs = {"cfg": ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=20, n_ctx=16), "data": RandomTokens(20),
          "steps": 10_000_000, "seed": 0, "eval_every": 10_000_000, "watch": 5}
threading.Thread(target=local_workers.run, args=(train.train, kwargs, lambda p: None, print, lambda: 1), daemon=True).start()
time.sleep(600)
"""


def _children(pid: int) -> set[int]:
    """Every process whose parent is ``pid``, and theirs."""
    found, parents = set(), {pid}
    while parents:
        new = set()
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (ValueError, OSError, IndexError):
                continue
            if ppid in parents and int(entry) not in found:
                new.add(int(entry))
        found |= new
        parents = new
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_workers_the_manager_and_the_resource_tracker_die_with_a_killed_server(tmp_path):
    """A server killed with ``kill -9`` while a training runs: within 5 s no worker, manager or resource tracker of
    it is left (they kept running with parent 1 for ten minutes)."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "server.py"
    script.write_text(SERVER)
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})  # classroom/ is the app's, not installed
    try:
        assert server.stdout.readline().strip() == "10"  # the worker is training: its tenth step reached us
        children = _children(server.pid)
        assert len(children) >= 1 + local_queue.QUEUE.limit  # the manager and the workers (and the resource tracker)
        server.send_signal(signal.SIGKILL)
        server.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.1)
        assert [pid for pid in children if _alive(pid)] == []
    finally:
        server.kill()
