#!/usr/bin/env python3
"""Task history: how fast the writer drains the events, and what its details cost.

    python3 bench/history_writer.py --tasks 50000 --repeats 5

Writer throughput on PostgreSQL (127.0.0.1:5432, user postgres; a fresh database,
dropped at the end; or DATABASE_URL): the events stream of one queue is filled with
the events of ``--tasks`` tasks as a worker writes them (enqueued with its message,
started, succeeded, and a stored result record), then one HistoryWriter drains it
(timed: read, fold, one bulk upsert per batch in one transaction, ack). Two orders:

- ``chunked``: each 500 tasks' ``enqueued`` events, then their starts and outcomes (a
  worker keeping up: most rows are written once);
- ``split``: every ``enqueued`` first, then every start and outcome (a backlog: every
  row is written twice).

Each repeat starts from an empty table and a new consumer group. Prints rows/s (tasks)
and events/s per run, then the medians.

    python3 bench/history_writer.py --tasks 20000 --repeats 5 --message-ab

What keeping each task's encoded message in its row (``TaskRecord.message``, for Retry)
costs the writer: each order run with the message kept and not kept, interleaved (the
arm's order swapped every repeat), and the table's bytes per row of each.

    python3 bench/history_writer.py --cost --n 50000 --single 5000 --repeats 7

What the details cost the engine (events on in both; ``event_details`` off and on, as
HISTORY "off" and "all"): enqueue_many, single enqueues and a dispatch drain of no-op
tasks (``def`` and ``async def``, results on), each run in a fresh process, the order
swapped every round, medians; as bench/events_cost.py.

Needs redis-server on PATH (or REDIS_URL) and PostgreSQL (not for --cost).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COST_CHILD = r"""
import asyncio, json, os, sys, time
from blitzq_django.engine import Client, RedisBroker, Worker

kind, n, single, details = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="hc", event_details=details),
                store_results=True)
if kind == "async":
    async def noop(i, name="x"):
        return i
else:
    def noop(i, name="x"):
        return i
task = client.task(name="noop")(noop)
task.enqueue(-1)  # connects, loads the script
r = client.broker.sync.client
r.flushdb()

def redis_cpu():
    info = r.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]

cpu, began = redis_cpu(), time.perf_counter()
for start in range(0, n, 1000):
    task.enqueue_many([((i,), {"name": "customer-%d" % i}) for i in
                       range(start, min(n, start + 1000))])
bulk = n / (time.perf_counter() - began)
bulk_cpu = (redis_cpu() - cpu) / n * 1e6
events = client.broker.keys.queue("default").events
event_bytes = r.memory_usage(events, samples=0) / r.xlen(events)
worker = Worker(client, concurrency=100, burst=True, block_timeout=0.05)
cpu, began = redis_cpu(), time.perf_counter()
stats = asyncio.run(worker.run(close_broker=True))
drain = n / (time.perf_counter() - began)
drain_cpu = (redis_cpu() - cpu) / n * 1e6
assert stats.succeeded == n, stats.as_dict()
r.flushdb()
cpu, began = redis_cpu(), time.perf_counter()
for i in range(single):
    task.enqueue(i, name="customer")
one = single / (time.perf_counter() - began)
one_cpu = (redis_cpu() - cpu) / single * 1e6
r.flushdb()
print(json.dumps({"dispatch": drain, "enqueue_many": bulk, "enqueue": one,
                  "redis_us_dispatch": drain_cpu, "redis_us_enqueue_many": bulk_cpu,
                  "redis_us_enqueue": one_cpu, "event_bytes": event_bytes}))
