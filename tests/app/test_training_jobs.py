"""Trainings through the door (``classroom.training.door``), one contract on both backends: this server's queue and
worker processes (``LocalTrainings``) and RQ jobs on Redis run by real worker processes (``rq_jobs.RedisTrainings``).
On each, the same model and the same reports as in this process, a refused setting raised, one training per session
(while it runs or waits), a place in the queue while the workers are busy, and a page that leaves stopping its
training. Then what only Redis has: a worker killed mid-training reported within seconds, and the seal on
everything that crosses Redis."""

import base64
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis
import torch

from classroom.training import local_queue
from classroom.training.door import LocalTrainings, Trainings
from classroom.training.errors import SessionBusy
from classroom.training.rq_jobs import (
    ALIVE_TTL_S,
    KEY_SETTING,
    QUEUE_NAME,
    RedisTrainings,
    SealError,
    seal,
    unseal,
)
from mechlib import io, sae_residual, train
from mechlib.config import ModelConfig
from mechlib.data import RandomTokens, WithRepeats

ROOT = Path(__file__).resolve().parents[2]
CFG = ModelConfig(n_layers=2, d_model=32, n_heads=2, d_vocab=20, n_ctx=24, seed=3)
DATA = WithRepeats(RandomTokens(20), lengths=(4, 5, 6, 7))
KWARGS = {"cfg": CFG, "data": DATA, "steps": 40, "seed": 7, "eval_every": 10, "watch": 5}
LONG = {**KWARGS, "steps": 100_000, "eval_every": 1_000}  # runs until stopped
THREADS = torch.get_num_threads()  # this process's, as mechlib.device set them


