#!/usr/bin/env python3
"""Master failovers, counted task by task, and what the replica wait costs.

    python3 -m bench.failover [--kills 5] [--topologies sentinel,cluster] [--rate 200]
                              [--cost-rounds 5] [--only failover|cost] [--json PATH]

Failover (tests/fault/failover.py does the work, the fault test runs it small): for
each topology (a Sentinel set: 1 master, 2 replicas, 3 sentinels; a Redis Cluster: 3
masters with a replica each; both from tests/support/topology.py on loopback), with
and without ``replica_wait=(1, 1000)``, two worker processes and a producer enqueueing
``--rate`` messages a second, one at a time; every few seconds the master holding the
queue is SIGKILLed, and started again as a replica once the failover is done (the
scenarios: SCENARIOS below). Counted
from the producer's list and a ledger the task bodies write (outside Redis): lost
(enqueue returned an id, never ran), duplicated, indeterminate (enqueue raised), the
failover's own time and the time from the kill to the first completion of a message
enqueued after it.

Cost (``--only cost``): on a master with two replicas (the Sentinel set's, reached
directly: the replica wait is the same WAIT on any topology): enqueue-single (µs of
each ``task.enqueue``, one client without and one with the wait taking turns call by
call, so the machine's load falls on both alike; p50 and p90 of all calls) and
dispatch (tasks/s of an in-process worker draining 5,000 no-op tasks, results stored;
rounds interleaved, medians).

This machine has 2 cores, shared by Redis, the workers and the producer: the figures
say what a failover does to the counts, and the relative cost of the wait; absolute
rates are this machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blitzq_django.engine import Client, RedisBroker, Worker  # noqa: E402
from tests.fault import failover  # noqa: E402
from tests.support import topology  # noqa: E402

WAIT = (1, 1000)


def table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    heads = list(rows[0])
    lines = ["| " + " | ".join(heads) + " |", "| " + " | ".join("---" for _ in heads) + " |"]
    lines += ["| " + " | ".join(str(r[h]) for h in heads) + " |" for r in rows]
    return "\n".join(lines)


#: (topology, replicas cut before the kill s, message delay s): the rows of the table.
#: Without cut and delay, the completion time after a kill; with a delay (a backlog of
#: that many seconds of messages at each kill) and a cut (Sentinel: the replicas
#: pointed elsewhere that long before the kill, as a network partition would), what a
#: failover forgets.
SCENARIOS = [("sentinel", 0.0, 0.0), ("sentinel", 0.3, 1.0), ("cluster", 0.0, 0.0),
             ("cluster", 0.0, 1.0)]


def failovers(kinds: list[str], kills: int, rate: float, tmp: Path) -> list[dict[str, Any]]:
    rows = []
    for kind, cut, delay in SCENARIOS:
        if kind not in kinds:
            continue
        for wait in (None, WAIT):
            label = f"{kind}-{'wait' if wait else 'nowait'}-cut{cut:g}-delay{delay:g}"
            print(f"# failover {label}: {kills} kills at {rate:g} enqueues/s", flush=True)
            outcome = failover.run(kind, tmp / label, wait=wait, kills=kills, rate=rate,
                                   steady_s=3.0, cut_s=cut, delay_s=delay, label=label)
            rows.append(outcome.row())
            print(table([rows[-1]]), flush=True)
    return rows


def _client(url: str, wait: tuple[int, int] | None) -> Client:
    client = Client(RedisBroker(url, namespace=f"c{uuid.uuid4().hex[:8]}", replica_wait=wait),
                    store_results=True)

    @client.task(name="noop")
    async def noop(i: int = 0) -> int:
        return i

    return client


def enqueue_single_pairs(url: str, n: int) -> tuple[list[float], list[float]]:
    """Per-call µs of ``task.enqueue``, without and with the wait, the two clients taking
    turns call by call (so the machine's load falls on both alike)."""
    clients = [_client(url, None), _client(url, WAIT)]
    tasks = [c.registry.get("noop") for c in clients]
    for client, task in zip(clients, tasks, strict=True):
        client.enqueue(task, (0,))  # connects, writes the seen queues
    times: tuple[list[float], list[float]] = ([], [])
    clock = time.perf_counter
    for i in range(n):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            began = clock()
            clients[k].enqueue(tasks[k], (i,))
            times[k].append((clock() - began) * 1e6)
    for client in clients:
        client.broker.close()
    return times


def dispatch_per_s(url: str, wait: tuple[int, int] | None, n: int) -> float:
    filler = _client(url, None)
    task = filler.registry.get("noop")
    ns = filler.broker.keys.namespace  # type: ignore[attr-defined]
    for start in range(0, n, 1000):
        filler.enqueue_many(task, [((i,), {}) for i in range(start, min(start + 1000, n))])
    filler.broker.close()
    client = Client(RedisBroker(url, namespace=ns, replica_wait=wait), store_results=True)
    client.task(name="noop")(_noop)
    worker = Worker(client, burst=True, concurrency=100, block_timeout=0.05)
    began = time.perf_counter()
    stats = asyncio.run(worker.run(close_broker=True))
    elapsed = time.perf_counter() - began
    assert stats.succeeded == n, stats
    return n / elapsed


async def _noop(i: int = 0) -> int:
    return i


def cost(rounds: int, single_n: int, dispatch_n: int) -> list[dict[str, Any]]:
    samples: dict[str, list[float]] = {"off": [], "on": []}
    per_call: tuple[list[float], list[float]] = ([], [])
    with topology.started(topology.SentinelSet()) as sentinels:
        url = f"redis://127.0.0.1:{sentinels.master().port}/0"
        for r in range(rounds):
            off, on = enqueue_single_pairs(url, single_n)
            per_call[0].extend(off)
            per_call[1].extend(on)
            for wait in ([None, WAIT] if r % 2 == 0 else [WAIT, None]):
                samples["on" if wait else "off"].append(dispatch_per_s(url, wait, dispatch_n))
            print(f"# cost round {r + 1}/{rounds}: enqueue µs median off "
                  f"{statistics.median(off):.0f} on {statistics.median(on):.0f}; dispatch "
                  f"off {samples['off'][-1]:.0f} on {samples['on'][-1]:.0f}/s", flush=True)

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))]

    rows = []
    for name, q in (("enqueue-single µs per call, p50", 0.5),
                    ("enqueue-single µs per call, p90", 0.9)):
        off, on = pct(per_call[0], q), pct(per_call[1], q)
        rows.append({"figure": name, "wait off": round(off, 1), "wait on": round(on, 1),
                     "on - off": round(on - off, 1),
                     "samples": f"{len(per_call[0]):,} calls each, turn about"})
    off, on = statistics.median(samples["off"]), statistics.median(samples["on"])
    rows.append({"figure": "dispatch tasks/s (median of rounds)", "wait off": round(off),
                 "wait on": round(on), "on - off": round(on - off),
                 "samples": f"{rounds} rounds: off {min(samples['off']):.0f}-"
                            f"{max(samples['off']):.0f}, on {min(samples['on']):.0f}-"
                            f"{max(samples['on']):.0f}"})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--topologies", default="sentinel,cluster")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--cost-rounds", type=int, default=5)
    parser.add_argument("--single-n", type=int, default=3000)
    parser.add_argument("--dispatch-n", type=int, default=5000)
    parser.add_argument("--only", choices=("failover", "cost"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    missing = topology.missing_reason()
    if missing:
        print(f"cannot run: {missing}", file=sys.stderr)
        return 2
    out: dict[str, Any] = {"argv": sys.argv[1:], "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.only != "cost":
        with tempfile.TemporaryDirectory(prefix="blitzq-failover-") as tmp:
            out["failover"] = failovers(args.topologies.split(","), args.kills, args.rate,
                                        Path(tmp))
    if args.only != "failover":
        out["cost"] = cost(args.cost_rounds, args.single_n, args.dispatch_n)
    print()
    for key in ("failover", "cost"):
        if key in out:
            print(table(out[key]))
            print()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
