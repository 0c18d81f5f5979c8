#!/usr/bin/env python3
"""Fast mode against reliable mode: the same work, interleaved.

    python3 bench/fast_mode.py                       # 50,000 tasks, 3 repeats
    python3 bench/fast_mode.py --n 20000 --repeats 5 --rate 50 --seconds 20

For each repeat, reliable and fast run in turn (the order swapped every round), each
in a fresh process on one private redis-server (or REDIS_URL: its DB is FLUSHED):

- dispatch: ``--n`` no-op ``async def`` tasks, results on, are enqueued (enqueue_many),
  then one burst worker (concurrency 100) drains them; the drain is timed inside the
  process (tasks/s). Also: the commands Redis executed per task, enqueue and drain
  together (``total_commands_processed``: a script call counts once, and so does each
  command the script runs), and the CPU time per task of the draining worker process
  and of redis-server (``INFO cpu``) during the drain: less sensitive than tasks/s to
  other load on the machine;
- latency: one worker serves while a producer thread enqueues at ``--rate`` tasks/s
  for ``--seconds``; each task body records the time from its enqueue to its start
  (p50 and p99, ms).

Prints one JSON line per run, then the medians. Needs redis-server on PATH (or
REDIS_URL) and the project's dependencies (.venv).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import asyncio, json, os, statistics, sys, threading, time
from blitzq_django.engine import Client, RedisBroker, Worker

mode, workload = sys.argv[1], sys.argv[2]
n, rate, seconds = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="fm", mode=mode),
                store_results=True)
r = client.broker.sync.client
r.flushdb()
samples = []

async def noop(i):
    return i

async def timed(enqueued):
    samples.append(time.time() - enqueued)

task = client.task(name="noop")(noop)
probe = client.task(name="timed")(timed)

def commands():
    return r.info("stats")["total_commands_processed"]

def redis_cpu():
    info = r.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]

if workload == "dispatch":
    before = commands()
    for start in range(0, n, 10_000):
        task.enqueue_many([(i,) for i in range(start, min(n, start + 10_000))])
    worker = Worker(client, concurrency=100, burst=True, block_timeout=0.05)
    redis_began, cpu_began = redis_cpu(), time.process_time()
    began = time.perf_counter()
    stats = asyncio.run(worker.run(close_broker=True))
    elapsed = time.perf_counter() - began
    worker_cpu, redis_used = time.process_time() - cpu_began, redis_cpu() - redis_began
    assert stats.succeeded == n, stats.as_dict()
    per_task = (commands() - before) / n
    print(json.dumps({"mode": mode, "dispatch": n / elapsed, "commands_per_task": per_task,
                      "worker_cpu_us": worker_cpu / n * 1e6,
                      "redis_cpu_us": redis_used / n * 1e6}))
else:
    total = int(rate * seconds)

    def produce():
        began = time.monotonic()
        for i in range(total):
            due = began + i / rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            probe.enqueue(time.time())

    async def main():
        worker = Worker(client, concurrency=100)
        running = asyncio.create_task(worker.run())
        while worker._loop is None:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # serving: the first fetch blocks on the empty queue
        producer = threading.Thread(target=produce)
        producer.start()
        deadline = time.monotonic() + seconds + 30
        while len(samples) < total and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        producer.join()
        worker.stop()
        await running

    asyncio.run(main())
    assert len(samples) == total, (len(samples), total)
    q = statistics.quantiles([s * 1000 for s in samples], n=100)
    print(json.dumps({"mode": mode, "p50_ms": statistics.median(samples) * 1000,
                      "p99_ms": q[98], "samples": total}))
r.flushdb()
"""

MODES = ("reliable", "fast")


def run(url: str, mode: str, workload: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", CHILD, mode, workload, str(args.n),
                          str(args.rate), str(args.seconds)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise SystemExit(f"{mode} {workload} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=50_000, help="tasks per dispatch run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rate", type=float, default=50.0, help="latency: tasks/s")
    p.add_argument("--seconds", type=float, default=10.0, help="latency: run this long")
    p.add_argument("--json", type=Path, help="also write the runs and medians here")
    args = p.parse_args()

    sys.path.insert(0, str(ROOT / "bench"))
    from run import interleaved  # bench/run.py

    runs = interleaved(MODES, args.repeats,
                       lambda url, mode, workload: run(url, mode, workload, args),
                       stages=("dispatch", "latency"), arm_key="mode", stage_key="workload")

    medians = {m: {k: statistics.median(v) for k, v in runs[m].items()} for m in MODES}
    print("\nmedians of", args.repeats, "repeats:")
    print(f"{'mode':<10}{'dispatch (tasks/s)':>20}{'commands/task':>15}"
          f"{'worker CPU us/task':>20}{'redis CPU us/task':>19}"
          f"{'latency p50 (ms)':>18}{'latency p99 (ms)':>18}")
    for m in MODES:
        x = medians[m]
        print(f"{m:<10}{x['dispatch']:>20,.0f}{x['commands_per_task']:>15.3f}"
              f"{x['worker_cpu_us']:>20.1f}{x['redis_cpu_us']:>19.1f}"
              f"{x['p50_ms']:>18.2f}{x['p99_ms']:>18.2f}")
    fast, reliable = medians["fast"], medians["reliable"]
    print(f"fast / reliable dispatch: {fast['dispatch'] / reliable['dispatch']:.2f}x; "
          f"latency p50 {fast['p50_ms'] - reliable['p50_ms']:+.2f} ms, "
          f"p99 {fast['p99_ms'] - reliable['p99_ms']:+.2f} ms")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "runs": runs, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
