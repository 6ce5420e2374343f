"""A training worker for a class whose shared state is in Redis: ``python -m classroom.training_worker REDIS_URL``
from the repository root, on any machine that reaches that Redis (``deploy/class.sh`` starts them). It takes the
class's trainings (``training_jobs``) one at a time, on ``MECHLIB_THREADS`` threads, niced below the pages.

torch and mechlib are imported before the first job, once per worker: imported by the first job's unpickling
instead, they took 8 s of it on a busy machine, and the job waited that long before its first step."""

import os
import sys

import redis
from rq import Queue, SimpleWorker

import mechlib.train  # noqa: F401  (the import is the work: torch and mechlib, before the first job)
from classroom.training_jobs import QUEUE_NAME
from classroom.workers import WORKER_NICE


def main(url: str) -> None:
    os.nice(WORKER_NICE)
    connection = redis.Redis.from_url(url)
    SimpleWorker([Queue(QUEUE_NAME, connection=connection)], connection=connection).work(logging_level="WARNING")


if __name__ == "__main__":
    main(sys.argv[1])
