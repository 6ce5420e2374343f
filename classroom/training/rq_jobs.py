"""Trainings as jobs in an RQ queue on the class's Redis, run by worker processes that any machine reaching that
Redis can start (``rq_worker``; ``deploy/class.sh`` starts them beside the replicas): the Redis backend's transport.
A job runs ``body.run_training``, the page follows it with ``relay.relay``, and one session's second training is
refused by ``claim.one_per_session``, as on this server's own pool.

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
(``rq_worker``), and everything pickled that crosses Redis (the training's arguments, its reports, its
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

from classroom.training.body import PROGRESS, Report, Trained, run_training
from classroom.training.claim import one_per_session
from classroom.training.estimates import estimate_wait
from classroom.training.relay import relay

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
    """In the worker: ``body.run_training`` of the sealed (fn, kwargs), reporting through ``Keys`` and ``RUNNING``.
    Returns {"result": sealed (safetensors bytes, history)}, or {"refused": message} for settings the training
    refuses (a ``ValueError``), which the page shows as the in-process pool's would be."""
    fn, kwargs = unseal(sealed)
    job = get_current_job()
    shared, keys, started = job.connection, Keys(job.id), time.time()
    done = threading.Event()

    def beat() -> None:
        while not done.is_set():
            shared.set(keys.alive, b"1", px=int(ALIVE_TTL_S * 1000))
            done.wait(BEAT_S)

    def send(kind: str, value) -> bool:
        step = value.step if kind == PROGRESS else value
        with shared.pipeline() as pipe:  # one round trip: the report, the progress, and whether the page left
            pipe.rpush(keys.messages, seal((kind, value))).expire(keys.messages, KEEP_S)
            pipe.hset(RUNNING, job.id, json.dumps([step, steps, started])).exists(keys.cancel)
            return bool(pipe.execute()[-1])

    if shared.exists(keys.cancel):  # the page left while the job waited
        return {"refused": "cancelled before it started"}
    shared.set(keys.alive, b"1", px=int(ALIVE_TTL_S * 1000))
    threading.Thread(target=beat, name="training heartbeat", daemon=True).start()
    try:
        shared.hset(RUNNING, job.id, json.dumps([0, steps, started]))
        try:
            trained = run_training(fn, kwargs, send)
        except ValueError as error:
            return {"refused": str(error)}
        shared.pipeline().lpush(DURATIONS, time.time() - started).ltrim(DURATIONS, 0, RECENT - 1).execute()
        return {"result": seal(trained)}
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

    def train(self, owner, steps, memory_mb, fn, kwargs, on_wait, on_start, on_progress, on_step, threads) -> Trained:
        """See ``door.Trainings.train``; ``memory_mb`` and ``threads`` are the worker machine's own
        (``MECHLIB_THREADS`` there), not this server's."""
        with one_per_session(self.shared, owner, ttl_s=JOB_TIMEOUT_S):
            job = self.queue.enqueue(JOB_FUNCTION, seal((fn, kwargs)), steps, job_timeout=JOB_TIMEOUT_S,
                                     result_ttl=KEEP_S, failure_ttl=KEEP_S)
            return relay(_Channel(self, job, on_wait, on_start), on_progress, on_step)


class _Channel:
    """``relay.Channel`` through Redis: the job's sealed reports in a list, its cancel key, its worker's heartbeat,
    and RQ's status of the job, which also tells the page its place in the queue (``on_wait``) and when the training
    starts (``on_start``)."""

    def __init__(self, trainings: RedisTrainings, job: Job, on_wait, on_start):
        self.trainings, self.shared, self.job, self.keys = trainings, trainings.shared, job, Keys(job.id)
        self.on_wait, self.on_start = on_wait, on_start
        self.started = False
        self.missing_since: float | None = None  # when the job was first seen started with no heartbeat yet

    def begin(self) -> None:
        if not self.started:
            self.started = True
            self.on_start()

    def receive(self, wait: bool) -> Report | None:
        if wait:
            popped = self.shared.blpop([self.keys.messages], timeout=POLL_S)
            message = popped and popped[1]
        else:
            message = self.shared.lpop(self.keys.messages)
        if message is None:
            return None
        self.begin()
        return unseal(message)

    def ended(self) -> bool:
        status = self.job.get_status()
        if status == JobStatus.QUEUED:
            position = (self.job.get_position() or 0) + 1
            self.on_wait(position, self.trainings.wait_s(position - 1))
            return False
        if status == JobStatus.FINISHED:  # every push precedes the job's end
            self.begin()
            return True
        if status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
            raise RuntimeError(f"the training's worker reported it {status.value}; press the button again")
        if self.shared.exists(self.keys.alive):
            self.begin()
        elif self.started or self.missing_since is not None and time.monotonic() - self.missing_since > STARTING_S:
            raise RuntimeError("the worker process running this training stopped (killed, or out of memory?); "
                               "press the button again and another worker takes it")
        else:  # started, and its worker has not yet renewed its key for the first time
            self.missing_since = self.missing_since or time.monotonic()
        return False

    def result(self) -> Trained:
        if "refused" in (returned := self.job.return_value()):
            raise ValueError(returned["refused"])
        return unseal(returned["result"])

    def stop(self) -> None:
        self.shared.set(self.keys.cancel, b"1", ex=KEEP_S)
        if self.job.get_status() == JobStatus.QUEUED:
            self.job.cancel()
