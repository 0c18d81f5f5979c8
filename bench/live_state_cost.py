#!/usr/bin/env python3
"""Dispatch cost of one code tree against another, in instructions per message, for the
worker and (optionally) for Redis: the sitting of issue 19's running index.

    python3 bench/live_state_cost.py --trees /path/to/base,. --sizes 1000,4000 --repeats 3

For each tree, kind (``async def`` and ``def`` no-op tasks, results on) and events
setting (on: the default 100,000; off: 0), a fresh process fills the queue with N
messages and one burst worker (concurrency 100) drains them under
``valgrind --tool=callgrind``; the difference between the two sizes, divided by the
difference in messages, is the worker's cost of one message (as bench/events_cost.py).
Counted instructions do not depend on the machine's speed, but the run's batching does
(how many settlements one write carries, how often the loop polls): on a loaded machine
the same tree varies by a few percent from run to run, so interleave and take medians.

``--delay S`` sets the worker's START_EVENT_DELAY_S (the age at which an attempt is
listed as running, or has its "started" event written on its own) in every tree before
it runs. Under valgrind the worker runs about 50 times slower, so a 0.1 s delay covers
about 2 ms of native work and no-op attempts that wait for the loop get listed; a delay
scaled by the slowdown (``--delay 5``) measures what native no-ops pay. Both are worth
quoting: the first is the worst case (every attempt listed), the second the usual one.

``--redis`` also runs redis-server under callgrind and counts its instructions during
each drain (``callgrind_control --zero`` before, ``--dump`` after): the scripts' side.
``--settle`` counts only the settle script's instructions in Redis, for the same batches
of 100 successes in every tree (no worker, so no timing: deterministic).

Needs redis-server and valgrind on PATH and the project's dependencies.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILL = r"""
import os, sys
from blitzq_django.engine import Client, RedisBroker
n, maxlen = int(sys.argv[1]), int(sys.argv[2])
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="lc", events_maxlen=maxlen))
client.broker.sync.client.flushdb()
task = client.task(name="noop")(lambda i: i)
for start in range(0, n, 1000):
    task.enqueue_many([(i,) for i in range(start, min(n, start + 1000))])
"""

DRAIN = r"""
import asyncio, os, sys
from blitzq_django.engine import Client, RedisBroker, Worker
from blitzq_django.engine.worker import flusher, worker as worker_module
kind, maxlen, n, delay = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if delay:
    flusher.START_EVENT_DELAY_S = worker_module.START_EVENT_DELAY_S = float(delay)
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="lc", events_maxlen=maxlen),
                store_results=True)
if kind == "async":
    async def noop(i):
        return i
else:
    def noop(i):
        return i
client.task(name="noop")(noop)
# How many attempts ran long enough (by the wall clock, under valgrind) to be written
# on their own: listed as running (or, in older trees, their "started" event).
long_attempts = 0
if hasattr(worker_module.outcome, "started"):
    started = worker_module.outcome.started
    def counted(*args, **kwargs):
        global long_attempts
        long_attempts += 1
        return started(*args, **kwargs)
    worker_module.outcome.started = counted
worker = Worker(client, concurrency=100, burst=True, block_timeout=0.05)
stats = asyncio.run(worker.run(close_broker=True))
assert stats.succeeded == n, stats.as_dict()
print("long", long_attempts)
"""

MODES = {"on": 100_000, "off": 0}

SETTLE = r"""
import asyncio, os, sys, time
from blitzq_django.engine import Client, RedisBroker
from blitzq_django.engine.worker import outcome
from blitzq_django.engine.core.message import decode
n, maxlen, step = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="ls", events_maxlen=maxlen))
task = client.task(name="noop")(lambda i: i)
broker = client.broker

async def main():
    if step == "fill":
        broker.sync.client.flushdb()
        for start in range(0, n, 1000):
            task.enqueue_many([(i,) for i in range(start, min(n, start + 1000))])
        return
    await broker.prepare(["default"])
    deliveries = []
    while len(deliveries) < n:
        deliveries += await broker.fetch(["default"], "w", 100, 10)
    policy = outcome.SettleOptions(True, False, "w", events=bool(maxlen))
    now = int(time.time() * 1000)
    settlements = [outcome.succeeded(d, decode(d.payload), task.spec, None, now, now, policy)
                   for d in deliveries]
    print("ready", flush=True)
    sys.stdin.readline()  # the parent zeroes Redis's counters
    for start in range(0, n, 100):
        assert all(await broker.settle("w", settlements[start:start + 100], now))
    await broker.aclose()

