"""The history writer under SIGKILL: no row lost, none duplicated, every row final.

A real worker process runs a stream of 2,400 tasks (some of them fail) while a
``manage.py runhistory`` process writes their history to a database of the test's own
(SQLite, or PostgreSQL with BLITZQ_TEST_DB=postgres). The writer is SIGKILLed three
times while it writes (small batches, so a kill lands inside a transaction or between a
commit and its ack) and started again. At the end every task has exactly one row, in
the state its record says, with its arguments, and a timeline that is a valid path of
the events state machine with one terminal event (no transition applied twice).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from blitzq_django.engine import Client, RedisBroker
from blitzq_django.engine.core.events import TERMINAL, valid_path
from blitzq_django.history.writer import GROUP

from ..support.redis_server import RedisServer
from ..support.waiting import wait_until
from .ledger import REPORTS

pytestmark = pytest.mark.fault

ROOT = Path(__file__).absolute().parents[2]
TASKS = 2_400
KILLS = 3
POSTGRES = os.environ.get("BLITZQ_TEST_DB") == "postgres"


def make_client() -> Client:
    """The worker's app: a broker whose events carry details, as HISTORY turns on."""
    broker = RedisBroker(os.environ["REDIS_URL"], namespace=os.environ["BLITZQ_NAMESPACE"],
                         event_details=True)
    client = Client(broker, store_results=True)
    register(client)
    return client


def register(client: Client) -> dict[str, Any]:
    @client.task(name="hist.add")
    def add(a: int, b: int) -> int:
        return a + b

    @client.task(name="hist.refuse", retries=1, initial_delay=0.01, jitter=False,
                 dead_letter=False)
    async def refuse(n: int) -> None:
        raise ValueError(f"refused {n}")

    return {"add": add, "refuse": refuse}


class Process:
    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = open(log, "ab")  # noqa: SIM115 - closed in kill()
        self.process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=self._out,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.process.wait(10)
        self._out.close()


class Database:
    """A database of this test's own, read without Django."""

    def __init__(self, tmp: Path) -> None:
        if POSTGRES:
            import psycopg

            self.name = f"blitzq_hist_{uuid.uuid4().hex[:10]}"
            with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres",
                                 autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.name}"')
            self.env = {"DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{self.name}"}
        else:
            self.path = tmp / "history.sqlite3"
            self.env = {"BLITZQ_SQLITE": str(self.path)}

    def rows(self, timeout: float = 20) -> list[tuple[Any, ...]]:
        query = ("SELECT task_id, state, args, kwargs, timeline, attempt "
                 "FROM blitzq_django_taskrecord")
        if POSTGRES:
            import psycopg

            with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={self.name}") as conn:
                return [(r[0], r[1], r[2], r[3], r[4], r[5])
                        for r in conn.execute(query).fetchall()]
        with contextlib.closing(sqlite3.connect(self.path, timeout=timeout)) as conn:
            return [(r[0], r[1], json.loads(r[2]), json.loads(r[3]), json.loads(r[4]), r[5])
                    for r in conn.execute(query).fetchall()]

    def count(self, timeout: float = 20) -> int:
        try:
            return len(self.rows(timeout))
        except Exception:  # noqa: BLE001 - the table is not there yet, or locked
            return 0

    def drop(self) -> None:
        if POSTGRES:
            import psycopg

            with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres",
                                 autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = Database(tmp_path)
    try:
        yield db
    finally:
        db.drop()


