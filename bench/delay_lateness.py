#!/usr/bin/env python3
"""How late delayed tasks start: due-time lateness at a steady rate of delayed enqueues.

    python3 bench/delay_lateness.py --rate 100 --seconds 20

A producer enqueues ``--rate`` delayed tasks a second for ``--seconds`` seconds, each with
a delay drawn uniformly from ``--min-delay`` to ``--max-delay`` seconds. One worker
(default options: it promotes, ``schedule_poll_interval`` 0.5 s) runs them in a process of
its own; each task returns how late its body started, ``now - due`` in ms (one clock: both
processes run on this machine). Prints p50, p90, p99 and max, for the promoter woken by
enqueue.lua's publish of a new earliest delayed message (``wake``) and, for comparison,
with that listener turned off (``poll``: the promoter sleeps until the earliest due time
it knew of, at most 0.5 s), one after the other on one private Redis (or REDIS_URL, whose
DB is flushed).

Needs redis-server on PATH (or REDIS_URL) and the project's dependencies (.venv).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers import start_redis  # noqa: E402

WORKER = r"""
import asyncio, os, sys
from blitzq_django.engine import Client, RedisBroker, Worker
import bench.delay_lateness as bench

if sys.argv[1] == "poll":  # the comparison: no wake-up listener, polling only
    from blitzq_django.engine.scheduler import promoting

    async def no_listener(*args):
        return None

    promoting.listen_wakeups = no_listener
client = bench.make_client(os.environ["REDIS_URL"])
worker = Worker(client, concurrency=200)
asyncio.run(worker.run(install_signal_handlers=True, close_broker=True))
"""


def make_client(url: str):  # type: ignore[no-untyped-def]
    import time as clock

    from blitzq_django.engine import Client, RedisBroker

    client = Client(RedisBroker(url, namespace="lateness"), store_results=True)

    @client.task(name="bench.late")
    async def late(due_ms: int) -> float:
        return clock.time() * 1000 - due_ms

    return client




def run(url: str, mode: str, rate: float, seconds: float, low: float, high: float
        ) -> list[float]:
    from blitzq_django.engine import CallOptions

    client = make_client(url)
    client.broker.sync.client.flushdb()  # type: ignore[attr-defined]
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen([sys.executable, "-c", WORKER, mode], env=env, cwd=ROOT)
    try:
        spec = client.registry.find("bench.late")
        assert spec is not None
        # The worker is up once this one ran; then a moment for its promoter to subscribe.
        client.enqueue(spec, (int(time.time() * 1000),), {}).result(timeout=60)
        time.sleep(0.5)
        handles = []
        rng = random.Random(7)
        began = time.monotonic()
        n = int(rate * seconds)
        for i in range(n):
            pause = began + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            delay = rng.uniform(low, high)
            due = int(time.time() * 1000) + int(delay * 1000)
            handles.append(client.enqueue(spec, (due,), {}, CallOptions(delay=delay)))
        return [h.result(timeout=high + 30) for h in handles]
    finally:
        worker.terminate()
        worker.wait(30)
        client.broker.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="delayed tasks a second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--min-delay", type=float, default=0.05)
    parser.add_argument("--max-delay", type=float, default=2.0)
    parser.add_argument("--modes", default="wake,poll")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    url, redis_proc = start_redis()
    out = {}
    try:
        for mode in args.modes.split(","):
            late = run(url, mode, args.rate, args.seconds, args.min_delay, args.max_delay)
            out[mode] = {"n": len(late), "p50": percentile(late, 50),
                         "p90": percentile(late, 90), "p99": percentile(late, 99),
                         "max": max(late), "mean": statistics.fmean(late)}
            row = out[mode]
            print(f"{mode:5} n={row['n']} p50={row['p50']:.1f}ms p90={row['p90']:.1f}ms "
                  f"p99={row['p99']:.1f}ms max={row['max']:.1f}ms", flush=True)
    finally:
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(10)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
