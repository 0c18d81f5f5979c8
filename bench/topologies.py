#!/usr/bin/env python3
"""blitzq on one Redis server, a Sentinel set and a Redis Cluster, in one sitting.

    python3 -m bench.topologies [--repeats 3] [--n 10000] [--single-n 3000]
                                [--lat-n 300] [--lat-rate 50] [--workers 1] [--json PATH]

The three topologies are started side by side (tests/support/topology.py, loopback, no
persistence, as the single-node rows of bench/run.py): one redis-server; 1 master with
2 replicas and 3 sentinels; 3 masters with a replica each. Work goes to three queues
whose hash slots live on the three cluster masters (on one server and on Sentinel the
same three queues share the one master). Rounds are interleaved (every round visits
every topology, order rotated); the table gives medians.

Rows, each from fresh processes:

- enqueue-single: ``task.enqueue`` one at a time, the queues in turn (µs, ops/s);
- bulk: ``enqueue_many``, ``--n`` messages, a third per queue (ops/s);
- dispatch: ``--workers`` worker processes (``Worker(concurrency=100)``, ``async def``
  no-op tasks, results stored) drain ``--n`` messages pre-filled over the three
  queues; tasks/s from the first worker's start to the last completion;
- latency: a paced producer (``--lat-rate``/s, one queue after another) while the
  worker runs: time from enqueue to the task body's start, p50 and p99.

The machine has 2 cores. Every process here (servers, replicas, sentinels, workers,
producer) shares them: the rows say what a topology costs a producer and a worker on
the same hardware (more servers to keep in step, a client that routes), not what 3
masters on 3 machines would give (docs/benchmarks.md has that model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from redis.crc import key_slot  # noqa: E402

from blitzq_django.engine import CallOptions, Client, RedisBroker, Worker  # noqa: E402
from blitzq_django.engine.brokers.redis.keys import Keyspace  # noqa: E402
from tests.support import topology  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

TOPOLOGIES = ("single", "sentinel", "cluster")
NAMESPACE = "bench"


def spread_queues(namespace: str = NAMESPACE) -> list[str]:
    """Three queue names whose keys hash to the three thirds of the slots (the harness
    gives each cluster master a third)."""
    keys, found = Keyspace(namespace), {}
    third = topology.SLOTS // 3
    n = 0
    while len(found) < 3:
        name = f"q{n}"
        slot = key_slot(keys.queue(name).stream.encode())
        found.setdefault(min(slot // third, 2), name)
        n += 1
    return [found[i] for i in range(3)]


QUEUES = spread_queues()


# -- the worker process ---------------------------------------------------------------


def _client(url: str, namespace: str) -> Client:
    client = Client(RedisBroker(url, namespace=namespace), store_results=True)

    @client.task(name="noop")
    async def noop(t: float = 0.0) -> None:
        return None

    @client.task(name="lat")
    async def lat(t: float = 0.0) -> None:
        LATENCIES.append(time.time() - t)
        if len(LATENCIES) >= WANTED[0] and WORKER:
            WORKER[0].stop()

    return client


LATENCIES: list[float] = []
WANTED = [0]
WORKER: list[Worker] = []


def worker_main(url: str, namespace: str, mode: str, wanted: int) -> None:
    """``drain``: a burst worker until the queues are empty; ``latency``: until
    ``wanted`` latency tasks ran. Prints one JSON line."""
    client = _client(url, namespace)
    WANTED[0] = wanted
    worker = Worker(client, queues=tuple(QUEUES), concurrency=100, burst=(mode == "drain"),
                    block_timeout=0.2)
    WORKER.append(worker)
    began = time.time()
    asyncio.run(worker.run(close_broker=True))
    out: dict[str, Any] = {"began": began, "ended": time.time()}
    if mode == "latency":
        out["latencies"] = LATENCIES
    print(json.dumps(out), flush=True)


def _spawn(url: str, namespace: str, mode: str, wanted: int = 0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.topologies", "--worker", url, namespace, mode,
         str(wanted)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def _result(proc: subprocess.Popen[str], timeout: float = 300) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"worker exited with {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


# -- the rows ----------------------------------------------------------------------------


def enqueue_single(url: str, n: int) -> dict[str, float]:
    client = _client(url, f"b{uuid.uuid4().hex[:8]}")
    task = client.registry.get("noop")
    calls = [CallOptions(queue=q) for q in QUEUES]
    for call in calls:  # connect, write the seen queues, load the scripts
        client.enqueue(task, (0.0,), call=call)
    began = time.perf_counter()
    for i in range(n):
        client.enqueue(task, (0.0,), call=calls[i % 3])
    elapsed = time.perf_counter() - began
    client.broker.close()
    return {"ops": n / elapsed, "us": elapsed / n * 1e6}


def fill(url: str, namespace: str, n: int, kind: str = "noop") -> float:
    client = _client(url, namespace)
    task = client.registry.get(kind)
    began = time.perf_counter()
    for q in QUEUES:
        share = n // 3
        for start in range(0, share, 1000):
            client.enqueue_many(task, [((0.0,), {})] * min(1000, share - start),
                                call=CallOptions(queue=q))
    elapsed = time.perf_counter() - began
    client.broker.close()
    return elapsed


def bulk(url: str, n: int) -> dict[str, float]:
    namespace = f"b{uuid.uuid4().hex[:8]}"
    fill(url, namespace, 30)  # connect, seen queues, scripts
    return {"ops": (n // 3 * 3) / fill(url, namespace, n)}


def dispatch(url: str, n: int, workers: int) -> dict[str, float]:
    namespace = f"b{uuid.uuid4().hex[:8]}"
    fill(url, namespace, n)
    procs = [_spawn(url, namespace, "drain") for _ in range(workers)]
    results = [_result(p) for p in procs]
    began = min(r["began"] for r in results)
    ended = max(r["ended"] for r in results)
    return {"ops": (n // 3 * 3) / (ended - began)}


def latency(url: str, n: int, rate: float) -> dict[str, float]:
    namespace = f"b{uuid.uuid4().hex[:8]}"
    client = _client(url, namespace)
    task = client.registry.get("lat")
    calls = [CallOptions(queue=q) for q in QUEUES]
    proc = _spawn(url, namespace, "latency", n)
    deadline = time.monotonic() + 60
    while not client.workers() and time.monotonic() < deadline:  # its first heartbeat
        time.sleep(0.05)
    time.sleep(0.5)  # its fetch loops reading before the first message
    began = time.perf_counter()
    for i in range(n):
        delay = began + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        client.enqueue(task, (time.time(),), call=calls[i % 3])
    result = _result(proc)
    client.broker.close()
    values = sorted(result["latencies"])
    return {"p50_ms": values[len(values) // 2] * 1000,
            "p99_ms": values[min(len(values) - 1, int(len(values) * 0.99))] * 1000}


# -- the sitting ---------------------------------------------------------------------------


def sitting(args: argparse.Namespace) -> dict[str, Any]:
    # Each built once the one before is up: their free ports are taken when built.
    single = RedisServer().start()
    sentinels: Any = None
    cluster: Any = None
    runs: list[dict[str, Any]] = []
    try:
        sentinels = topology.SentinelSet().start()
        cluster = topology.Cluster().start()
        urls = {"single": single.url, "sentinel": sentinels.url(), "cluster": cluster.url}
        for r in range(args.repeats):
            order = TOPOLOGIES[r % 3:] + TOPOLOGIES[:r % 3]
            for name in order:
                url = urls[name]
                row = {"topology": name, "round": r + 1,
                       "enqueue_single": enqueue_single(url, args.single_n),
                       "bulk": bulk(url, args.n),
                       "dispatch": dispatch(url, args.n, args.workers),
                       "latency": latency(url, args.lat_n, args.lat_rate)}
                runs.append(row)
                print(json.dumps(row), flush=True)
    finally:
        single.stop()
        for up in (sentinels, cluster):
            if up is not None:
                up.stop()
    return {"runs": runs, "queues": QUEUES, "argv": sys.argv[1:],
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count()}


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    base: dict[str, float] = {}
    for name in TOPOLOGIES:
        mine = [r for r in data["runs"] if r["topology"] == name]
        if not mine:
            continue

        def med(row: str, field: str, mine: list[dict[str, Any]] = mine) -> float:
            return statistics.median(r[row][field] for r in mine)

        figures = {"enqueue-single /s": med("enqueue_single", "ops"),
                   "bulk /s": med("bulk", "ops"),
                   "dispatch+results /s": med("dispatch", "ops"),
                   "latency p50 ms": med("latency", "p50_ms"),
                   "latency p99 ms": med("latency", "p99_ms")}
        if name == "single":
            base = figures
        row: dict[str, Any] = {"topology": name}
        for key, value in figures.items():
            ratio = f" ({value / base[key]:.2f}x)" if base and name != "single" else ""
            row[key] = f"{value:,.0f}{ratio}" if "/s" in key else f"{value:.2f}{ratio}"
        row["rounds"] = len(mine)
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    heads = list(rows[0])
    lines = ["| " + " | ".join(heads) + " |", "| " + " | ".join("---" for _ in heads) + " |"]
    lines += ["| " + " | ".join(str(r[h]) for h in heads) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        worker_main(argv[1], argv[2], argv[3], int(argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--single-n", type=int, default=3000)
    parser.add_argument("--lat-n", type=int, default=300)
    parser.add_argument("--lat-rate", type=float, default=50.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    missing = topology.missing_reason()
    if missing:
        print(f"cannot run: {missing}", file=sys.stderr)
        return 2
    data = sitting(args)
    print()
    print(f"queues {', '.join(QUEUES)}; {args.repeats} rounds, medians; "
          f"{os.cpu_count()} cores")
    print(table(summary(data)))
    if args.json:
        args.json.write_text(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
