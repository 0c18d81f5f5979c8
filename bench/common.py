"""Shared by every adapter and worker process: settings from the environment and the
accounting side channel (completion counter and latency samples).

Tasks count completions in a process-local counter that a daemon thread flushes to a
SEPARATE accounting Redis DB every few milliseconds (one INCRBY per flush, not per task),
so the accounting costs every system the same and next to nothing.
"""

from __future__ import annotations

import os
import threading
import time

import redis

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
ACCT_URL = os.environ.get("BENCH_ACCT", "redis://127.0.0.1:6379/15")
RESULTS = os.environ.get("BENCH_RESULTS", "0") == "1"
CONCURRENCY = int(os.environ.get("BENCH_CONC", "100"))
WORKLOAD = os.environ.get("BENCH_WORKLOAD", "dispatch")  # dispatch | io | latency
QUEUE = "bench"
COUNT_KEY = "bench:done"
LAT_KEY = "bench:lat"
FLUSH_S = 0.003
SLEEP_S = 0.010

_lock = threading.Lock()
_pid = -1
_count = 0
_lat: list[float] = []


def _ensure() -> None:
    global _pid, _lock, _count, _lat
    if _pid == os.getpid():
        return
    # First use in this process (or in a forked child): fresh state and flusher.
    _lock = threading.Lock()
    _count, _lat, _pid = 0, [], os.getpid()
    threading.Thread(target=_flush_forever, name="bench-acct", daemon=True).start()


def _flush_forever() -> None:
    global _count, _lat
    r = redis.Redis.from_url(ACCT_URL)
    while True:
        time.sleep(FLUSH_S)
        with _lock:
            n, lat = _count, _lat
            _count, _lat = 0, []
        if n or lat:
            pipe = r.pipeline(transaction=False)
            if lat:
                pipe.rpush(LAT_KEY, *lat)
            if n:
                pipe.incrby(COUNT_KEY, n)
            pipe.execute()


def tick() -> None:
    """One task finished (the whole body of a no-op task)."""
    global _count
    _ensure()
    with _lock:
        _count += 1


def started(enqueued_at: float) -> None:
    """A latency task started: record start - enqueue (seconds)."""
    delay = time.time() - enqueued_at
    _ensure()
    with _lock:
        _lat.append(delay)


def note(name: str, value: object) -> None:
    """A one-off figure for the harness (e.g. modules imported): SET bench:note:NAME now."""
    redis.Redis.from_url(ACCT_URL).set(f"bench:note:{name}", str(value))


def noop_sync(t: float = 0.0) -> None:
    tick()


def sleep_sync(t: float = 0.0) -> None:
    time.sleep(SLEEP_S)
    tick()


def lat_sync(t: float = 0.0) -> None:
    started(t)
    tick()


async def noop_async(t: float = 0.0) -> None:
    tick()


async def sleep_async(t: float = 0.0) -> None:
    import asyncio

    await asyncio.sleep(SLEEP_S)
    tick()


async def lat_async(t: float = 0.0) -> None:
    started(t)
    tick()