"""


def cost(url: str, n: int, single: int, repeats: int, kinds: list[str]) -> None:
    runs: dict[tuple[str, str, str], list[float]] = {}
    modes = {"off": "0", "on": "1"}
    for repeat in range(repeats):
        for kind in kinds:
            order = list(modes) if repeat % 2 == 0 else list(reversed(modes))
            for mode in order:
                env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
                out = subprocess.run([sys.executable, "-c", COST_CHILD, kind, str(n),
                                      str(single), modes[mode]], env=env, cwd=ROOT,
                                     capture_output=True, text=True, check=True)
                rates = json.loads(out.stdout.strip().splitlines()[-1])
                for what, rate in rates.items():
                    runs.setdefault((kind, what, mode), []).append(rate)
                print(f"repeat {repeat + 1} {kind:5} details {mode:3}: "
                      + "  ".join(f"{w} {r:,.1f}" for w, r in rates.items()), flush=True)
    print("\nmedians (per second) and the cost of details (off / on - 1):")
    for kind in kinds:
        for what in ("dispatch", "enqueue_many", "enqueue"):
            on = statistics.median(runs[(kind, what, "on")])
            off = statistics.median(runs[(kind, what, "off")])
            print(f"  {kind:5} {what:12} off {off:>9,.0f}  on {on:>9,.0f}  "
                  f"cost {off / on - 1:+.1%}")
    print("\nmedians: Redis CPU per message (us) and bytes per event of the stream:")
    for kind in kinds:
        for what in ("redis_us_dispatch", "redis_us_enqueue_many", "redis_us_enqueue",
                     "event_bytes"):
            on = statistics.median(runs[(kind, what, "on")])
            off = statistics.median(runs[(kind, what, "off")])
            print(f"  {kind:5} {what:22} off {off:>8,.1f}  on {on:>8,.1f}  "
                  f"({on / off - 1:+.1%})")


# -- writer throughput ---------------------------------------------------------------------


def fill(client, tasks: int, order: str) -> int:  # type: ignore[no-untyped-def]
    """The events (and result records) of ``tasks`` no-op tasks, as a worker writes them."""
    from blitzq_django.engine.core import events as ev
    from blitzq_django.engine.core.message import Message, encode
    from blitzq_django.engine.core.record import encode_success

    broker = client.broker
    r = broker.sync.client
    keys = broker.keys.queue("default")
    pack = ev.packer().pack
    now = int(time.time() * 1000)
    chunk = 500 if order == "chunked" else tasks
    written = 0
    for start in range(0, tasks, chunk):
        ids = [uuid.uuid4().hex for _ in range(start, min(tasks, start + chunk))]
        pipe = r.pipeline(transaction=False)
        for n, id_ in enumerate(ids):
            payload = encode(Message(id=id_, task="bench.noop", queue="default",
                                     args=[start + n], kwargs={"name": f"customer-{n}"},
                                     created_ms=now))
            pipe.xadd(keys.events, {"e": pack([ev.ENQUEUED, id_, "bench.noop", now, None, None,
                                               None, None, ev.message_detail(payload)])})
            if n % 1000 == 999:
                pipe.execute()
        pipe.execute()
        for n, id_ in enumerate(ids):
            pipe.xadd(keys.events, {"e": pack([ev.STARTED, id_, "bench.noop", now + 1, 1,
                                               "w1", None, None])})
            pipe.xadd(keys.events, {"e": pack([ev.SUCCEEDED, id_, "bench.noop", now + 2, 1,
                                               "w1", 1, None])})
            pipe.set(keys.record(id_), encode_success(id_, "bench.noop", "default", 1,
                                                      start + n, now, now + 1, now + 2, "w1"),
                     ex=3600)
            if n % 1000 == 999:
                pipe.execute()
        pipe.execute()
        written += 3 * len(ids)
    return written


def throughput(tasks: int, repeats: int, batch: int, orders: list[str],
               message_ab: bool = False) -> None:
    import django
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    call_command("migrate", verbosity=0)
    from blitzq_django import conf
    from blitzq_django.history import merge
    from blitzq_django.history.writer import GROUP, HistoryWriter
    from blitzq_django.models import TaskRecord

    keep = merge._message_fields
    arms = {"kept": keep}

    def not_kept(row, payload, redact):  # type: ignore[no-untyped-def]
        keep(row, payload, redact)
        row.message = None

    if message_ab:
        arms["not kept"] = not_kept

    client = conf.get_client()
    r = client.broker.sync.client
    keys = client.broker.keys.queue("default")
    results: dict[str, list[tuple[float, float, float]]] = {}
    sizes: dict[str, list[float]] = {}
    for repeat in range(repeats):
        for order, arm in [(o, a) for o in orders
                           for a in (list(arms) if repeat % 2 == 0 else list(arms)[::-1])]:
            merge._message_fields = arms[arm]
            label = f"{order} ({arm})" if message_ab else order
            r.flushdb()
            with connection.cursor() as cursor:
                cursor.execute(f"TRUNCATE {TaskRecord._meta.db_table}")
            events = fill(client, tasks, order)
            assert r.xlen(keys.events) == events
            writer = HistoryWriter(client, ["default"], "all", batch=batch)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backend = cursor.fetchone()[0]
            cpu = (time.process_time(), cpu_of(backend), redis_cpu(r))
            began = time.perf_counter()
            while writer.step() or not writer.held:
                pass
            took = time.perf_counter() - began
            spent = [after - before for before, after in
                     zip(cpu, (time.process_time(), cpu_of(backend), redis_cpu(r)), strict=True)]
            writer.leases["default"].release()
            assert TaskRecord.objects.filter(state="succeeded").count() == tasks
            assert writer.stats.events == events
            rate = (tasks / took, events / took, tasks / sum(spent))
            results.setdefault(label, []).append(rate)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_total_relation_size(%s)",
                               [TaskRecord._meta.db_table])
                sizes.setdefault(label, []).append(cursor.fetchone()[0] / tasks)
            print(f"repeat {repeat + 1} {label:8}: {tasks:,} tasks in {took:.2f} s: "
                  f"{rate[0]:,.0f} rows/s ({rate[1]:,.0f} events/s, "
                  f"{writer.stats.rows:,} row writes); CPU s: writer {spent[0]:.2f}, "
                  f"PostgreSQL {spent[1]:.2f}, Redis {spent[2]:.2f}: {rate[2]:,.0f} rows "
                  "per CPU second", flush=True)
            r.execute_command("XGROUP", "DESTROY", keys.events, GROUP)
    print("\nmedians (rows/s: wall clock; rows per CPU second: writer + its PostgreSQL "
          "backend + Redis, what one free core each would sustain at least):")
    for order, rates in results.items():
        print(f"  {order:8} {statistics.median(x for x, _, _ in rates):>9,.0f} rows/s  "
              f"{statistics.median(y for _, y, _ in rates):>9,.0f} events/s  "
              f"{statistics.median(z for _, _, z in rates):>9,.0f} rows per CPU second  "
              f"{statistics.median(sizes[order]):>6,.0f} table bytes per row")
    merge._message_fields = keep


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of a local process (the PostgreSQL backend)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu(r) -> float:  # type: ignore[no-untyped-def]
    info = r.info("cpu")
    return float(info["used_cpu_user"] + info["used_cpu_sys"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--orders", default="chunked,split")
    parser.add_argument("--cost", action="store_true",
                        help="measure what the events' details cost enqueue and dispatch")
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--single", type=int, default=5_000)
    parser.add_argument("--kinds", default="async,def")
    parser.add_argument("--message-ab", action="store_true",
                        help="each order with the encoded message kept in the row and not")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.run import redis_url_or_private

    url, server = redis_url_or_private()
    try:
        if args.cost:
            cost(url, args.n, args.single, args.repeats, args.kinds.split(","))
            return
        database = None
        if not os.environ.get("DATABASE_URL"):
            import psycopg

            database = f"blitzq_bench_{uuid.uuid4().hex[:8]}"
            with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres",
                                 autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{database}"')
            os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{database}"
        os.environ["REDIS_URL"] = url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
        try:
            throughput(args.tasks, args.repeats, args.batch, args.orders.split(","),
                       args.message_ab)
        finally:
            if database is not None:
                from django.db import connections

                connections.close_all()
                with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres",
                                     autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
