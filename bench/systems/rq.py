"""RQ: one job at a time per worker; SimpleWorker (no fork per job) is its fastest mode."""

from __future__ import annotations

from importlib.metadata import version

import redis
from rq import Queue
from rq.worker import SimpleWorker

from .. import common as c

VERSION = version("rq")
ASYNC = False
KIND = "def"  # task bodies are `def` functions, run by its sync pool
BULK_NOTE = "Queue.enqueue_many (one pipeline)"
CONC = {"dispatch": 1, "io": 1, "latency": 1}
FUNCS = {"noop": c.noop_sync, "sleep": c.sleep_sync, "lat": c.lat_sync}

conn = redis.Redis.from_url(c.URL)
queue = Queue(c.QUEUE, connection=conn)
# result_ttl=0: the job is deleted as it finishes, no result kept.
RESULT_TTL = 500 if c.RESULTS else 0


def setup() -> None:
    conn.ping()


def enqueue_one(kind: str, t: float) -> None:
    queue.enqueue(FUNCS[kind], t, result_ttl=RESULT_TTL)


def enqueue_bulk(kind: str, ts: list[float]) -> None:
    queue.enqueue_many([Queue.prepare_data(FUNCS[kind], (t,), result_ttl=RESULT_TTL)
                        for t in ts])


def run_worker() -> None:
    SimpleWorker([queue], connection=conn).work(logging_level="WARNING")


def results_modes() -> dict[bool, str | None]:
    return {True: "result_ttl=500", False: "result_ttl=0 (job deleted when done)"}


def settings(workload: str) -> str:
    return "SimpleWorker (no fork per job): one job at a time, so concurrency 1"
