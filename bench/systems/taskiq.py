"""taskiq with taskiq-redis RedisStreamBroker (consumer group, ack after the result is saved)."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version

from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

from .. import common as c

VERSION = f"{version('taskiq')} (taskiq-redis {version('taskiq-redis')})"
ASYNC = True
KIND = "async"
BULK_NOTE = "none (kiq() sends one message)"
CONC = {"dispatch": 100, "io": 100, "latency": 100}

# consumer_id="0": the group reads messages enqueued before the worker started.
broker = RedisStreamBroker(c.URL, queue_name=c.QUEUE, consumer_id="0")
if c.RESULTS:
    broker = broker.with_result_backend(RedisAsyncResultBackend(c.URL, result_ex_time=600))
TASKS = {
    "noop": broker.task(task_name="noop")(c.noop_async),
    "sleep": broker.task(task_name="sleep")(c.sleep_async),
    "lat": broker.task(task_name="lat")(c.lat_async),
}


async def setup() -> None:
    await broker.startup()


async def enqueue_one(kind: str, t: float) -> None:
    await TASKS[kind].kiq(t)


enqueue_bulk = None


def run_worker() -> None:
    os.execv(sys.executable, [sys.executable, "-m", "taskiq", "worker",
                              "bench.systems.taskiq:broker", "--workers", "1",
                              "--max-async-tasks", str(c.CONCURRENCY), "--ack-type", "when_saved",
                              "--log-level", "WARNING", "--no-configure-logging"])


def results_modes() -> dict[bool, str | None]:
    return {True: "RedisAsyncResultBackend(result_ex_time=600)", False: "no result backend"}


def settings(workload: str) -> str:
    return (f"taskiq worker --workers 1 --max-async-tasks {CONC[workload]} --ack-type when_saved, "
            "async def tasks")
