"""Huey with RedisHuey (BRPOP: at-most-once) and a thread consumer."""

from __future__ import annotations

from importlib.metadata import version

from huey import RedisHuey

from .. import common as c

VERSION = version("huey")
ASYNC = False
KIND = "def"  # task bodies are `def` functions, run by its sync pool
BULK_NOTE = "none (each task call enqueues one message)"
CONC = {"dispatch": 8, "io": 100, "latency": 8}

# store_none: the no-op returns None, which huey would otherwise not store at all.
huey = RedisHuey(c.QUEUE, url=c.URL, results=c.RESULTS, store_none=c.RESULTS)
TASKS = {
    "noop": huey.task(name="noop")(c.noop_sync),
    "sleep": huey.task(name="sleep")(c.sleep_sync),
    "lat": huey.task(name="lat")(c.lat_sync),
}


def setup() -> None:
    huey.storage.conn.ping()


def enqueue_one(kind: str, t: float) -> None:
    TASKS[kind](t)


enqueue_bulk = None


def run_worker() -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    consumer = huey.create_consumer(workers=c.CONCURRENCY, worker_type="thread",
                                    initial_delay=0.001, backoff=1.15, max_delay=0.01,
                                    periodic=False)
    consumer.run()


def results_modes() -> dict[bool, str | None]:
    return {True: "RedisHuey(results=True, store_none=True)", False: "RedisHuey(results=False)"}


def settings(workload: str) -> str:
    return (f"consumer -k thread -w {CONC[workload]}, blocking BRPOP (at-most-once: a crash "
            "loses the running task), max_delay 0.01 s")
