#!/usr/bin/env python3
"""What a live dashboard costs the workers: the same work with and without aggregators
following the queue (blitzq_django/web/live/aggregator.py, as the dashboard's socket runs it).

    python3 bench/dashboard_cost.py --n 30000 --rate 2000 --seconds 15 --repeats 5

Each repeat runs both modes (the order swapped each round), in fresh processes on one
private Redis (or REDIS_URL, flushed), events with details on (the Django default while
task history is on). "With" means ``--dashboards`` processes (default 1: one per server
process, whatever the number of open pages), each running one Aggregator with one
subscriber that JSON-encodes every message it gets, as the consumer does.

- drain: ``--n`` no-op ``def`` tasks are enqueued, then one burst worker (concurrency
  100) drains them as fast as it can; the rate is timed inside the worker's process. The
  worst case: the aggregators read about 3 events per task at full speed.
- steady: a producer enqueues ``--rate`` tasks per second for ``--seconds`` (paced in
  chunks of 1/20 s) to a running worker; measured: the worker's CPU time per task
  (``time.process_time()`` in its process) and Redis's (``INFO cpu``), and whether the
  worker kept up (completion lag at the end).

Each aggregator process reports its ticks, its slowest tick and the bytes it sent per
subscriber per second. Prints one line per run, then medians and the cost (with / without
- 1 for CPU per task; without / with - 1 for the drain rate).

Needs redis-server on PATH (or REDIS_URL) and the project's dependencies (.venv).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SETUP = r"""
import asyncio, json, os, signal, sys, time
from blitzq_django.engine import Client, RedisBroker, Worker
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="dash", event_details=True),
                store_results=True)
def noop(i):
    return i
task = client.task(name="noop")(noop)
r = client.broker.sync.client
"""

DASHBOARD = SETUP + r"""
from blitzq_django.web.live.aggregator import Aggregator
async def main():
    agg = Aggregator(client, lambda extra: ["default", *extra], linger_s=3600)
    inbox = agg.subscribe()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    sent = messages = 0
    slowest = 0.0
    began = time.perf_counter()
    print("ready", flush=True)
    async def pump():
        nonlocal sent, messages
        while True:
            message = await inbox.get()
            sent += len(json.dumps(message, separators=(",", ":")))
            messages += 1
    pumping = asyncio.create_task(pump())
    # time each tick: wrap the tally's delta (called once per tick, after the reads)
    original = agg.read_events
    async def timed():
        nonlocal slowest
        t = time.perf_counter()
        await original()
        slowest = max(slowest, time.perf_counter() - t)
    agg.read_events = timed
    await stop.wait()
    elapsed = time.perf_counter() - began
    pumping.cancel()
    await agg.close()
    print(json.dumps({"ticks": agg.ticks, "slowest_read_ms": slowest * 1000,
                      "bytes_per_s": sent / elapsed, "messages_per_s": messages / elapsed,
                      "events": sum(agg.tally.totals.values()), "skips": agg.tally.skipped,
                      "cpu_s": time.process_time()}), flush=True)
asyncio.run(main())
"""

DRAIN = SETUP + r"""
n = int(sys.argv[1])
worker = Worker(client, concurrency=100, burst=True, block_timeout=0.05)
began = time.perf_counter()
stats = asyncio.run(worker.run(close_broker=True))
rate = n / (time.perf_counter() - began)
assert stats.succeeded == n, stats.as_dict()
print(json.dumps({"drain": rate}))
"""

FILL = SETUP + r"""
n = int(sys.argv[1])
for start in range(0, n, 1000):
    task.enqueue_many([(i,) for i in range(start, min(n, start + 1000))])
"""

STEADY_WORKER = SETUP + r"""
async def main():
    worker = Worker(client, concurrency=100, block_timeout=0.05)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    print("ready", flush=True)
    cpu = time.process_time()
    stats = await worker.run(close_broker=True)
    print(json.dumps({"succeeded": stats.succeeded, "cpu_s": time.process_time() - cpu}))
asyncio.run(main())
"""

PRODUCE = SETUP + r"""
rate, seconds = int(sys.argv[1]), float(sys.argv[2])
step = 0.05
chunk = max(1, round(rate * step))
began = time.perf_counter()
sent = 0
while time.perf_counter() - began < seconds:
    task.enqueue_many([(i,) for i in range(sent, sent + chunk)])
    sent += chunk
    pause = began + sent / rate - time.perf_counter()
    if pause > 0:
        time.sleep(pause)
