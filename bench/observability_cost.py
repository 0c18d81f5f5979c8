#!/usr/bin/env python3
"""What the observability hooks cost on the hot paths, in instructions (callgrind).

    python3 bench/observability_cost.py --trees /tmp/base,. --sizes 2000,7000

For each code tree, each kind (``async def`` and ``def`` no-op tasks, results on) and
each arm, ``valgrind --tool=callgrind`` counts the instructions of one worker process
(Python, redis-py, msgpack; not Redis) draining two queue sizes (filled by another
process); the difference divided by the difference in tasks is the cost of one message.
The arms:

- ``off``: the default: success lines off (``blitzq.task.succeeded`` at WARNING), no
  tracing;
- ``succeeded``: success lines on, each formatted and written to /dev/null by a
  StreamHandler (what a project turning them on pays);
- ``traced``: OpenTelemetry on (engine/tracing.py) with the SDK's TracerProvider and a
  processor that drops the spans (the cost of making them, not of exporting them).
  Only in trees that have it.

``--enqueue`` counts instead the instructions of the producer per single ``enqueue``
(one round trip each), tracing off and on. ``--micro`` counts only the code a success
runs in ``_conclude_now`` (the two tests, and the line when it is on: arms ``off``,
``on``; ``call`` asks the logger at each success instead) in a loop, free of the batching
noise a whole drain has on a loaded machine.

Needs redis-server on PATH (or REDIS_URL), valgrind, and the project's dependencies.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FILL = r"""
import os, sys
from blitzq_django.engine import Client, RedisBroker
n = int(sys.argv[1])
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="obs"))
client.broker.sync.client.flushdb()
task = client.task(name="noop")(lambda i: i)
for start in range(0, n, 1000):
    task.enqueue_many([(i,) for i in range(start, min(n, start + 1000))])
"""

SETUP = r"""
import logging, os, sys
arm = sys.argv[2]
if arm == "succeeded":
    handler = logging.StreamHandler(open(os.devnull, "w"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("blitzq").addHandler(handler)
    logging.getLogger("blitzq.task.succeeded").setLevel(logging.INFO)
from blitzq_django.engine import Client, RedisBroker, Worker
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="obs"), store_results=True)
if arm == "traced":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    provider = TracerProvider()
    provider.add_span_processor(SpanProcessor())  # spans are made, then dropped
    trace.set_tracer_provider(provider)
    from blitzq_django.engine import tracing
    tracing.instrument(client)
"""

DRAIN = SETUP + r"""
import asyncio
kind, n = sys.argv[1], int(sys.argv[3])
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

ENQUEUE = SETUP + r"""
n = int(sys.argv[3])
task = client.task(name="noop")(lambda i: i)
task.enqueue(-1)  # connects, loads the script
for i in range(n):
    task.enqueue(i)
client.broker.sync.client.flushdb()
"""


MICRO = r"""
import logging, os, sys, types
arm, n = sys.argv[1], int(sys.argv[2])
from blitzq_django.engine.core.message import Message
from blitzq_django.engine.core.task import TaskSpec
from blitzq_django.engine.brokers.base import Settlement
from blitzq_django.engine.worker import tasklog

spec = TaskSpec.build(lambda i: i, name="noop")
held = types.SimpleNamespace(message=Message(id="0" * 32, task="noop", queue="default"),
                             spec=spec, delivery=None)
if arm == "on":
    handler = logging.StreamHandler(open(os.devnull, "w"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("blitzq").addHandler(handler)
    logging.getLogger("blitzq.task.succeeded").setLevel(logging.INFO)


class Executor:  # the attribute _conclude_now reads, as an instance attribute
    def __init__(self):
        self.log_successes = tasklog.successes_on()
        self.is_enabled = tasklog.succeeded_log.isEnabledFor


def run(executor, settlement, n):  # locals, as in _conclude_now
    if arm == "base":
        for _ in range(n):
            pass
    elif arm == "call":  # the alternative: ask the logger at each success
        for _ in range(n):
            if settlement.failure is not None:
                pass
            elif executor.is_enabled(20):
                tasklog.succeeded(held, 0, 3, "w")
    else:  # what _conclude_now adds to a success: two tests, and the line when it is on
        for _ in range(n):
            if settlement.failure is not None:
                pass
            elif executor.log_successes:
                tasklog.succeeded(held, 0, 3, "w")


run(Executor(), Settlement(None, "done", "0" * 32), n)
"""


def micro(url: str, tmp: Path, sizes: tuple[int, int], arms: list[str]) -> None:
    small, large = sizes
    counts = {}
    for arm in ["base", *arms]:
        counts[arm] = [_count(".", url, MICRO, [arm, str(n)], tmp / f"micro.{arm}.{n}")
                       for n in (small, large)]
    per = {arm: (c[1] - c[0]) / (large - small) for arm, c in counts.items()}
    for arm in arms:
        print(f"success line {arm:4}: {per[arm] - per['base']:10,.0f} instructions per "
              "success over an empty loop", flush=True)


def _summary(out: Path) -> int:
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {out}")


def _count(tree: str, url: str, script: str, args: list[str], out: Path,
           fill: int | None = None) -> int:
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(Path(tree).resolve())}
    if fill is not None:
        subprocess.run([sys.executable, "-c", FILL, str(fill)], env=env, check=True)
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    sys.executable, "-c", script, *args], env=env, check=True,
                   capture_output=True)
    return _summary(out)


def _has_tracing(tree: str) -> bool:
    return (Path(tree) / "blitzq_django" / "engine" / "tracing.py").exists()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", default=".", help="comma-separated code roots")
    parser.add_argument("--kinds", default="async,def")
    parser.add_argument("--arms", default="off,succeeded,traced")
    parser.add_argument("--sizes", default="2000,7000", help="the two drains (or enqueues)")
    parser.add_argument("--enqueue", action="store_true",
                        help="count the producer's instructions per single enqueue instead")
    parser.add_argument("--micro", action="store_true",
                        help="count only what a success costs in _conclude_now, off and on")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.run import redis_url_or_private

    small, large = (int(n) for n in args.sizes.split(","))
    url, server = redis_url_or_private()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.micro:
                micro(url, Path(tmp), (small, large),
                      [a for a in args.arms.split(",") if a in ("off", "call", "on")])
                return
            for tree in args.trees.split(","):
                arms = [a for a in args.arms.split(",")
                        if a != "traced" or _has_tracing(tree)]
                for kind in ["enqueue"] if args.enqueue else args.kinds.split(","):
                    for arm in arms:
                        if args.enqueue and arm == "succeeded":
                            continue
                        counts = []
                        for n in (small, large):
                            out = Path(tmp) / f"{kind}.{arm}.{n}"
                            if args.enqueue:
                                counts.append(_count(tree, url, ENQUEUE, [kind, arm, str(n)],
                                                     out))
                            else:
                                counts.append(_count(tree, url, DRAIN, [kind, arm, str(n)],
                                                     out, fill=n))
                        per = (counts[1] - counts[0]) / (large - small)
                        print(f"{tree:>12} {kind:7} {arm:9} {per / 1000:8.2f} k instructions "
                              "per message", flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
