"""blitzq (this project's engine): bare Client + Worker, Redis streams. ``async def`` tasks
here; blitzq_def.py is the same with ``def`` tasks (the worker's thread pool)."""

from __future__ import annotations

import asyncio
import os
from importlib.metadata import version
from typing import Any

from blitzq_django.engine import Client, RedisBroker, Worker

from .. import common as c

VERSION = version("blitzq-django")
ASYNC = False
BULK_NOTE = "task.enqueue_many (1000 per round trip)"
CONC = {"dispatch": 100, "io": 100, "latency": 100}
BODIES = {
    "async": {"noop": c.noop_async, "sleep": c.sleep_async, "lat": c.lat_async},
    "def": {"noop": c.noop_sync, "sleep": c.sleep_sync, "lat": c.lat_sync},
}


RELIABLE = "at-least-once (stream consumer group, ack after run)"


def make(kind: str, broker_kwargs: dict[str, Any] | None = None, note: str = "",
         guarantee: str = RELIABLE) -> dict:
    """The adapter's names for ``kind`` ("async" or "def"), to put in a module's globals."""
    client = Client(RedisBroker(c.URL, namespace="bench", **(broker_kwargs or {})),
                    store_results=c.RESULTS)
    tasks = {k: client.task(name=k, queue=c.QUEUE)(f) for k, f in BODIES[kind].items()}

    def setup() -> None:
        client.broker.ping()

    def enqueue_one(k: str, t: float) -> None:
        tasks[k].enqueue(t)

    def enqueue_bulk(k: str, ts: list[float]) -> None:
        tasks[k].enqueue_many([(t,) for t in ts])

    def run_worker() -> None:
        # threads left at the engine default (0: min(concurrency, cpus * 4 + 4)).
        worker = Worker(client, queues=(c.QUEUE,), concurrency=c.CONCURRENCY, burst=False)
        asyncio.run(worker.run(install_signal_handlers=True))

    def results_modes() -> dict[bool, str | None]:
        return {True: "Client(store_results=True): record SET + PUBLISH in the settle script",
                False: "Client(store_results=False)"}

    def settings(workload: str) -> str:
        pool = min(CONC[workload], (os.cpu_count() or 1) * 4 + 4)
        what = ("async def tasks, one event loop" if kind == "async" else
                "def tasks on the worker's thread pool (default size: min(concurrency, "
                f"cpus × 4 + 4) = {pool} here)")
        return f"Worker(concurrency={CONC[workload]}), {what}{note}; {guarantee}"

    return {"KIND": kind, "client": client, "TASKS": tasks, "setup": setup,
            "enqueue_one": enqueue_one, "enqueue_bulk": enqueue_bulk, "run_worker": run_worker,
            "results_modes": results_modes, "settings": settings}


globals().update(make("async"))
