"""Trainings as jobs in an RQ queue on the class's Redis, run by worker processes that any machine reaching that
Redis can start (``training_worker``; ``deploy/class.sh`` starts them beside the replicas).

RQ rather than Celery: it needs nothing but the Redis the class already runs (Celery brings its own broker and
result-backend layers, a scheduler and a larger configuration), its jobs are plain function calls, and its queue
position, job status and worker count are one call each. A ``SimpleWorker`` runs each job in its own process, so
torch and mechlib are imported once per worker, not once per training.

Progress, cancellation and liveness travel through Redis keys beside the job (``Keys``): the worker appends each
progress report (and every 10th step) to a list the page pops; the page sets a key to stop the training at its next
step (a closed tab, a rerun); the worker renews a short-lived key every second, so a worker killed mid-training
(``kill -9``, out of memory) is noticed within ``ALIVE_TTL_S`` and its student told so. Between taking a job and
its first renewal a worker reads the job's data; one killed then is noticed after ``STARTING_S``.

Whoever reaches the class's Redis could put a job there, and a pickle runs code as it is read: so RQ's own record
of a job is JSON (``JSONSerializer``: a function's name and a string), a worker runs no function but ``work``
(``training_worker``), and everything pickled that crosses Redis (the training's arguments, its reports, its
result) is sealed with an HMAC under the class's job key (``KEY_SETTING``, which the replicas and the workers share
and Redis never holds) and opened only once its seal checks."""

import base64
import hashlib
import hmac
import json
import os
import pickle
import threading
import time

import redis
from rq import Queue, get_current_job
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from classroom.training.local_queue import SessionBusy, estimate_wait
from classroom.training.local_workers import Cancelled
from mechlib import io
from mechlib.train import Progress

__all__ = ["QUEUE_NAME", "ALIVE_TTL_S", "KEY_SETTING", "JOB_FUNCTION", "SealError", "seal", "unseal", "Keys",
           "RedisTrainings", "work"]

QUEUE_NAME = "classroom-trainings"
PREFIX = "classroom:training:"
RUNNING = PREFIX + "running"      # hash: job id -> [step, steps, started (unix s)], the running trainings' progress
WORKERS = PREFIX + "worker:"      # one key per live worker, renewed every BEAT_S, expiring after ALIVE_TTL_S
DURATIONS = PREFIX + "durations"  # list: the wall times of the last RECENT finished trainings, newest first
RECENT = 8
ALIVE_TTL_S = 3.0   # a running training's worker renews its key every BEAT_S; gone this long, the worker is dead
BEAT_S = 1.0
STARTING_S = 60.0   # a started job's worker has this long to renew its key the first time
POLL_S = 0.5        # the page waits this long for a message before it looks at the job's status
JOB_TIMEOUT_S = 3600
KEEP_S = 600        # a job's messages and result outlive it this long
KEY_SETTING = "CLASSROOM_JOB_KEY"  # the secret the replicas and the workers seal with (deploy/class.sh makes one)
JOB_FUNCTION = "classroom.training.rq_jobs.work"  # the one function a worker runs


class SealError(RuntimeError):
    """Data in Redis that the class's own replicas and workers did not seal: never unpickled."""


def _key() -> bytes:
    if not (key := os.environ.get(KEY_SETTING, "")):
        raise SealError(f"trainings through Redis need {KEY_SETTING}, the class's secret shared by its replicas and "
                        "workers (deploy/class.sh makes one); it is not set here")
    return key.encode()


def seal(value) -> str:
    """``value`` pickled and sealed (HMAC-SHA256 under the job key), as text RQ's JSON can carry."""
    data = pickle.dumps(value)
    return base64.b64encode(hmac.new(_key(), data, hashlib.sha256).digest() + data).decode()


def unseal(text: str | bytes):
    """The value ``seal`` sealed; ``SealError`` for anything whose seal does not check (never unpickled)."""
    raw = base64.b64decode(text)
    mac, data = raw[:32], raw[32:]
    if not hmac.compare_digest(mac, hmac.new(_key(), data, hashlib.sha256).digest()):
        raise SealError("a training's data in Redis was not sealed by this class's replicas or workers; it was not "
                        "opened")
    return pickle.loads(data)


class Keys:
    """The Redis keys beside one job."""

    def __init__(self, job_id: str):
        self.messages = f"{PREFIX}{job_id}:messages"  # list of sealed ("step", int) and ("progress", Progress)
        self.cancel = f"{PREFIX}{job_id}:cancel"      # set by the page: stop at the next step
        self.alive = f"{PREFIX}{job_id}:alive"        # renewed by the worker every BEAT_S, expires after ALIVE_TTL_S


