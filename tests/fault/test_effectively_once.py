"""Effectively-once database effects under SIGKILL: a worker killed right after the task's
database commit and before Redis heard of the outcome; the redelivery must not repeat the
effect.

Real ``manage.py runworker`` processes of the test project run
``shop.tasks.record_delivery`` (effectively_once=True), whose body inserts one
``Delivery`` row per run, with no unique constraint. For the references listed in
BLITZQ_TEST_KILL_AFTER_COMMIT the body registers ``transaction.on_commit(SIGKILL)``:
the worker dies after the commit, holding the message unacknowledged, and another
worker recovers it once its lease expires. The database is PostgreSQL when one is
reachable at 127.0.0.1:5432 (unless BLITZQ_FAULT_DB=sqlite), else an SQLite file; it is
created and migrated here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from blitzq_django.engine import Client, RedisBroker

from ..support.redis_server import RedisServer
from ..support.waiting import wait_until
from .harness import ROOT, pid_gone
from .ledger import REPORTS

pytestmark = [pytest.mark.fault, pytest.mark.slow]

POSTGRES = "postgres://postgres@127.0.0.1:5432/"
DB_ENV = ("DATABASE_URL", "BLITZQ_TEST_DB", "BLITZQ_SQLITE", "BLITZQ_TEST_KILL_AFTER_COMMIT")


def postgres_reachable() -> bool:
    if os.environ.get("BLITZQ_FAULT_DB") == "sqlite":  # forced: the SQLite variant
        return False
    try:
        import psycopg

        psycopg.connect(POSTGRES + "postgres", connect_timeout=2).close()
        return True
    except Exception:  # noqa: BLE001 - any failure means: use SQLite
        return False


@dataclass
class FaultDatabase:
    """A fresh, migrated database of the test project for worker processes."""

    vendor: str
    env: dict[str, str]
    name: str

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.vendor == "postgresql":
            import psycopg

            with psycopg.connect(POSTGRES + self.name) as conn:
                return list(conn.execute(sql).fetchall())
        with contextlib.closing(sqlite3.connect(self.name, timeout=20)) as conn:
            return list(conn.execute(sql).fetchall())


def base_env(redis_url: str, namespace: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DB_ENV}
    return {**env, "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
            "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "testproject.settings",
            # DEBUG off: runworker then runs the worker in this very process (no
            # autoreloader parent), so the task's SIGKILL kills the worker itself.
            "DJANGO_DEBUG": "0"}


@contextlib.contextmanager
def fault_database(tmp: Path) -> Iterator[FaultDatabase]:
    """PostgreSQL when reachable (a database of its own), else an SQLite file."""
    if postgres_reachable():
        import psycopg

        name = f"blitzq_fault_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(POSTGRES + "postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        db = FaultDatabase("postgresql", {"DATABASE_URL": POSTGRES + name}, name)
    else:
        path = str(tmp / "fault.sqlite3")
        db = FaultDatabase("sqlite", {"BLITZQ_SQLITE": path}, path)
    try:
        env = {**{k: v for k, v in os.environ.items() if k not in DB_ENV}, **db.env,
               "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT,
                       env=env, check=True, timeout=120)
        yield db
    finally:
        if db.vendor == "postgresql":
            import psycopg

            with psycopg.connect(POSTGRES + "postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')


@dataclass
class DjangoProcess:
    """``manage.py <command>`` in its own process group, its output in a log file."""

    args: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] = field(init=False)

    def __post_init__(self) -> None:
        self._out = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([sys.executable, "manage.py", *self.args], cwd=ROOT,
                                        env=self.env, stdout=self._out,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = 30.0) -> None:
        wait_until(lambda: needle in self.text() or not self.alive(), timeout, interval=0.05,
                   message=f"{needle!r} in the log of {self.args[0]}")
        assert self.alive(), f"{self.args[0]} exited early:\n{self.text()}"

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL of the group if it does not exit in time."""
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.process.wait(10)
        self._out.close()
        return self.process.returncode


WORKER_ARGS = ["runworker", "--concurrency", "4", "--visibility-timeout", "2",
               "--max-deliveries", "30", "--shutdown-timeout", "5"]


@pytest.fixture
def fault_db(tmp_path: Path) -> Iterator[FaultDatabase]:
    with fault_database(tmp_path) as db:
        yield db


def test_sigkill_after_commit_before_ack_does_not_repeat_the_effect(
        fault_redis: RedisServer, fault_db: FaultDatabase, tmp_path: Path) -> None:
    from testproject.shop import tasks

    namespace = f"f{uuid.uuid4().hex[:10]}"
    broker = RedisBroker(fault_redis.url, namespace=namespace)
    client = Client(broker, store_results=True)
    n, every = 40, 8
    refs = [f"r{i}" for i in range(n)]
    doomed = [r for i, r in enumerate(refs) if i % every == 0]
    handles = {ref: client.enqueue(tasks.record_delivery.spec, (ref,)) for ref in refs}
    env = {**base_env(fault_redis.url, namespace), **fault_db.env,
           "BLITZQ_TEST_KILL_AFTER_COMMIT": ",".join(doomed)}
    workers: list[DjangoProcess] = []
    kills = 0

    def finished() -> bool:
        records = [broker.get_record("default", h.id) for h in handles.values()]
        return all(r is not None and r.is_final for r in records)

    try:
        # Workers that kill themselves after the commit of a doomed message, one after the
        # other: each recovers what the last one held (leases of 2 s) and dies at the next
        # doomed message it commits, until every message has a final record.
        for round_ in range(len(doomed) + 3):
            worker = DjangoProcess(WORKER_ARGS, env, tmp_path / f"worker{round_}.log")
            workers.append(worker)
            wait_until(lambda w=worker: not w.alive() or finished(), 60, interval=0.05,
                       message="the worker to die after a commit, or every message to finish")
            if worker.alive():
                break
            assert worker.process.returncode == -signal.SIGKILL, worker.text()
            kills += 1
        assert finished(), "messages left unfinished after the last round"
        for w in workers:
            w.stop()
        assert all(pid_gone(w.pid) for w in workers)
        rows = dict(fault_db.rows("SELECT reference, count(*) FROM shop_delivery "
                                  "GROUP BY reference"))
        effects = fault_db.rows("SELECT count(*) FROM blitzq_django_taskeffect")[0][0]
        counts = Counter({ref: int(rows.get(ref, 0)) for ref in refs})
        lost = [r for r in refs if counts[r] == 0]
        duplicated = sum(c - 1 for c in counts.values() if c > 1)
        line = (f"[fault] effectively_once ({fault_db.vendor}): enqueued={n} "
                f"lost={len(lost)} duplicated={duplicated} kills_after_commit={kills} "
                f"effect_rows={effects}")
        print(line, flush=True)
        REPORTS.append(line)
        assert kills >= 2, "the scenario must kill workers after their commit"
        assert lost == [] and duplicated == 0
        assert effects == n
        # Each message's result is the id of its one row, also for those whose first
        # run was killed after the commit (the redelivery returned the stored result).
        pks = dict(fault_db.rows("SELECT reference, id FROM shop_delivery"))
        for ref, handle in handles.items():
            assert handle.result(timeout=5) == pks[ref]
    finally:
        for w in workers:
            w.stop(timeout=5)
        broker.close()
