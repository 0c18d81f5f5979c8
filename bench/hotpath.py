#!/usr/bin/env python3
"""The worker's hot path, one code tree against another, interleaved on one Redis.

    python3 bench/hotpath.py --trees /path/to/old,. --n 50000 --repeats 5

For each repeat and each kind (``async def`` and ``def`` no-op tasks, results on),
every tree in turn (a different one first each round) fills a queue with ``--n``
messages and drains it with one burst worker (concurrency 100) in a fresh process
importing that tree; the drain rate is timed inside the process. Prints one line
per run, then the medians and each tree's ratio to the first. Needs redis-server
on PATH (or REDIS_URL) and the project's dependencies (``.venv``).
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
import asyncio, json, os, sys, time
from blitzq_django.engine import Client, RedisBroker, Worker

kind, n = sys.argv[1], int(sys.argv[2])
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="hot"), store_results=True)
if kind == "async":
    async def noop(i):
        return i
else:
    def noop(i):
        return i
task = client.task(name="noop")(noop)
for start in range(0, n, 10_000):
    task.enqueue_many([(i,) for i in range(start, min(n, start + 10_000))])
worker = Worker(client, concurrency=100, burst=True, block_timeout=0.05)
began = time.perf_counter()
stats = asyncio.run(worker.run(close_broker=True))
seconds = time.perf_counter() - began
assert stats.succeeded == n, stats.as_dict()
client.broker.sync.client.flushdb()
print(json.dumps({"ops": n / seconds}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", default=".", help="comma-separated code roots; first = base")
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kinds", default="async,def")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.run import RedisServer

    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        server = RedisServer()
        url = server.start()
    runs: dict[tuple[str, str], list[float]] = {}
    try:
        for repeat in range(args.repeats):
            for kind in args.kinds.split(","):
                # A different tree goes first each round: no tree always runs on a fresh
                # (or a tired) machine.
                shift = repeat % len(trees)
                for tree in trees[shift:] + trees[:shift]:
                    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": tree}
                    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(args.n)],
                                         env=env, cwd=tree, capture_output=True, text=True,
                                         check=True)
                    ops = json.loads(out.stdout.strip().splitlines()[-1])["ops"]
                    runs.setdefault((kind, tree), []).append(ops)
                    print(f"repeat {repeat + 1} {kind:5} {tree}: {ops:,.0f}/s", flush=True)
    finally:
        if server is not None:
            server.stop()
    print("\nmedians (tasks/s; ratio to the first tree):")
    for kind in args.kinds.split(","):
        base = statistics.median(runs[(kind, trees[0])])
        for tree in trees:
            median = statistics.median(runs[(kind, tree)])
            print(f"  {kind:5} {median:>9,.0f}  x{median / base:.3f}  {tree}")


if __name__ == "__main__":
    main()
