"""Real worker processes and a look at what Redis holds, for the fault scenarios."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from blitzq_django.engine import Client, RedisBroker
from blitzq_django.engine.brokers.redis.keys import GROUP
from blitzq_django.engine.core.deadletter import DeadLetter
from blitzq_django.engine.core.record import Record

from ..support.waiting import wait_until
from . import app
from .ledger import Ledger

ROOT = Path(__file__).absolute().parents[2]
APP = "tests.fault.app:make_client"
# Short leases keep the suite fast: a lost lease is recovered within ~vt + vt/2.
FAST_ARGS = ("--concurrency", "20", "--visibility-timeout", "2", "--max-deliveries", "3",
             "--shutdown-timeout", "5")


class WorkerProcess:
    """``python -m blitzq_django.engine worker ...`` in its own process group, logs to a file."""

    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.log = log
        self.args = args
        self._out = open(log, "ab")  # noqa: SIM115 - closed in wait()/kill()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "blitzq_django.engine", "worker", APP, *args],
            env=env, cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: teardown kills it and its children only
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def children(self) -> list[int]:
        """Pids of the worker processes of a supervisor (``--processes N``)."""
        try:
            raw = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in raw.split()]

    def wait_ready(self, processes: int = 1, timeout: float = 15.0) -> None:
        wait_until(lambda: self.text().count(" serving ") >= processes or not self.alive(),
                   timeout, interval=0.05, message=f"worker {self.pid} to serve")
        assert self.alive(), f"worker exited early:\n{self.text()}"

    def signal(self, signum: int) -> None:
        if self.alive():
            os.kill(self.pid, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._out.close()

    def kill(self) -> None:
        """SIGKILL this process and every process of its group (supervised children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.process.wait(10)
        self._out.close()


def kill_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def pid_gone(pid: int) -> bool:
    """True once ``pid`` exited (zombies count as gone: their parent reaps them later)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@dataclass
class Scenario:
    """One scenario's world: a namespace on a Redis, a ledger, worker processes, a producer."""

    url: str
    tmp: Path
    namespace: str = field(default_factory=lambda: f"f{uuid.uuid4().hex[:10]}")
    queue: str = "default"
    workers: list[WorkerProcess] = field(default_factory=list)
    mode: str = "reliable"  # the delivery mode of producer and workers alike

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.tmp / "ledger.jsonl")
        self.broker = RedisBroker(self.url, namespace=self.namespace, mode=self.mode)
        self.client = Client(self.broker, store_results=True)
        self.tasks: dict[str, Any] = app.register(self.client)
        self.redis = redis.Redis.from_url(self.url)
        self.keys = self.broker.keys.queue(self.queue)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "REDIS_URL": self.url, "BLITZQ_NAMESPACE": self.namespace,
                "LEDGER": str(self.ledger.path), "PYTHONPATH": str(ROOT),
                "BLITZQ_LOG_LEVEL": "INFO", "BLITZQ_MODE": self.mode}

    def worker(self, *args: str, ready: bool = True, processes: int = 1) -> WorkerProcess:
        n = len(self.workers)
        w = WorkerProcess(self.env, self.tmp / f"worker{n}.log", *args)
        self.workers.append(w)
        if ready:
            w.wait_ready(processes)
        return w

    def close(self) -> None:
        for w in self.workers:
            w.kill()
        self.broker.close()
        self.redis.close()

    # -- what Redis holds --------------------------------------------------------

    def pending(self) -> list[dict[str, Any]]:
        """Entries delivered and not acknowledged: id, consumer, idle ms, delivery count."""
        try:
            rows = self.redis.xpending_range(self.keys.stream, GROUP, "-", "+", 10_000)
        except redis.ResponseError:  # no group yet
            return []
        return [{"id": r["message_id"].decode(), "consumer": r["consumer"].decode(),
                 "idle": r["time_since_delivered"], "count": r["times_delivered"]} for r in rows]

    def stream_len(self) -> int:
        """Messages ready (and, in reliable mode, delivered and not yet acknowledged)."""
        if self.mode == "fast":
            return self.redis.llen(self.keys.list)
        return self.redis.xlen(self.keys.stream)

    def drained(self) -> bool:
        """Nothing ready and nothing delivered-but-unacknowledged."""
        return self.stream_len() == 0 and not self.pending()

    def scheduled(self) -> set[str]:
        return {m.decode() for m in self.redis.zrange(self.keys.schedule, 0, -1)}

    def dead_letters(self) -> dict[str, DeadLetter]:
        raw = self.redis.hgetall(self.keys.dead_letter_data)
        return {k.decode(): DeadLetter.from_bytes(v) for k, v in raw.items()}

    def records(self, ids: list[str]) -> dict[str, Record | None]:
        out: dict[str, Record | None] = {}
        for start in range(0, len(ids), 1000):
            chunk = ids[start:start + 1000]
            values = self.redis.mget([self.keys.record(i) for i in chunk])
            pairs = zip(chunk, values, strict=True)
            out.update({i: Record.from_bytes(v) if v else None for i, v in pairs})
        return out

    def wait_drained(self, ids: list[str], timeout: float, phases: tuple[str, ...] = ("done",),
                     accounted: Iterable[str] = frozenset()) -> float:
        """Wait until every id executed (or is accounted for) and Redis is drained; return when."""
        skip = set(accounted)

        def done() -> bool:
            return set(ids) - skip <= self.ledger.done_ids(phases) and self.drained()

        try:
            wait_until(done, timeout, interval=0.05, message="every message to execute and drain")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.diagnosis(set(ids) - skip, phases)}") from None
        return time.monotonic()

    def diagnosis(self, wanted: set[str], phases: tuple[str, ...] = ("done",)) -> str:
        """What a timed-out wait saw: the ids still missing, where they are, the workers' tails."""
        missing = sorted(wanted - self.ledger.done_ids(phases))
        records = self.records(missing[:20])
        lines = [f"missing {len(missing)} of {len(wanted)}; stream {self.stream_len()};"
                 f" pending {self.pending()[:10]}; scheduled {len(self.scheduled())};"
                 f" dead letters {len(self.dead_letters())}"]
        letters = list(self.dead_letters().items())[:5]
        lines += [f"  dead letter {k}: {d!r}"[:600] for k, d in letters]
        lines += [f"  {i}: {r.state if r else None}" for i, r in records.items()]
        for w in self.workers:
            tail = w.text().splitlines()[-25:]
            lines.append(f"--- worker {w.pid} (alive={w.alive()}) last lines:")
            lines += tail
        return "\n".join(lines)


@dataclass(frozen=True)
class FaultEvent:
    """One injected fault, for classifying what the ledger shows afterwards.

    ``kind``: kill (SIGKILL of a worker), stop / cont (SIGSTOP / SIGCONT of a worker),
    start (a worker process launched), redis_kill / redis_back (Redis SIGKILLed /
    answering again). ``t`` is wall-clock time (time.time(), like the ledger's ``t``).
    """

    kind: str
    t: float
    pid: int = 0


def serving_since(worker: WorkerProcess) -> float | None:
    """Wall-clock time of the worker's ``serving`` log line (None before it logged it)."""
    import datetime

    for line in worker.text().splitlines():
        if " serving " in line:
            stamp = line[:23]  # logging's default asctime: 2025-01-31 12:34:56,789
            try:
                when = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
            except ValueError:
                return time.time()
            return when.timestamp()
    return None