asyncio.run(main())
"""


def settle_cost(trees: list[Path], sizes: tuple[int, int], tmp: Path) -> None:
    """The settle script's instructions in Redis per message: batches of 100 successes,
    the same batches for every tree (no timing involved), Redis under callgrind."""
    redis = CallgrindRedis(tmp / "settle.cg")
    try:
        for events in ("on", "off"):
            for tree in trees:
                counted = []
                for n in sizes:
                    env = {**os.environ, "REDIS_URL": redis.url, "PYTHONPATH": str(tree)}
                    command = [sys.executable, "-c", SETTLE, str(n), str(MODES[events])]
                    subprocess.run([*command, "fill"], env=env, cwd=tree, check=True)
                    child = subprocess.Popen([*command, "settle"], env=env, cwd=tree,
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             text=True)
                    assert child.stdout is not None and child.stdin is not None
                    assert child.stdout.readline().strip() == "ready"
                    redis.control("--zero")
                    child.stdin.write("go\n")
                    child.stdin.flush()
                    assert child.wait(600) == 0
                    counted.append(redis.counted())
                per = (counted[1] - counted[0]) / (sizes[1] - sizes[0])
                print(f"settle script, events {events:3} {tree.name:>10}: redis "
                      f"{per / 1000:,.2f} k instructions per message", flush=True)
    finally:
        redis.stop()


def _summary(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {path}")


class CallgrindRedis:
    """redis-server under callgrind, on a free port, without persistence."""

    def __init__(self, out: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.out = out
        self.process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p",
             "redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.2)  # (noqa: sleep) valgrind starts slowly
        raise RuntimeError("redis-server under valgrind did not start")

    def control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.process.pid)], check=True,
                       capture_output=True)

    def counted(self) -> int:
        """Instructions since the last zero: dump, then read the newest dump file."""
        before = set(self.out.parent.glob(f"{self.out.name}.{self.process.pid}*"))
        self.control("--dump")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            new = set(self.out.parent.glob(f"{self.out.name}.{self.process.pid}*")) - before
            if new:
                time.sleep(0.5)  # (noqa: sleep) let valgrind finish writing the dump
                return _summary(max(new, key=lambda p: p.stat().st_mtime))
            time.sleep(0.1)  # (noqa: sleep) waiting for the dump file
        raise RuntimeError("no callgrind dump of redis-server")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def run(tree: Path, url: str, kind: str, maxlen: int, n: int, delay: str, out: Path,
        redis: CallgrindRedis | None) -> tuple[int, int | None, int]:
    """(the worker's instructions, Redis's or None, long attempts) of one drain of n."""
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", FILL, str(n), str(maxlen)], env=env, cwd=tree,
                   check=True)
    if redis is not None:
        redis.control("--zero")
    done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                           sys.executable, "-c", DRAIN, kind, str(maxlen), str(n), delay],
                          env=env, cwd=tree, check=True, capture_output=True, text=True)
    long = int(done.stdout.split("long")[-1].split()[0])
    return _summary(out), (redis.counted() if redis is not None else None), long


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", default=".", help="comma-separated code roots; first = base")
    parser.add_argument("--sizes", default="2000,7000")
    parser.add_argument("--kinds", default="async,def")
    parser.add_argument("--events", default="on,off")
    parser.add_argument("--delay", default="", help="START_EVENT_DELAY_S in every tree")
    parser.add_argument("--redis", action="store_true", help="count Redis's instructions too")
    parser.add_argument("--keep", help="a directory to keep the callgrind files in")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds, the trees interleaved (a different one first each)")
    parser.add_argument("--settle", action="store_true",
                        help="only the settle script's cost in Redis (deterministic)")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    small, large = (int(n) for n in args.sizes.split(","))
    tmp = Path(args.keep or tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)
    if args.settle:
        settle_cost(trees, (small, large), tmp)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    server = None
    if args.redis:
        redis: CallgrindRedis | None = CallgrindRedis(tmp / "redis.cg")
        url = redis.url
    else:
        from bench.run import redis_url_or_private

        redis = None
        url, server = redis_url_or_private()
    per: dict[tuple[str, str, str], list[tuple[float, float | None, int]]] = {}
    try:
        for repeat in range(args.repeats):
            for kind in args.kinds.split(","):
                for events in args.events.split(","):
                    shift = repeat % len(trees)  # a different tree first each round
                    for index, tree in (list(enumerate(trees))[shift:]
                                        + list(enumerate(trees))[:shift]):
                        counts = [run(tree, url, kind, MODES[events], n, args.delay,
                                      tmp / f"{repeat}.{index}.{kind}.{events}.{n}.cg", redis)
                                  for n in (small, large)]
                        worker = (counts[1][0] - counts[0][0]) / (large - small)
                        server_side = None if redis is None else \
                            (counts[1][1] - counts[0][1]) / (large - small)  # type: ignore[operator]
                        long = counts[0][2] + counts[1][2]
                        per.setdefault((kind, events, str(tree)), []).append(
                            (worker, server_side, long))
                        print(f"{repeat + 1} {kind:5} events {events:3} {tree}: worker "
                              f"{worker / 1000:,.1f} k"
                              + ("" if server_side is None else
                                 f", redis {server_side / 1000:,.1f} k")
                              + f" instructions per message ({long} attempts written as "
                              "long)", flush=True)
    finally:
        if redis is not None:
            redis.stop()
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\nmedians (min to max) per message, and the change of the medians against the "
          "first tree:")
    base = str(trees[0])
    for (kind, events, tree), runs in per.items():
        worker_runs = sorted(r[0] for r in runs)
        line = (f"  {kind:5} events {events:3} {Path(tree).name:>10}: worker "
                f"{statistics.median(worker_runs) / 1000:,.1f} k ({worker_runs[0] / 1000:,.1f}"
                f" to {worker_runs[-1] / 1000:,.1f})")
        if tree != base:
            ratio = statistics.median(worker_runs) / statistics.median(
                [r[0] for r in per[(kind, events, base)]]) - 1
            line += f" {ratio:+.1%}"
        servers = sorted(r[1] for r in runs if r[1] is not None)
        if servers:
            line += f"; redis {statistics.median(servers) / 1000:,.1f} k"
            if tree != base:
                base_servers = [r[1] for r in per[(kind, events, base)] if r[1] is not None]
                line += f" {statistics.median(servers) / statistics.median(base_servers) - 1:+.1%}"
        print(line)


if __name__ == "__main__":
    main()
