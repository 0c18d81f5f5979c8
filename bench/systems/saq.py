"""SAQ on Redis: asyncio worker, jobs kept as Redis keys for `ttl` seconds."""

from __future__ import annotations

import asyncio
from importlib.metadata import version

from saq import Queue, Worker

from .. import common as c

VERSION = version("saq")
ASYNC = True
KIND = "async"
BULK_NOTE = "none (Queue.map enqueues and then waits for every result)"
CONC = {"dispatch": 100, "io": 100, "latency": 100}
TTL = 600 if c.RESULTS else -1  # -1: job info not kept after it finishes


async def noop(ctx: dict, t: float = 0.0) -> None:
    c.tick()


async def sleep(ctx: dict, t: float = 0.0) -> None:
    await asyncio.sleep(c.SLEEP_S)
    c.tick()


async def lat(ctx: dict, t: float = 0.0) -> None:
    c.started(t)
    c.tick()


queue = Queue.from_url(c.URL, name=c.QUEUE)


async def setup() -> None:
    await queue.connect()


async def enqueue_one(kind: str, t: float) -> None:
    await queue.enqueue(kind, t=t, ttl=TTL)


enqueue_bulk = None


def run_worker() -> None:
    async def main() -> None:
        await queue.connect()
        try:
            await Worker(queue, functions=[noop, sleep, lat], concurrency=c.CONCURRENCY).start()
        finally:
            await queue.disconnect()

    asyncio.run(main())


def results_modes() -> dict[bool, str | None]:
    return {True: "job ttl=600 (job and result kept)", False: "job ttl=-1 (not kept)"}


def settings(workload: str) -> str:
    return f"Worker(concurrency={CONC[workload]}), async def tasks"