class Worker:
    """One ``rq_worker`` process, as ``deploy/class.sh`` starts it, on the test's Redis database."""

    def __init__(self, url: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "classroom.training.rq_worker", url],
            cwd=ROOT, env={**os.environ, "MECHLIB_THREADS": "1"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


@pytest.fixture
def jobs(redis_server, monkeypatch):
    """A RedisTrainings on a database of its own, emptied, with the class's job key shared with its workers; every
    worker stopped after."""
    monkeypatch.setenv(KEY_SETTING, "a class's secret, for this test")
    url = redis_server.url.rsplit("/", 1)[0] + "/5"
    shared = redis.Redis.from_url(url)
    shared.flushdb()
    trainings, started = RedisTrainings(shared), []

    def start_worker() -> Worker:
        started.append(Worker(url))
        deadline = time.monotonic() + 60
        while trainings.limit() < len([w for w in started if w.process.poll() is None]):
            assert time.monotonic() < deadline, started[-1].process.stderr.read1().decode()
            time.sleep(0.1)
        return started[-1]

    trainings.start_worker = start_worker
    yield trainings
    for worker in started:
        if worker.process.poll() is None:
            worker.process.terminate()
            worker.process.wait(timeout=30)
    shared.flushdb()


@pytest.fixture(params=["local", "redis"])
def trainings(request, monkeypatch) -> Trainings:
    """Either backend's trainings, ready to train: this server's (a fresh queue of two slots, its workers started)
    or Redis's (one worker connected)."""
    if request.param == "local":
        monkeypatch.setattr(local_queue, "QUEUE", local_queue.TrainingQueue(limit=2))
        local = LocalTrainings()
        local.warm()
        return local
    jobs = request.getfixturevalue("jobs")
    jobs.start_worker()
    return jobs


class Left(Exception):
    """The student left the page (a closed tab, a rerun)."""


def calls(trainings: Trainings, owner: str, kwargs: dict, **callbacks):
    """``trainings.train`` with callbacks that record; any given in ``callbacks`` replace them."""
    seen = {"wait": [], "start": [], "progress": [], "step": []}
    log = {"on_wait": lambda *a: seen["wait"].append(a), "on_start": lambda: seen["start"].append(time.monotonic()),
           "on_progress": seen["progress"].append, "on_step": seen["step"].append} | callbacks
    result = trainings.train(owner, kwargs["steps"], 0.0, train.train, kwargs, threads=lambda: 1, **log)
    return result, seen


def test_a_training_gives_the_model_and_the_reports_this_process_would(trainings):
    (model, history), seen = calls(trainings, "a", KWARGS)
    reports = []
    torch.set_num_threads(1)  # as the workers train: an evaluation's sums on more threads round differently
    try:
        here = train.train(**KWARGS, on_progress=reports.append)
    finally:
        torch.set_num_threads(THREADS)
    assert all(torch.equal(a, b) for a, b in zip(io.load(model).state_dict().values(), here.model.state_dict().values()))
    assert history == here.history

    def same(p: train.Progress, q: train.Progress) -> bool:  # all but the wall times
        return ((p.step, p.steps, p.loss, p.metrics, p.watched) == (q.step, q.steps, q.loss, q.metrics, q.watched)
                and np.array_equal(p.patterns, q.patterns))

    assert len(seen["progress"]) == len(reports) and all(map(same, seen["progress"], reports))
    assert [p.step for p in seen["progress"]] == [10, 20, 30, 40] and seen["step"] == [10, 20, 30, 40]
    assert seen["progress"][-1].patterns.shape == (2, 2, 11, 11)
    assert len(seen["start"]) == 1 and trainings.running() == 0


def test_a_sparse_autoencoders_training_is_a_job_like_a_models_and_gives_the_sae_this_process_would(trainings):
    """The Dictionary learning page's job: the same queue and workers, its reports and its SAE back as a checkpoint."""
    kwargs = {"model_name": "attn-only-2l", "hook_name": "blocks.1.hook_resid_post", "d_sae": 64, "k": 4,
              "steps": 20, "windows": 8, "batch_size": 64, "eval_every": 10}
    seen = {"progress": [], "step": []}
    data, history = trainings.train("sae", kwargs["steps"], 0.0, sae_residual.train_on_zoo, kwargs,
                                    on_wait=lambda *a: None, on_start=lambda: None,
                                    on_progress=seen["progress"].append, on_step=seen["step"].append,
                                    threads=lambda: 1)
    torch.set_num_threads(1)  # as the workers train
    try:
        here = sae_residual.train_on_zoo(**kwargs)
    finally:
        torch.set_num_threads(THREADS)
    sae = io.load(data)
    assert sae.cfg == here.model.cfg and sae.cfg.model_name == "attn-only-2l"
    assert all(torch.equal(a, b) for a, b in zip(sae.state_dict().values(), here.model.state_dict().values()))
    assert history == here.history and [p.step for p in seen["progress"]] == [10, 20] and seen["step"] == [10, 20]


def test_a_refused_setting_is_raised_as_the_training_raised_it(trainings):
    with pytest.raises(ValueError, match="steps=0: train for at least one step"):
        calls(trainings, "a", {**KWARGS, "steps": 0})


def test_one_training_per_session_while_it_runs_or_waits_and_a_place_in_the_queue_while_the_workers_are_busy(
        trainings):
    leave, outcomes = threading.Event(), []

    def until_left(step: int) -> None:
        if leave.is_set():
            raise Left(f"left at step {step}")

    def hold(owner: str) -> None:  # a training that runs until its student leaves
        try:
            calls(trainings, owner, LONG, on_step=until_left)
        except Left:
            outcomes.append("left")

    holders = [threading.Thread(target=hold, args=(f"holder {i}",)) for i in range(trainings.limit())]
    for holder in holders:
        holder.start()
    deadline = time.monotonic() + 30
    while trainings.running() < trainings.limit():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(SessionBusy, match="one training per session at a time"):  # its training runs
        calls(trainings, "holder 0", KWARGS)
    waits, refused = [], []

    def waited(position: int, wait_s: float | None) -> None:
        waits.append(position)
        if not refused:
            try:
                calls(trainings, "b", KWARGS)
            except SessionBusy:  # its training waits
                refused.append("b")
        leave.set()  # the first students leave once the second is queued behind them

    (model, _), seen = calls(trainings, "b", KWARGS, on_wait=waited)
    for holder in holders:
        holder.join(timeout=30)
    assert waits[0] == 1 and refused == ["b"] and seen["step"][-1] == 40 and io.load(model) is not None
    assert outcomes == ["left"] * len(holders) and trainings.running() == 0
    (_, history), _ = calls(trainings, "holder 0", KWARGS)  # finished: the session trains again
    assert history[-1]["step"] == 40


def test_a_page_that_leaves_stops_its_training_and_the_workers_go_on(trainings):
    def leave(progress: train.Progress) -> None:
        raise Left

    with pytest.raises(Left):
        calls(trainings, "a", {**KWARGS, "steps": 100_000}, on_progress=leave)
    # Then as many trainings as workers, each until all of them train at once: they do only if the stopped one let
    # its worker go (100,000 steps take minutes). Its session is among them: it may train again.
    owners = ["a", *(f"other {i}" for i in range(1, trainings.limit()))]
    training, together, left = set(), threading.Event(), []

    def until_together(owner: str):
        def stepped(step: int) -> None:
            training.add(owner)
            if len(training) == len(owners):
                together.set()
            if together.is_set():
                raise Left

        return stepped

    def session(owner: str) -> None:
        try:
            calls(trainings, owner, LONG, on_step=until_together(owner))
        except Left:
            left.append(owner)

    sessions = [threading.Thread(target=session, args=(owner,)) for owner in owners]
    for thread in sessions:
        thread.start()
    reached = together.wait(60)
    together.set()  # either way, they all stop now
    for thread in sessions:
        thread.join(timeout=60)
    assert reached and sorted(left) == sorted(owners)


def test_a_worker_killed_mid_training_is_reported_within_seconds(jobs):
    worker = jobs.start_worker()
    killed = []

    def kill_once(step: int) -> None:
        if step >= 100 and not killed:
            worker.kill()
            killed.append(time.monotonic())

    with pytest.raises(RuntimeError, match="the worker process running this training stopped"):
        calls(jobs, "a", LONG, on_step=kill_once)
    assert time.monotonic() - killed[0] < ALIVE_TTL_S + 2.0
    assert jobs.running() == 0
    jobs.start_worker()  # the student presses again: a live worker takes it
    (model, _), _ = calls(jobs, "a", KWARGS)
    assert io.load(model) is not None


def test_a_worker_runs_no_job_but_the_classs_and_opens_nothing_it_did_not_seal(jobs, tmp_path):
    """Issue 38, H4: whoever reached the class's Redis could queue a job, and a worker unpickled and ran it. A job of
    another function, a pickled job, and a training sealed under another key each run nothing (a file that each
    would create stays absent), and the worker goes on to train the class's next one."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    jobs.start_worker()
    marker = tmp_path / "pwned"
    as_json = Queue(QUEUE_NAME, connection=jobs.shared, serializer=JSONSerializer)
    foreign = as_json.enqueue("os.system", f"touch {marker}")
    pickled = Queue(QUEUE_NAME, connection=jobs.shared).enqueue(os.system, f"touch {marker}")
    with pytest.MonkeyPatch.context() as other:
        other.setenv(KEY_SETTING, "another key")
        forged = as_json.enqueue("classroom.training.rq_jobs.work", seal((os.system, f"touch {marker}")), 1)
    deadline = time.monotonic() + 60
    while any(job.get_status(refresh=True) in ("queued", "started") for job in (foreign, pickled, forged)):
        assert time.monotonic() < deadline, [job.get_status() for job in (foreign, pickled, forged)]
        time.sleep(0.1)
    assert not marker.exists()
    assert {job.get_status() for job in (foreign, pickled, forged)} == {"failed"}
    (model, history), _ = calls(jobs, "a session", KWARGS)  # and the class's own training still runs
    assert history[-1]["step"] == 40


def test_what_the_class_did_not_seal_is_refused_unopened(monkeypatch):
    """A training's report or result in Redis is opened only under the class's key: a pickle put there by someone
    else (or sealed under another key) is refused before it is read."""
    marker = []
    monkeypatch.setattr("pickle.loads", lambda data: marker.append(data))  # any unpickling would be recorded here
    monkeypatch.setenv(KEY_SETTING, "another class's key")
    forged = seal(("step", 10))
    monkeypatch.setenv(KEY_SETTING, "this class's key")
    for text in (forged, base64.b64encode(b"x" * 32 + pickle.dumps(("step", 10))).decode()):
        with pytest.raises(SealError, match="was not sealed by this class's replicas or workers"):
            unseal(text)
    assert marker == [] and unseal(seal(("step", 10))) is None  # the class's own: opened (here, by the stand-in)