def work(sealed: str, steps: int) -> dict:
    """In the worker: ``fn(**kwargs, on_progress=…, on_step=…)`` of the sealed (fn, kwargs), reporting through
    ``Keys`` and ``RUNNING``. Returns {"result": sealed (safetensors bytes, history)}, or {"refused": message} for
    settings the training refuses (a ``ValueError``), which the page shows as the in-process pool's would be."""
    fn, kwargs = unseal(sealed)
    job = get_current_job()
    shared, keys, started = job.connection, Keys(job.id), time.time()
    done = threading.Event()

    def beat() -> None:
        while not done.is_set():
            shared.set(keys.alive, b"1", px=int(ALIVE_TTL_S * 1000))
            done.wait(BEAT_S)

    def report(kind: str, value, step: int) -> None:
        with shared.pipeline() as pipe:
            pipe.rpush(keys.messages, seal((kind, value))).expire(keys.messages, KEEP_S)
            pipe.hset(RUNNING, job.id, json.dumps([step, steps, started])).exists(keys.cancel)
            if pipe.execute()[-1]:
                raise Cancelled(f"stopped at step {step}")

    def on_step(step: int) -> None:
        if step % 10 == 0:  # each is a round trip to Redis
            report("step", step, step)

    def on_progress(progress: Progress) -> None:
        report("progress", progress, progress.step)

    if shared.exists(keys.cancel):  # the page left while the job waited
        return {"refused": "cancelled before it started"}
    shared.set(keys.alive, b"1", px=int(ALIVE_TTL_S * 1000))
    threading.Thread(target=beat, name="training heartbeat", daemon=True).start()
    try:
        shared.hset(RUNNING, job.id, json.dumps([0, steps, started]))
        try:
            result = fn(**kwargs, on_progress=on_progress, on_step=on_step)
        except ValueError as error:
            return {"refused": str(error)}
        shared.pipeline().lpush(DURATIONS, time.time() - started).ltrim(DURATIONS, 0, RECENT - 1).execute()
        return {"result": seal((io.to_bytes(result.model), result.history))}
    finally:
        done.set()
        shared.pipeline().hdel(RUNNING, job.id).delete(keys.alive).execute()


def worker_alive(shared: redis.Redis, name: str, stop: threading.Event) -> None:
    """In a worker, until ``stop``: renew this worker's key every ``BEAT_S`` (``RedisTrainings.limit`` counts them)."""
    while not stop.is_set():
        shared.set(WORKERS + name, b"1", px=int(ALIVE_TTL_S * 1000))
        stop.wait(BEAT_S)


class RedisTrainings:
    """The class's trainings as RQ jobs: one per session, as many at once as workers are connected."""

    def __init__(self, shared: redis.Redis):
        self.shared = shared
        self.queue = Queue(QUEUE_NAME, connection=shared, serializer=JSONSerializer)

    def limit(self) -> int:
        """The workers alive now: each renews a key of its own every ``BEAT_S`` (``worker_alive``). RQ's own count
        kept a killed worker for minutes, and its students read "position 1 in the queue, about 0 s"."""
        return sum(1 for _ in self.shared.scan_iter(match=WORKERS + "*", count=1000))

    def running(self) -> int:
        return len(self._running())

    def warm(self) -> None:
        """Nothing to start: the workers run apart from the replicas."""

    def _running(self) -> list[list[float]]:
        """[step, steps, started] of each running training whose worker is alive."""
        rows = self.shared.hgetall(RUNNING)
        with self.shared.pipeline() as pipe:
            for job_id in rows:
                pipe.exists(Keys(job_id.decode()).alive)
            alive = pipe.execute()
        return [json.loads(row) for row, live in zip(rows.values(), alive) if live]

    def wait_s(self, ahead: int) -> float | None:
        """Seconds until a worker frees for a job with ``ahead`` others before it (``estimate_wait``)."""
        now = time.time()
        running = [(step, steps, now - started) for step, steps, started in self._running()]
        durations = [float(d) for d in self.shared.lrange(DURATIONS, 0, -1)]
        return estimate_wait(running, ahead, durations, max(self.limit(), 1))

    def train(self, owner, steps, memory_mb, fn, kwargs, on_wait, on_start, on_progress, on_step, threads):
        """See ``trainings.Trainings.train``; ``memory_mb`` and ``threads`` are the worker machine's own
        (``MECHLIB_THREADS`` there), not this server's."""
        owned = f"{PREFIX}owner:{owner}"
        if not self.shared.set(owned, b"1", nx=True, ex=JOB_TIMEOUT_S):
            raise SessionBusy("this session already has a training running or waiting for a slot; one training "
                              "per session at a time")
        try:
            job = self.queue.enqueue(JOB_FUNCTION, seal((fn, kwargs)), steps, job_timeout=JOB_TIMEOUT_S,
                                     result_ttl=KEEP_S, failure_ttl=KEEP_S)
            try:
                return self._follow(job, Keys(job.id), on_wait, on_start, on_progress, on_step)
            finally:
                self.shared.set(Keys(job.id).cancel, b"1", ex=KEEP_S)
                if job.get_status() == JobStatus.QUEUED:
                    job.cancel()
        finally:
            self.shared.delete(owned)

    def _follow(self, job: Job, keys: Keys, on_wait, on_start, on_progress, on_step):
        """Relay the job's messages to the callbacks until it ends; its result, or the reason it has none."""
        started = []

        def begin() -> None:
            if not started:
                started.append(on_start())

        def relay(message: bytes) -> None:
            begin()
            kind, value = unseal(message)
            (on_progress if kind == "progress" else on_step)(value)

        missing_since = None
        while True:
            if (popped := self.shared.blpop([keys.messages], timeout=POLL_S)) is not None:
                relay(popped[1])
                continue
            status = job.get_status()
            if status == JobStatus.QUEUED:
                position = (job.get_position() or 0) + 1
                on_wait(position, self.wait_s(position - 1))
            elif status == JobStatus.FINISHED:
                begin()
                for message in self.shared.lrange(keys.messages, 0, -1):  # every push precedes the job's end
                    relay(message)
                result = job.return_value()
                if "refused" in result:
                    raise ValueError(result["refused"])
                return unseal(result["result"])
            elif status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
                raise RuntimeError(f"the training's worker reported it {status.value}; press the button again")
            elif self.shared.exists(keys.alive):
                begin()
            elif started or missing_since is not None and time.monotonic() - missing_since > STARTING_S:
                raise RuntimeError("the worker process running this training stopped (killed, or out of memory?); "
                                   "press the button again and another worker takes it")
            else:  # started, and its worker has not yet renewed its key for the first time
                missing_since = missing_since or time.monotonic()