def test_sigkilled_history_writer_loses_and_duplicates_nothing(
        fault_redis: RedisServer, database: Database, tmp_path: Path) -> None:
    namespace = f"h{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "REDIS_URL": fault_redis.url, "BLITZQ_NAMESPACE": namespace,
           "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "testproject.settings",
           "BLITZQ_LOG_LEVEL": "INFO", **database.env}
    env.pop("BLITZQ_TEST_DB", None)  # the writer uses this test's own database
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, cwd=ROOT, check=True,
                   timeout=120)
    broker = RedisBroker(fault_redis.url, namespace=namespace, event_details=True)
    client = Client(broker, store_results=True)
    tasks = register(client)
    processes: list[Process] = []
    try:
        worker = Process([sys.executable, "-m", "blitzq_django.engine", "worker",
                          "tests.fault.test_history_kill:make_client", "--concurrency", "20"],
                         env, tmp_path / "worker.log")
        processes.append(worker)
        wait_until(lambda: " serving " in worker.text(), 20, 0.05, "the worker to serve")

        def writer() -> Process:
            p = Process([*manage, "runhistory", "--batch", "150", "-v", "2"], env,
                        tmp_path / f"writer{len(processes)}.log")
            processes.append(p)
            return p

        current = writer()
        expected: dict[str, tuple[str, list[int]]] = {}
        kills = 0
        pending_at_kills: list[int] = []
        plain = redis.Redis.from_url(fault_redis.url)
        events_key = broker.keys.queue("default").events

        def in_hand() -> int:
            """Events delivered to the writers' group and not acknowledged."""
            try:
                return int(plain.xpending(events_key, GROUP)["pending"])
            except redis.ResponseError:  # no group yet
                return 0

        for chunk in range(TASKS // 100):
            calls = [(chunk * 100 + i, i) for i in range(100)]
            handles = tasks["add"].enqueue_many([(a, b) for a, b in calls[:90]])
            expected.update({h.id: ("succeeded", [a, b]) for h, (a, b) in
                             zip(handles, calls[:90], strict=True)})
            for a, _ in calls[90:]:
                expected[tasks["refuse"].enqueue(a).id] = ("failed", [a])
            # Kill the writer while it works (after chunks 6, 12 and 18): when it has
            # written rows and holds a batch it has not acknowledged (read, maybe
            # committed): the window a crash must not lose nor double.
            if chunk in (6, 12, 18):
                floor = database.count()

                def frozen_holding(f: int = floor, p: Process = current) -> bool:
                    # Looked at while the writer is stopped, so what is seen is what the
                    # kill finds (a writer that runs on may ack between look and kill).
                    p.process.send_signal(signal.SIGSTOP)
                    if database.count(timeout=0.2) > f and in_hand() > 0:
                        return True
                    p.process.send_signal(signal.SIGCONT)
                    return False

                wait_until(frozen_holding, 30, 0.002,
                           "the writer to write rows and hold a batch")
                pending_at_kills.append(in_hand())
                current.process.send_signal(signal.SIGKILL)
                current.kill()
                kills += 1
                current = writer()
        assert kills == KILLS

        def all_final() -> bool:
            rows = database.rows() if database.count() else []
            return (len(rows) >= len(expected)
                    and all(r[1] in ("succeeded", "failed") for r in rows))

        wait_until(all_final, 120, 0.2, "every task's row to be final")
        rows = database.rows()
        by_id: dict[str, tuple[Any, ...]] = {}
        duplicated = 0
        for row in rows:
            if row[0] in by_id:
                duplicated += 1
            by_id[row[0]] = row
        lost = [i for i in expected if i not in by_id]
        extra = [i for i in by_id if i not in expected]
        wrong = [i for i, (state, args) in expected.items()
                 if i in by_id and (by_id[i][1], by_id[i][2]) != (state, args)]
        # Each event applied exactly once: a valid path with one terminal event.
        twice = [i for i, r in by_id.items()
                 if not valid_path(e[0] for e in r[4])
                 or sum(e[0] in TERMINAL for e in r[4]) != 1]
        assert all(n > 0 for n in pending_at_kills), pending_at_kills
        REPORTS.append(f"[fault] history writer SIGKILLed {kills}x (unacknowledged events at "
                       f"the kills: {pending_at_kills}): tasks {len(expected)}, "
                       f"rows {len(rows)}, lost {len(lost)}, duplicated {duplicated}, "
                       f"wrong {len(wrong)}, events applied twice {len(twice)}")
        assert (lost, duplicated, extra, wrong, twice) == ([], 0, [], [], [])
        refused = next(r for i, r in by_id.items() if expected[i][0] == "failed")
        assert refused[5] == 2  # retried once, then failed
    finally:
        for p in processes:
            p.kill()
        broker.close()
        with contextlib.suppress(NameError):
            plain.close()
        with contextlib.suppress(Exception):
            plain = redis.Redis.from_url(fault_redis.url)
            plain.flushall()
            plain.close()
