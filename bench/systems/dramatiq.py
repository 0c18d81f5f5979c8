"""Dramatiq with its Redis broker: one process, a thread pool."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from .. import common as c

VERSION = version("dramatiq")
ASYNC = False
KIND = "def"  # task bodies are `def` functions, run by its sync pool
BULK_NOTE = "none (group() enqueues one message at a time)"
CONC = {"dispatch": 8, "io": 100, "latency": 8}

broker = RedisBroker(url=c.URL)
if c.RESULTS:
    from dramatiq.results import Results
    from dramatiq.results.backends import RedisBackend

    broker.add_middleware(Results(backend=RedisBackend(url=c.URL)))
dramatiq.set_broker(broker)
OPTS = {"queue_name": c.QUEUE, "max_retries": 3}
if c.RESULTS:
    OPTS["store_results"] = True
TASKS = {
    "noop": dramatiq.actor(actor_name="noop", **OPTS)(c.noop_sync),
    "sleep": dramatiq.actor(actor_name="sleep", **OPTS)(c.sleep_sync),
    "lat": dramatiq.actor(actor_name="lat", **OPTS)(c.lat_sync),
}


def setup() -> None:
    broker.client.ping()


def enqueue_one(kind: str, t: float) -> None:
    TASKS[kind].send(t)


enqueue_bulk = None


def run_worker() -> None:
    os.execv(sys.executable, [sys.executable, "-m", "dramatiq", "bench.systems.dramatiq",
                              "--processes", "1", "--threads", str(c.CONCURRENCY),
                              "--queues", c.QUEUE])


def results_modes() -> dict[bool, str | None]:
    return {True: "Results middleware, RedisBackend, store_results=True",
            False: "no Results middleware (default)"}


def settings(workload: str) -> str:
    return f"--processes 1 --threads {CONC[workload]} (acks after the task: at-least-once)"
