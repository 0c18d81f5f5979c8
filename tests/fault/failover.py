"""Master failovers under load, counted from a ledger outside Redis: the shared core of
tests/fault/test_failover.py (a couple of kills, asserts) and bench/failover.py (more
kills, a table).

One run: a Sentinel set or a Redis Cluster of its own (tests/support/topology.py),
worker processes (tests/fault/app.py: every task body appends ``start``/``done`` lines
to the ledger file, fsync'd), and a producer thread enqueueing one message at a time
at a steady pace. Every few seconds the master holding the queue is SIGKILLed; once a
replica has taken over, the dead node is started again as a replica. Then the producer
stops and the workers drain.

What is counted, per the producer's own list (in memory, outside Redis) and the ledger:

- acked: enqueue returned an id (with the replica wait: only once enough replicas
  confirmed it); lost: acked and never ran (must be 0 with the wait);
- indeterminate: enqueue raised (the master died under it, or NotReplicated): the
  message may or may not exist; how many of those ran anyway is reported;
- duplicated: completed runs of the same (id, attempt) beyond the first (a settle or a
  delivery the failover forgot);
- recovery: from the SIGKILL to the first completion of a message enqueued after it
  (so written to, fetched from and settled on the new master).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.crc import key_slot

from blitzq_django.engine import Client, NotReplicated, RedisBroker
from blitzq_django.engine.errors import BlitzqError

from ..support import topology
from .app import register
from .harness import ROOT, WorkerProcess
from .ledger import Ledger, check

#: Worker flags: short leases, so a delivery the failover forgot is recovered quickly.
WORKER_ARGS = ("--concurrency", "20", "--visibility-timeout", "2", "--max-deliveries", "10",
               "--shutdown-timeout", "5")


@dataclass
class Outcome:
    topology: str
    wait: bool
    kills: int
    cut_s: float = 0.0
    delay_s: float = 0.0
    acked: int = 0
    executed: int = 0
    lost: int = 0
    duplicated: int = 0
    indeterminate: int = 0
    indeterminate_ran: int = 0
    not_replicated: int = 0
    recovery_s: list[float] = field(default_factory=list)
    failover_s: list[float] = field(default_factory=list)
    lost_ids: list[str] = field(default_factory=list)
    #: lost ids whose enqueue was sent after the last kill (a failover forgets only what
    #: the dead master acknowledged: must be 0 with or without the wait)
    lost_after_last_kill: int = 0

    def row(self) -> dict[str, Any]:
        return {
            "topology": self.topology, "replica wait": "on" if self.wait else "off",
            "replicas cut before kill": f"{self.cut_s:g} s" if self.cut_s else "no",
            "backlog": f"{self.delay_s:g} s delay" if self.delay_s else "none",
            "kills": self.kills, "acked": self.acked, "lost": self.lost,
            "duplicated": self.duplicated, "indeterminate": self.indeterminate,
            "of which ran": self.indeterminate_ran, "NotReplicated": self.not_replicated,
            "failover s (median)": _median(self.failover_s),
            # with a delay, the first completion after a kill waits for it: not shown
            "kill to first completion s (median)":
                "-" if self.delay_s else _median(self.recovery_s),
            "(max)": round(max(self.recovery_s), 2) if self.recovery_s and not self.delay_s
            else "-",
        }


def _nowhere() -> int:
    """A loopback port where nothing listens (taken free, then let go)."""
    return topology.free_port()


def _median(values: list[float]) -> Any:
    return round(statistics.median(values), 2) if values else "-"


class Producer(threading.Thread):
    """Enqueues ``noop`` messages one at a time, ``rate`` a second, each with an id of its
    own; an enqueue that raised is noted as indeterminate and not tried again (a retry
    would blur which enqueue the ledger line belongs to)."""

    def __init__(self, task: Any, rate: float, delay_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.task, self.period = task, 1.0 / rate
        self.delay_s = delay_s
        self.acked: dict[str, float] = {}  # id -> time.time() enqueue returned
        #: id -> time.time() its enqueue was sent: "after a kill" is judged by this (the
        #: thread may record the return of an enqueue acknowledged before the kill after it)
        self.sent: dict[str, float] = {}
        self.indeterminate: set[str] = set()
        self.not_replicated = 0
        self.errors = 0
        self.last_error = ""
        self.stopping = threading.Event()

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.stopping.is_set():
            message_id = uuid.uuid4().hex
            self.sent[message_id] = time.time()
            try:
                options = {"delay": self.delay_s} if self.delay_s else {}
                self.task.options(task_id=message_id, **options).enqueue(message_id)
                self.acked[message_id] = time.time()
            except NotReplicated:
                self.not_replicated += 1
                self.indeterminate.add(message_id)
            except BlitzqError as exc:
                self.errors += 1
                self.last_error = str(exc)
                self.indeterminate.add(message_id)
                # the master is gone: back off a little instead of spinning
                self.stopping.wait(0.05)
            next_at = max(next_at + self.period, time.monotonic() - 1.0)
            self.stopping.wait(max(next_at - time.monotonic(), 0.0))

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


class World:
    """One topology, its workers and its producer."""

    def __init__(self, kind: str, tmp: Path, wait: tuple[int, int] | None,
                 workers: int = 2, down_after_ms: int = 1000) -> None:
        self.kind, self.tmp, self.wait = kind, tmp, wait
        self.topology: Any = (
            topology.SentinelSet(down_after_ms=down_after_ms,
                                 failover_timeout_ms=3 * down_after_ms)
            if kind == "sentinel" else topology.Cluster(node_timeout_ms=down_after_ms + 500))
        self.topology.start()
        self.url = self.topology.url() if kind == "sentinel" else self.topology.url
        self.namespace = f"f{uuid.uuid4().hex[:10]}"
        self.ledger = Ledger(tmp / "ledger.jsonl")
        self.broker = RedisBroker(self.url, namespace=self.namespace, replica_wait=wait)
        self.client = Client(self.broker, store_results=True)
        self.tasks = register(self.client)
        self.slot = key_slot(self.broker.keys.queue("default").stream.encode())
        self.workers = [self._worker(n) for n in range(workers)]
        for worker in self.workers:
            worker.wait_ready(timeout=30)

    @property
    def env(self) -> dict[str, str]:
        env = {**os.environ, "REDIS_URL": self.url, "BLITZQ_NAMESPACE": self.namespace,
               "LEDGER": str(self.ledger.path), "PYTHONPATH": str(ROOT),
               "BLITZQ_LOG_LEVEL": "INFO"}
        if self.wait:
            env["BLITZQ_REPLICA_WAIT"] = f"{self.wait[0]},{self.wait[1]}"
        return env

    def _worker(self, n: int) -> WorkerProcess:
        return WorkerProcess(self.env, self.tmp / f"worker{n}.log", *WORKER_ARGS)

    def master(self) -> Any:
        if self.kind == "sentinel":
            return self.topology.master()
        return self.topology.master_of_slot(self.slot)

    def kill_master(self, cut_s: float = 0.0) -> Any:
        """SIGKILL the queue's master. With ``cut_s`` (Sentinel only), its replicas are
        first pointed at a port where nothing listens (REPLICAOF) for that long, as a
        network partition between them would: the writes the master acknowledges
        meanwhile reach no replica, the window asynchronous replication leaves, made
        wide enough to see on loopback. The sentinels then promote one of them."""
        if cut_s:
            master = self.master()
            for node in self.topology.servers:
                if node is not master and node.alive:
                    node.call("REPLICAOF", topology.HOST, _nowhere())
            time.sleep(cut_s)  # (noqa: sleep) the deliberate window before the kill
        if self.kind == "sentinel":
            return self.topology.kill_master()
        return self.topology.kill_master(self.slot)

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        with contextlib.suppress(Exception):
            self.broker.close()
        self.topology.stop()


@contextlib.contextmanager
def world(kind: str, tmp: Path, wait: tuple[int, int] | None,
          workers: int = 2, down_after_ms: int = 1000) -> Iterator[World]:
    w = World(kind, tmp, wait, workers, down_after_ms)
    try:
        yield w
    finally:
        w.close()


def run(kind: str, tmp: Path, *, wait: tuple[int, int] | None, kills: int, rate: float = 200,
        steady_s: float = 2.0, drain_s: float = 90.0, label: str = "",
        cut_s: float = 0.0, delay_s: float = 0.0, down_after_ms: int = 1000) -> Outcome:
    """One run: ``kills`` SIGKILLs of the queue's master under a producer at ``rate``
    enqueues a second, ``steady_s`` of load before each; ``cut_s``: see
    World.kill_master(); ``delay_s``: every message is enqueued with that delay, so
    the last ``delay_s`` of messages wait in the schedule at each kill (a backlog: a
    message that already ran counts as run, whatever Redis forgets after);
    ``down_after_ms``: how long a master must be silent before it is failed over
    (Sentinel's down-after-milliseconds; a cluster's node timeout is 500 ms more)."""
    if cut_s and kind != "sentinel":
        raise ValueError("cut_s: Sentinel only (a cluster replica takes no REPLICAOF)")
    tmp.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(kind, wait is not None, kills, cut_s=cut_s, delay_s=delay_s)
    with world(kind, tmp, wait, down_after_ms=down_after_ms) as w:
        producer = Producer(w.tasks["noop"], rate, delay_s)
        producer.start()
        killed: list[float] = []
        try:
            for _ in range(kills):
                _wait_for_progress(w, producer, steady_s)
                dead = w.kill_master(cut_s)
                killed_at = time.time()  # SIGKILL is kill_master()'s last step
                killed.append(killed_at)
                w.topology.wait_failover(dead, timeout=60)
                outcome.failover_s.append(time.time() - killed_at)
                # The dead node comes back as a replica meanwhile: on a cluster of one
                # replica per master the promoted master has none until then, and with
                # the replica wait no enqueue can be confirmed before it.
                first: list[Any] = []
                look = threading.Thread(target=_look_into, args=(
                    first, w, producer, killed_at))
                look.start()
                w.topology.restart(dead, timeout=60)
                look.join(90)
                if not first or first[0] is None:
                    raise AssertionError("no message enqueued after the kill completed "
                                         "within 60 s")
                outcome.recovery_s.append(first[0])
            _wait_for_progress(w, producer, steady_s)
        finally:
            producer.stop()
        acked = list(producer.acked)
        _drain(w, acked, drain_s)
        report = check(label or f"failover {kind} wait={'on' if wait else 'off'}", w.ledger,
                       acked, kills=kills, indeterminate=len(producer.indeterminate),
                       enqueue_errors=producer.errors, not_replicated=producer.not_replicated)
        done = w.ledger.done_ids()
        outcome.acked, outcome.executed = report.enqueued, report.executed
        outcome.lost, outcome.duplicated = report.lost, report.duplicated
        outcome.lost_ids = report.lost_ids
        last_kill = max(killed, default=0.0)
        outcome.lost_after_last_kill = sum(
            1 for i in set(acked) - done if producer.sent[i] > last_kill)
        outcome.indeterminate = len(producer.indeterminate)
        outcome.indeterminate_ran = len(producer.indeterminate & done)
        outcome.not_replicated = producer.not_replicated
        for worker in w.workers:
            assert worker.alive(), f"a worker died in the failovers:\n{worker.text()[-3000:]}"
    return outcome


def _wait_for_progress(w: World, producer: Producer, seconds: float) -> None:
    """``seconds`` of load, after which tasks are completing (raises if none did)."""
    before = len(w.ledger.done_ids())
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or len(w.ledger.done_ids()) <= before:
        if time.monotonic() > deadline + 60:
            raise AssertionError("no task completed for 60 s under load")
        producer.stopping.wait(0.1)


def _look_into(out: list[Any], w: World, producer: Producer, killed_at: float) -> None:
    out.append(_first_completion_after(w, producer, killed_at, quiet=True))


def _first_completion_after(w: World, producer: Producer, killed_at: float,
                            timeout: float = 60.0, quiet: bool = False) -> float | None:
    """Seconds from ``killed_at`` to the first ``done`` of a message enqueued after it
    (``quiet``: None rather than an AssertionError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        later = {i for i, at in list(producer.acked.items()) if at > killed_at}
        times = [x.t for x in w.ledger.lines() if x.phase == "done" and x.id in later]
        if times:
            return round(min(times) - killed_at, 3)
        time.sleep(0.05)  # (noqa: sleep) polling the ledger file for a condition
    if quiet:
        return None
    raise AssertionError(f"no message enqueued after the kill completed within {timeout} s")


def _drain(w: World, acked: list[str], timeout: float, quiet_s: float = 8.0) -> None:
    """Until every acked message ran, nothing new ran for ``quiet_s`` (what is left was
    lost: the delay, 1 s, and a lease, 2 s, are long over), or ``timeout``."""
    deadline = time.monotonic() + timeout
    wanted = set(acked)
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        lines = len(w.ledger.lines())
        if lines != seen:
            seen, since = lines, time.monotonic()
        done = w.ledger.done_ids()
        if wanted <= done or time.monotonic() - since > quiet_s:
            break
        time.sleep(0.2)  # (noqa: sleep) polling the ledger file for a condition
    # a few more seconds: a duplicate of a forgotten settle runs after its lease expires
    time.sleep(3.0)  # (noqa: sleep) the lease (2 s) of a forgotten delivery runs out
