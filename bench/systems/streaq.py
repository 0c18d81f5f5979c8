"""streaQ: asyncio worker on Redis streams (coredis), results kept for `ttl`."""

from __future__ import annotations

import asyncio
from importlib.metadata import version

from streaq import Worker

from .. import common as c

VERSION = version("streaq")
ASYNC = True
KIND = "async"
BULK_NOTE = "worker.enqueue_many (one pipeline)"
CONC = {"dispatch": 100, "io": 100, "latency": 100}
TTL = 600 if c.RESULTS else 0  # 0: no result stored

worker = Worker(redis_url=c.URL, queue_name=c.QUEUE, concurrency=c.CONCURRENCY,
                handle_signals=True)


@worker.task(ttl=TTL, name="noop")
async def noop(t: float = 0.0) -> None:
    c.tick()


@worker.task(ttl=TTL, name="sleep")
async def sleep(t: float = 0.0) -> None:
    await asyncio.sleep(c.SLEEP_S)
    c.tick()


@worker.task(ttl=TTL, name="lat")
async def lat(t: float = 0.0) -> None:
    c.started(t)
    c.tick()


TASKS = {"noop": noop, "sleep": sleep, "lat": lat}


async def setup() -> None:
    await worker.__aenter__()


async def enqueue_one(kind: str, t: float) -> None:
    await TASKS[kind].enqueue(t)


async def enqueue_bulk(kind: str, ts: list[float]) -> None:
    task = TASKS[kind]
    await worker.enqueue_many([task.enqueue(t) for t in ts])


def run_worker() -> None:
    worker.run_sync()


def results_modes() -> dict[bool, str | None]:
    return {True: "task ttl=600", False: "task ttl=0 (no result stored)"}


def settings(workload: str) -> str:
    return f"Worker(concurrency={CONC[workload]}), async def tasks"
