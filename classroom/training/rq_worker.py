"""A training worker for a class whose shared state is in Redis: ``python -m classroom.training.rq_worker REDIS_URL``
from the repository root, on any machine that reaches that Redis, with the class's job key in ``CLASSROOM_JOB_KEY``
(``deploy/class.sh`` starts them). It takes the class's trainings (``rq_jobs``) one at a time, on
``MECHLIB_THREADS`` threads, niced below the pages (``body.yield_to_pages``). It reads jobs as JSON and runs no
function but ``rq_jobs.work``, which opens only what the class sealed: a job someone else put in Redis runs nothing here.

torch and mechlib are imported before the first job, once per worker: imported by the first job's unpickling
instead, they took 8 s of it on a busy machine, and the job waited that long before its first step."""

import sys
import threading
import uuid

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import DeserializationError
from rq.serializers import JSONSerializer

import mechlib.train  # noqa: F401  (the import is the work: torch and mechlib, before the first job)
from classroom.training.body import yield_to_pages
from classroom.training.rq_jobs import JOB_FUNCTION, QUEUE_NAME, worker_alive


class ClassWorker(SimpleWorker):
    """RQ's worker, for the class's one job function only: any other is failed unrun."""

    def execute_job(self, job, queue) -> None:
        try:
            name = job.func_name  # read as JSON: a job pickled by someone else is not JSON, and is refused unread
        except DeserializationError:
            name = None
        if name != JOB_FUNCTION:
            job.set_status("failed")
            self.log.warning("refused a job of %r: this worker runs %s only", str(name)[:80], JOB_FUNCTION)
            return
        super().execute_job(job, queue)


def main(url: str) -> None:
    yield_to_pages()
    connection = redis.Redis.from_url(url)
    threading.Thread(target=worker_alive, args=(connection, uuid.uuid4().hex, threading.Event()), daemon=True,
                     name="worker heartbeat").start()
    ClassWorker([Queue(QUEUE_NAME, connection=connection, serializer=JSONSerializer)], connection=connection,
                serializer=JSONSerializer).work(logging_level="WARNING")


if __name__ == "__main__":
    main(sys.argv[1])
