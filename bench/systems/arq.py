"""arq: asyncio, jobs in a sorted set that the worker polls (poll_delay default 0.5 s)."""

from __future__ import annotations

import asyncio
from importlib.metadata import version

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker

from .. import common as c

VERSION = version("arq")
ASYNC = True
KIND = "async"
BULK_NOTE = "none (enqueue_job only)"
CONC = {"dispatch": 100, "io": 100, "latency": 100}
SETTINGS = RedisSettings.from_dsn(c.URL)


async def noop(ctx: dict, t: float = 0.0) -> None:
    c.tick()


async def sleep(ctx: dict, t: float = 0.0) -> None:
    await asyncio.sleep(c.SLEEP_S)
    c.tick()


async def lat(ctx: dict, t: float = 0.0) -> None:
    c.started(t)
    c.tick()


pool = None


async def setup() -> None:
    global pool
    pool = await create_pool(SETTINGS, default_queue_name=c.QUEUE)


async def enqueue_one(kind: str, t: float) -> None:
    await pool.enqueue_job(kind, t)


enqueue_bulk = None


def run_worker() -> None:
    worker = Worker(functions=[noop, sleep, lat], redis_settings=SETTINGS, queue_name=c.QUEUE,
                    max_jobs=c.CONCURRENCY, keep_result=600 if c.RESULTS else 0,
                    handle_signals=True, log_results=False)
    worker.run()


def results_modes() -> dict[bool, str | None]:
    return {True: "keep_result=600", False: "keep_result=0"}


def settings(workload: str) -> str:
    return (f"max_jobs={CONC[workload]}, default poll_delay 0.5 s (arq has no blocking fetch), "
            "async def tasks")
