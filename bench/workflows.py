#!/usr/bin/env python3
"""What a workflow costs: a chord of ``--n`` no-op members and its callback, against
``--n`` plain no-op tasks, on blitzq and on Celery (Redis broker, Redis result
backend), in one sitting.

    python3 bench/workflows.py --n 1000 --repeats 5

One private redis-server (or REDIS_URL: its DB is FLUSHED), one worker process per
system kept for the sitting (blitzq: the engine worker, ``async def`` no-ops,
concurrency 100; Celery: ``--pool=solo``, the fastest of its pools for no-ops on this
machine, see bench/systems/celery.py), and the producer in this process. Each round
runs, for each system in turn (the order rotated every round):

- ``plain``: enqueue ``--n`` no-op tasks (blitzq ``enqueue_many``; Celery one
  ``delay()`` each, its only way), then wait until every result is there;
- ``chord``: enqueue ``chord(group(noop.s(i) for i in range(n)), collect.s())`` and
  wait for the callback's result (which checks it got all ``n`` results).

Each figure is the wall time from the first enqueue to the last result, in ms, and
how much of it the enqueue took (Celery's producer subscribes to each task's result as
it sends it, so its enqueue is a large part); the script prints every run, then the
medians and chord / plain (the workflow's overhead).

Needs redis-server on PATH (or REDIS_URL), the project's dependencies and Celery
(bench/requirements.txt).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers import start_redis  # noqa: E402

QUEUE = "wfbench"


# -- the apps (imported by the worker processes) ---------------------------------------

def blitzq_client() -> Any:
    from blitzq_django.engine import Client, RedisBroker

    client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="wfbench"),
                    default_queue=QUEUE)

    @client.task(name="noop")
    async def noop(i: int) -> int:
        return i

    @client.task(name="collect")
    async def collect(values: list[int]) -> int:
        return len(values)

    return client


def celery_app() -> Any:
    from celery import Celery

    app = Celery("wfbench", broker=os.environ["REDIS_URL"], backend=os.environ["REDIS_URL"])
    app.conf.update(task_default_queue=QUEUE, task_acks_late=True,
                    worker_prefetch_multiplier=64, worker_hijack_root_logger=False,
                    broker_connection_retry_on_startup=True, task_serializer="json",
                    result_serializer="json")

    @app.task(name="noop")
    def noop(i: int) -> int:
        return i

    @app.task(name="collect")
    def collect(values: list[int]) -> int:
        return len(values)

    return app


if os.environ.get("WFBENCH_CELERY"):  # the worker process: `celery -A bench.workflows`
    app = celery_app()


# -- the sitting -----------------------------------------------------------------------



def start_worker(system: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    if system == "blitzq":
        command = [sys.executable, "-m", "blitzq_django.engine", "worker",
                   "bench.workflows:blitzq_client", "--concurrency", "100", "--queues", QUEUE]
    else:
        command = [sys.executable, "-m", "celery", "-A", "bench.workflows", "worker",
                   "--pool=solo", "--loglevel=WARNING", "-Q", QUEUE, "--without-gossip",
                   "--without-mingle", "--without-heartbeat"]
        env = {**env, "WFBENCH_CELERY": "1"}
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


class Blitzq:
    def __init__(self) -> None:
        from blitzq_django.engine import chord, group

        self.client = blitzq_client()
        self._chord, self._group = chord, group
        self.tasks = {t.name: t for t in _tasks(self.client)}

    def plain(self, n: int) -> float:
        handles = self.tasks["noop"].enqueue_many([(i,) for i in range(n)])
        enqueued = time.perf_counter()
        ids = [h.id for h in handles]
        records = self.client.broker.records
        deadline = time.monotonic() + 120
        # The records of all of them, read 1000 to a round trip until every one is there
        # (a get_result each would cost a connection each).
        while not all(records(QUEUE, ids)):
            assert time.monotonic() < deadline, "plain tasks did not finish"
            time.sleep(0.002)
        return enqueued

    def chord(self, n: int) -> float:
        flow = self._chord(self._group(self.tasks["noop"].s(i) for i in range(n)),
                           self.tasks["collect"].s())
        handle = flow.enqueue()
        enqueued = time.perf_counter()
        assert handle.result(timeout=120) == n
        return enqueued


def _tasks(client: Any) -> list[Any]:
    from blitzq_django.engine import Task

    return [Task(client.registry.find(name), lambda: client) for name in ("noop", "collect")]


class Celery:
    def __init__(self) -> None:
        from celery import chord, group
        from celery.result import ResultSet

        self.app = celery_app()
        self._chord, self._group, self._set = chord, group, ResultSet
        self.noop, self.collect = self.app.tasks["noop"], self.app.tasks["collect"]

    def plain(self, n: int) -> float:
        results = [self.noop.delay(i) for i in range(n)]
        enqueued = time.perf_counter()
        # join_native: one read of many results at a time (the Redis backend's get_many)
        self._set(results).join_native(timeout=120)
        return enqueued

    def chord(self, n: int) -> float:
        flow = self._chord(self._group(self.noop.s(i) for i in range(n)), self.collect.s())
        result = flow()
        enqueued = time.perf_counter()
        assert result.get(timeout=120) == n
        return enqueued


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--systems", default="blitzq,celery")
    args = parser.parse_args()
    url, server = start_redis()
    os.environ["REDIS_URL"] = url
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    systems = args.systems.split(",")
    workers = {s: start_worker(s, env) for s in systems}
    drivers: dict[str, Any] = {}
    try:
        for system in systems:
            drivers[system] = Blitzq() if system == "blitzq" else Celery()
            drivers[system].plain(10)  # warm: the worker serves, scripts are loaded
            drivers[system].chord(10)
        times: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.repeats):
            order = systems[round_ % len(systems):] + systems[:round_ % len(systems)]
            for system in order:
                for shape in ("plain", "chord") if round_ % 2 == 0 else ("chord", "plain"):
                    began = time.perf_counter()
                    enqueued = getattr(drivers[system], shape)(args.n)
                    ms = (time.perf_counter() - began) * 1000
                    times.setdefault((system, shape), []).append(ms)
                    times.setdefault((system, shape + "-enqueue"), []).append(
                        (enqueued - began) * 1000)
                    print(f"round {round_ + 1} {system:7} {shape:6} {ms:8.1f} ms "
                          f"(enqueued in {(enqueued - began) * 1000:.1f} ms)", flush=True)
        print(f"\nmedians of {args.repeats} rounds, n = {args.n}:")
        for system in systems:
            plain = statistics.median(times[(system, "plain")])
            chord = statistics.median(times[(system, "chord")])
            plain_in = statistics.median(times[(system, "plain-enqueue")])
            chord_in = statistics.median(times[(system, "chord-enqueue")])
            print(f"  {system:7} plain {plain:8.1f} ms (enqueued in {plain_in:.1f})   "
                  f"chord {chord:8.1f} ms (enqueued in {chord_in:.1f})   "
                  f"chord / plain {chord / plain:.2f}")
    finally:
        for proc in workers.values():
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if server is not None:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
