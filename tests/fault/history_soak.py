"""A history soak: N tasks through real ``manage.py runworker`` processes, each with its
history writer (a child process, the default), and a count of the rows they leave.

Used by tests/fault/test_history_soak.py (20,000 tasks, in CI) and bench/history_soak.py
(200,000 on PostgreSQL). The producer is this process (a plain engine client, as a web
process enqueues); the workers, their writers and the database are real and separate. The
rows are read without Django, from a database of the run's own (a SQLite file, or a
PostgreSQL database created and dropped here).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from blitzq_django.engine import Client, RedisBroker

ROOT = Path(__file__).absolute().parents[2]
TASK = "testproject.shop.tasks.noop"
FINAL = ("succeeded", "failed", "dead_lettered", "cancelled", "expired")
POSTGRES_DSN = "host=127.0.0.1 user=postgres"


def postgres_reachable() -> bool:
    try:
        import psycopg

        with psycopg.connect(f"{POSTGRES_DSN} dbname=postgres", connect_timeout=3):
            return True
    except Exception:  # noqa: BLE001 - not installed, not running, not allowed
        return False


class Database:
    """A database of the run's own, read without Django."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        if kind == "postgres":
            import psycopg

            self.name = f"blitzq_soak_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(f"{POSTGRES_DSN} dbname=postgres", autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.name}"')
            self.env = {"DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{self.name}"}
        else:
            self.path = tmp / "history.sqlite3"
            self.env = {"BLITZQ_SQLITE": str(self.path)}

    def states(self) -> dict[str, int]:
        """Rows by state ({} while the table is not there or is locked)."""
        query = "SELECT state, COUNT(*) FROM blitzq_django_taskrecord GROUP BY state"
        try:
            if self.kind == "postgres":
                import psycopg

                with psycopg.connect(f"{POSTGRES_DSN} dbname={self.name}") as conn:
                    return dict(conn.execute(query).fetchall())
            with contextlib.closing(sqlite3.connect(self.path, timeout=5)) as conn:
                return dict(conn.execute(query).fetchall())
        except Exception:  # noqa: BLE001 - not migrated yet, or busy: nothing to count
            return {}

    def duplicated(self) -> int:
        query = ("SELECT COUNT(*) - COUNT(DISTINCT task_id) FROM blitzq_django_taskrecord")
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(f"{POSTGRES_DSN} dbname={self.name}") as conn:
                return int(conn.execute(query).fetchone()[0])  # type: ignore[index]
        with contextlib.closing(sqlite3.connect(self.path, timeout=20)) as conn:
            return int(conn.execute(query).fetchone()[0])

    def drop(self) -> None:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(f"{POSTGRES_DSN} dbname=postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


@dataclass
class Result:
    tasks: int
    workers: int
    database: str
    events_maxlen: int
    states: dict[str, int] = field(default_factory=dict)
    duplicated: int = 0
    lost: int = 0  # counted by the writer (history health)
    gaps: int = 0  # Redis 6.2: trims of unread events it cannot count
    unwritable: int = 0
    enqueue_s: float = 0.0
    ran_s: float = 0.0  # from the first enqueue to the last task's final record
    written_s: float = 0.0  # from the first enqueue to the last row final
    peak_stream: int = 0  # the longest the events stream got
    peak_unread: int = 0  # the most events the writer was behind

    @property
    def rows(self) -> int:
        return sum(self.states.values())

    @property
    def final(self) -> int:
        return sum(n for state, n in self.states.items() if state in FINAL)

    def line(self) -> str:
        return (f"{self.tasks} tasks, {self.workers} runworkers, {self.database}, "
                f"EVENTS_MAXLEN {self.events_maxlen}: rows {self.rows} (final {self.final}, "
                f"{dict(sorted(self.states.items()))}), duplicated {self.duplicated}, "
                f"lost {self.lost} (counted; gaps {self.gaps}), unwritable {self.unwritable}; "
                f"enqueued in "
                f"{self.enqueue_s:.1f} s, ran in {self.ran_s:.1f} s, rows final after "
                f"{self.written_s:.1f} s; the stream peaked at {self.peak_stream} events, "
                f"the writer at {self.peak_unread} behind")


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for p in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    for p in processes:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def run(*, tasks: int, database: Database, redis_url: str, tmp: Path, workers: int = 2,
        events_maxlen: int, hard_maxlen: int | None = None, concurrency: int = 50,
        chunk: int = 1000, deadline_s: float = 600.0,
        say: Callable[[str], Any] = lambda text: None) -> Result:
    """Enqueue ``tasks`` no-op tasks in chunks, as fast as Redis takes them, while
    ``workers`` runworkers drain them, and wait until every row is final (or the deadline:
    the result says what was there)."""
    namespace = f"soak{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
           "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "tests.fault.history_settings",
           "EVENTS_MAXLEN": str(events_maxlen), "DJANGO_DEBUG": "0", **database.env}
    env.pop("BLITZQ_TEST_DB", None)
    if database.kind != "postgres":
        env.pop("DATABASE_URL", None)
    if hard_maxlen is not None:
        env["EVENTS_HARD_MAXLEN"] = str(hard_maxlen)
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, cwd=ROOT, check=True, timeout=300)
    result = Result(tasks=tasks, workers=workers, database=database.kind,
                    events_maxlen=events_maxlen)
    broker = RedisBroker(redis_url, namespace=namespace, event_details=True,
                         events_maxlen=max(events_maxlen, hard_maxlen or 1_000_000))
    client = Client(broker, store_results=True)
    task = client.task(name=TASK)(lambda: None)
    plain = redis.Redis.from_url(redis_url)
    keys = broker.keys.queue("default")
    pattern = broker.keys.all_keys_pattern()
    processes: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for n in range(workers):
            log = open(tmp / f"runworker{n}.log", "wb")  # noqa: SIM115 - closed below
            logs.append(log)
            processes.append(subprocess.Popen(
                [*manage, "runworker", "--concurrency", str(concurrency), "--no-reload"],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True))

        def watch() -> None:
            result.peak_stream = max(result.peak_stream, int(plain.xlen(keys.events)))
            with contextlib.suppress(redis.ResponseError):
                for group in plain.xinfo_groups(keys.events):
                    if group["name"] == b"blitzq-history" and group.get("lag") is not None:
                        result.peak_unread = max(result.peak_unread, int(group["lag"]))

        began = time.monotonic()
        ids: list[str] = []
        for start in range(0, tasks, chunk):
            ids += [h.id for h in task.enqueue_many([() for _ in range(start, min(
                tasks, start + chunk))])]
            watch()
        result.enqueue_s = time.monotonic() - began
        say(f"enqueued {tasks} in {result.enqueue_s:.1f} s")
        deadline = began + deadline_s
        last_say = 0.0
        ran = False
        while time.monotonic() < deadline:
            watch()
            if not ran:
                stats = client.queue_stats("default")
                if stats.ready == 0 and stats.in_flight == 0 and stats.scheduled == 0:
                    ran, result.ran_s = True, time.monotonic() - began
            states = database.states()
            done = sum(n for s, n in states.items() if s in FINAL)
            if time.monotonic() - last_say > 10:
                last_say = time.monotonic()
                say(f"{time.monotonic() - began:.0f} s: {states}")
            if done >= tasks:
                break
            for p in processes:
                if p.poll() is not None:
                    raise RuntimeError(f"a runworker exited with {p.returncode}: see "
                                       f"{tmp}/runworker*.log")
            time.sleep(0.5)  # (noqa: sleep) the poll step of a deadline-bounded wait
        result.written_s = time.monotonic() - began
        result.states = database.states()
        result.duplicated = database.duplicated()
        health = plain.hgetall(keys.history_health)
        result.lost = int(health.get(b"lost", 0))
        result.gaps = int(health.get(b"gaps", 0))
        result.unwritable = int(health.get(b"unwritable", 0))
        return result
    finally:
        _stop(processes)
        for log in logs:
            log.close()
        broker.close()
        with contextlib.suppress(Exception):
            for key in plain.scan_iter(match=pattern, count=1000):
                plain.delete(key)
        plain.close()
