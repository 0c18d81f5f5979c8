"""blitzq (this project's engine): async tasks on the worker's event loop, Redis streams."""

from __future__ import annotations

import asyncio
from importlib.metadata import version

from blitzq_django.engine import Client, RedisBroker, Worker

from .. import common as c

VERSION = version("blitzq-django")
ASYNC = False
BULK_NOTE = "task.enqueue_many (1000 per round trip)"
CONC = {"dispatch": 100, "io": 100, "latency": 100}

client = Client(RedisBroker(c.URL, namespace="bench"), store_results=c.RESULTS)
TASKS = {
    "noop": client.task(name="noop", queue=c.QUEUE)(c.noop_async),
    "sleep": client.task(name="sleep", queue=c.QUEUE)(c.sleep_async),
    "lat": client.task(name="lat", queue=c.QUEUE)(c.lat_async),
}


def setup() -> None:
    client.broker.ping()


def enqueue_one(kind: str, t: float) -> None:
    TASKS[kind].enqueue(t)


def enqueue_bulk(kind: str, ts: list[float]) -> None:
    TASKS[kind].enqueue_many([(t,) for t in ts])


def run_worker() -> None:
    worker = Worker(client, queues=(c.QUEUE,), concurrency=c.CONCURRENCY, burst=False)
    asyncio.run(worker.run(install_signal_handlers=True))


def results_modes() -> dict[bool, str | None]:
    return {True: "Client(store_results=True): record SET + PUBLISH in the settle script",
            False: "Client(store_results=False)"}


def settings(workload: str) -> str:
    return (f"Worker(concurrency={CONC[workload]}), async def tasks, one event loop; "
            "at-least-once (stream consumer group, ack after run)")