print(json.dumps({"sent": sent, "offered_per_s": sent / (time.perf_counter() - began)}))
"""


def child(code: str, *args: object, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)


def last_json(process: subprocess.Popen[str], timeout: float = 120) -> dict[str, float]:
    out, _ = process.communicate(timeout=timeout)
    if process.returncode:
        raise RuntimeError(f"a child failed with {process.returncode}: {out[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def start_dashboards(k: int, env: dict[str, str]) -> list[subprocess.Popen[str]]:
    procs = [child(DASHBOARD, env=env) for _ in range(k)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return procs


def stop_dashboards(procs: list[subprocess.Popen[str]]) -> list[dict[str, float]]:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    return [last_json(p) for p in procs]


def redis_cpu(r: object) -> float:
    info = r.info("cpu")  # type: ignore[attr-defined]
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def drain_run(n: int, dashboards: int, env: dict[str, str], r: object) -> dict[str, float]:
    r.flushdb()  # type: ignore[attr-defined]
    procs = start_dashboards(dashboards, env)
    child(FILL, n, env=env).communicate(timeout=120)
    result = last_json(child(DRAIN, n, env=env))
    reports = stop_dashboards(procs)
    return {**result, **_dashboard_summary(reports)}


def steady_run(rate: int, seconds: float, dashboards: int, env: dict[str, str],
               r: object) -> dict[str, float]:
    from blitzq_django.engine import Client, RedisBroker

    client = Client(RedisBroker(env["REDIS_URL"], namespace="dash"))
    r.flushdb()  # type: ignore[attr-defined]
    procs = start_dashboards(dashboards, env)
    worker = child(STEADY_WORKER, env=env)
    assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    cpu0 = redis_cpu(r)
    produced = last_json(child(PRODUCE, rate, seconds, env=env))
    ended = time.monotonic()
    deadline = ended + 30
    while time.monotonic() < deadline:  # until the worker has caught up
        stats = client.queue_stats("default")
        if stats.ready == 0 and stats.in_flight == 0:
            break
        time.sleep(0.02)  # (noqa: sleep) polling for the end of the backlog
    lag_s = time.monotonic() - ended
    worker.send_signal(signal.SIGTERM)
    done = last_json(worker)
    cpu1 = redis_cpu(r)
    reports = stop_dashboards(procs)
    client.broker.close()  # type: ignore[attr-defined]
    n = done["succeeded"]
    return {"offered_per_s": produced["offered_per_s"], "succeeded": n,
            "worker_us_per_task": done["cpu_s"] / max(n, 1) * 1e6,
            "redis_us_per_task": (cpu1 - cpu0) / max(n, 1) * 1e6, "catch_up_s": lag_s,
            **_dashboard_summary(reports)}


def _dashboard_summary(reports: list[dict[str, float]]) -> dict[str, float]:
    if not reports:
        return {}
    return {"dash_slowest_read_ms": max(x["slowest_read_ms"] for x in reports),
            "dash_bytes_per_s": statistics.mean(x["bytes_per_s"] for x in reports),
            "dash_messages_per_s": statistics.mean(x["messages_per_s"] for x in reports),
            "dash_cpu_s": statistics.mean(x["cpu_s"] for x in reports),
            "dash_events": statistics.mean(x["events"] for x in reports),
            "dash_skips": sum(x["skips"] for x in reports)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30_000, help="tasks per drain")
    parser.add_argument("--rate", type=int, default=2000, help="steady: tasks per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="steady: how long")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dashboards", type=int, default=1,
                        help="aggregator processes in the 'with' mode")
    parser.add_argument("--only", choices=["drain", "steady"], default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import redis

    from bench.run import redis_url_or_private

    url, server = redis_url_or_private()
    r = redis.Redis.from_url(url)
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for repeat in range(args.repeats):
            modes = [("without", 0), ("with", args.dashboards)]
            if repeat % 2:
                modes.reverse()
            for what in ("drain", "steady"):
                if args.only and what != args.only:
                    continue
                for mode, k in modes:
                    if what == "drain":
                        result = drain_run(args.n, k, env, r)
                    else:
                        result = steady_run(args.rate, args.seconds, k, env, r)
                    runs.setdefault((what, mode), []).append(result)
                    print(f"repeat {repeat + 1} {what:6} {mode:7}: " + "  ".join(
                        f"{key} {value:,.1f}" for key, value in result.items()), flush=True)
    finally:
        r.close()
        if server is not None:
            server.stop()

    def median(what: str, mode: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[(what, mode)])

    print(f"\nmedians over {args.repeats} repeats, {args.dashboards} dashboard process(es):")
    if ("drain", "with") in runs:
        off, on = median("drain", "without", "drain"), median("drain", "with", "drain")
        print(f"  drain (tasks/s)        without {off:>9,.0f}  with {on:>9,.0f}  "
              f"cost {off / on - 1:+.1%}")
    if ("steady", "with") in runs:
        for key in ("worker_us_per_task", "redis_us_per_task"):
            off, on = median("steady", "without", key), median("steady", "with", key)
            print(f"  steady {key:20} without {off:>8,.2f}  with {on:>8,.2f}  "
                  f"cost {on / off - 1:+.1%}")
        off, on = median("steady", "without", "catch_up_s"), median("steady", "with",
                                                                     "catch_up_s")
        print(f"  steady catch_up_s           without {off:>8,.2f}  with {on:>8,.2f}")
        for key in ("dash_slowest_read_ms", "dash_bytes_per_s", "dash_messages_per_s",
                    "dash_cpu_s"):
            print(f"  steady {key:20} {median('steady', 'with', key):,.2f}")


if __name__ == "__main__":
    main()
