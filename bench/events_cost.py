#!/usr/bin/env python3
"""What the events stream costs: the same work with events on and off, interleaved.

    python3 bench/events_cost.py --n 50000 --repeats 7

For each repeat and each kind (``async def`` and ``def`` no-op tasks, results on),
events on (``events_maxlen`` 100,000) and off (0) run in turn, the order swapped
every round, each in a fresh process on one private Redis (or REDIS_URL, flushed):

- dispatch: ``--n`` messages are enqueued, then one burst worker (concurrency 100)
  drains them; the drain rate is timed inside the process (as bench/hotpath.py);
- enqueue_many: the same ``--n`` messages in chunks of 1,000 (timed in the process);
- enqueue: ``--single`` single enqueues, one round trip each.

Prints one line per run, then the medians and the cost of events (off / on - 1).

    python3 bench/events_cost.py --callgrind --sizes 2000,7000

counts instead the instructions of the worker process per message (Python, redis-py,
msgpack; not Redis) with ``valgrind --tool=callgrind``: each kind and mode drains both
sizes (filled by another process), and the difference is divided by the difference in
tasks. Deterministic up to the batching of the run (a few tenths of a percent).

Needs redis-server on PATH (or REDIS_URL) and the project's dependencies (.venv).
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

kind, n, single, maxlen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="ev", events_maxlen=maxlen),
                store_results=True)
if kind == "async":
    async def noop(i):
        return i
else:
    def noop(i):
        return i
task = client.task(name="noop")(noop)
task.enqueue(-1)  # connects, loads the script
r = client.broker.sync.client
r.flushdb()
began = time.perf_counter()
for start in range(0, n, 10_000):
    task.enqueue_many([(i,) for i in range(start, min(n, start + 10_000))])
bulk = n / (time.perf_counter() - began)
worker = Worker(client, concurrency=100, burst=True, block_timeout=0.05)
began = time.perf_counter()
stats = asyncio.run(worker.run(close_broker=True))
drain = n / (time.perf_counter() - began)
assert stats.succeeded == n, stats.as_dict()
events = r.xlen(client.broker.keys.queue("default").events)
assert (events > 0) if maxlen else (events == 0), events
r.flushdb()
began = time.perf_counter()
for i in range(single):
    task.enqueue(i)
one = single / (time.perf_counter() - began)
r.flushdb()
print(json.dumps({"dispatch": drain, "enqueue_many": bulk, "enqueue": one}))
"""

MODES = {"on": 100_000, "off": 0}

FILL = r"""
import os, sys
from blitzq_django.engine import Client, RedisBroker
n, maxlen = int(sys.argv[1]), int(sys.argv[2])
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="ev", events_maxlen=maxlen))
client.broker.sync.client.flushdb()
task = client.task(name="noop")(lambda i: i)
for start in range(0, n, 1000):
    task.enqueue_many([(i,) for i in range(start, min(n, start + 1000))])
"""

DRAIN = r"""
import asyncio, os, sys
from blitzq_django.engine import Client, RedisBroker, Worker
kind, maxlen, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="ev", events_maxlen=maxlen),
                store_results=True)
if kind == "async":
    async def noop(i):
        return i
else:
    def noop(i):
        return i
client.task(name="noop")(noop)
worker = Worker(client, concurrency=100, burst=True, block_timeout=0.05)
stats = asyncio.run(worker.run(close_broker=True))
assert stats.succeeded == n, stats.as_dict()
"""


def instructions(url: str, kind: str, maxlen: int, n: int, out: Path) -> int:
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", FILL, str(n), str(maxlen)], env=env, cwd=ROOT,
                   check=True)
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    sys.executable, "-c", DRAIN, kind, str(maxlen), str(n)], env=env, cwd=ROOT,
                   check=True, capture_output=True)
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {out}")


def callgrind(url: str, kinds: list[str], sizes: list[int]) -> None:
    import tempfile

    small, large = sizes
    with tempfile.TemporaryDirectory() as tmp:
        per: dict[tuple[str, str], float] = {}
        for kind in kinds:
            for mode, maxlen in MODES.items():
                counts = [instructions(url, kind, maxlen, n, Path(tmp) / f"{kind}.{mode}.{n}")
                          for n in (small, large)]
                per[(kind, mode)] = (counts[1] - counts[0]) / (large - small)
                print(f"{kind:5} events {mode:3}: {per[(kind, mode)] / 1000:,.1f} k "
                      "instructions per message", flush=True)
        for kind in kinds:
            on, off = per[(kind, "on")], per[(kind, "off")]
            print(f"  {kind:5} off {off / 1000:,.1f} k  on {on / 1000:,.1f} k  "
                  f"cost {on / off - 1:+.1%}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--single", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--kinds", default="async,def")
    parser.add_argument("--callgrind", action="store_true",
                        help="count the worker's instructions per message instead")
    parser.add_argument("--sizes", default="2000,7000", help="the two drains of --callgrind")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.run import redis_url_or_private

    url, server = redis_url_or_private()
    if args.callgrind:
        try:
            callgrind(url, args.kinds.split(","), [int(n) for n in args.sizes.split(",")])
        finally:
            if server is not None:
                server.stop()
        return
    runs: dict[tuple[str, str, str], list[float]] = {}
    try:
        for repeat in range(args.repeats):
            for kind in args.kinds.split(","):
                order = list(MODES) if repeat % 2 == 0 else list(reversed(MODES))
                for mode in order:
                    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
                    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(args.n),
                                          str(args.single), str(MODES[mode])],
                                         env=env, cwd=ROOT, capture_output=True, text=True,
                                         check=True)
                    rates = json.loads(out.stdout.strip().splitlines()[-1])
                    for what, rate in rates.items():
                        runs.setdefault((kind, what, mode), []).append(rate)
                    print(f"repeat {repeat + 1} {kind:5} events {mode:3}: "
                          + "  ".join(f"{w} {r:,.0f}/s" for w, r in rates.items()), flush=True)
    finally:
        if server is not None:
            server.stop()
    print("\nmedians (per second) and the cost of events (off / on - 1):")
    for kind in args.kinds.split(","):
        for what in ("dispatch", "enqueue_many", "enqueue"):
            on = statistics.median(runs[(kind, what, "on")])
            off = statistics.median(runs[(kind, what, "off")])
            print(f"  {kind:5} {what:12} off {off:>9,.0f}  on {on:>9,.0f}  "
                  f"cost {off / on - 1:+.1%}")


if __name__ == "__main__":
    main()
