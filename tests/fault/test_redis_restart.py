"""Scenario 8: Redis (AOF, appendfsync always) is SIGKILLed and restarted mid-run."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from blitzq_django.engine.errors import BlitzqError

from ..support.redis_server import RedisServer
from ..support.waiting import wait_until
from .harness import FAST_ARGS, Scenario
from .ledger import check

pytestmark = pytest.mark.fault

MESSAGES = 600


@pytest.fixture
def volatile_redis():  # type: ignore[no-untyped-def]
    server = RedisServer(appendonly=False).start()
    try:
        yield server
    finally:
        server.stop()


class Producer(threading.Thread):
    """Enqueues MESSAGES messages one at a time, retrying a failed enqueue with backoff.

    A retry reuses the message id: an enqueue that raised may still have been written
    (indeterminate), and the same id makes a second copy recognisable in the ledger.
    """

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(daemon=True)
        self.scenario = scenario
        self.acked: list[str] = []
        self.indeterminate: set[str] = set()
        self.errors = 0

    def run(self) -> None:
        task = self.scenario.tasks["sleep"]
        for _ in range(MESSAGES):
            message_id = uuid.uuid4().hex
            backoff = 0.05
            while True:
                try:
                    self.acked.append(task.options(task_id=message_id).enqueue(0.01).id)
                    break
                except BlitzqError:
                    self.errors += 1
                    self.indeterminate.add(message_id)
                    time.sleep(backoff)  # (noqa: sleep) the producer backs off before retrying
                    backoff = min(backoff * 2, 1.0)
            time.sleep(0.005)  # (noqa: sleep) pacing: about 150 messages a second


def test_redis_restart_loses_no_acknowledged_work(durable_redis: RedisServer,
                                                  tmp_path) -> None:  # type: ignore[no-untyped-def]
    scenario = Scenario(durable_redis.url, tmp_path)
    try:
        workers = [scenario.worker(*FAST_ARGS), scenario.worker(*FAST_ARGS)]
        producer = Producer(scenario)
        producer.start()
        wait_until(lambda: len(producer.acked) >= MESSAGES // 3, 30, interval=0.02,
                   message="a third of the messages to be enqueued")
        # Long attempts in flight on both workers, so their leases need renewing across
        # the outage (and a lease keeper that spins instead of backing off would show).
        long = [h.id for h in scenario.tasks["sleep"].enqueue_many([(4.0,)] * 4)]
        wait_until(lambda: all(scenario.ledger.of(i) for i in long), 10, interval=0.02,
                   message="the long attempts to start")
        durable_redis.kill()
        killed_at = time.monotonic()
        time.sleep(1.0)  # (noqa: sleep) the deliberate outage: Redis stays down for 1 s
        done_before = len(scenario.ledger.done_ids())
        durable_redis.start()
        back_at = time.monotonic()
        resumed = wait_until(lambda: len(scenario.ledger.done_ids()) > done_before
                             and time.monotonic(), 30, interval=0.02,
                             message="workers to resume after the restart")
        producer.join(60)
        assert not producer.is_alive()
        acked = producer.acked + long
        end = scenario.wait_drained(acked, 60)

        assert all(w.alive() for w in workers), "a worker died with Redis"
        logs = "".join(w.text() for w in workers)
        records = scenario.records(acked)
        assert all(r is not None and r.succeeded for r in records.values())
        recovered = len(producer.indeterminate & scenario.ledger.done_ids())
        report = check("8 redis-restart (AOF always)", scenario.ledger, acked,
                       indeterminate=len(producer.indeterminate), recovered=recovered,
                       enqueue_errors=producer.errors, outage_s=round(back_at - killed_at, 2),
                       workers_resumed_s=round(resumed - back_at, 2),
                       drained_after_restart_s=round(end - back_at, 1),
                       worker_warnings=logs.count("WARNING"))
        assert report.lost == 0
        assert report.duplicated <= 2 * 20
        assert resumed - back_at < 10
        # Reconnecting must back off, not spin: a few attempts per second per process.
        outage = back_at - killed_at
        for w in workers:
            upkeep = w.text().count("lease upkeep failed")
            assert upkeep <= 10 * outage + 5, \
                f"worker {w.pid} retried lease upkeep {upkeep} times in a {outage:.1f}s outage"
    finally:
        scenario.close()


def test_redis_restart_without_persistence_loses_everything_but_workers_go_on(
        volatile_redis: RedisServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The documented loss: no persistence, so a restart empties Redis. Workers must notice
    the missing consumer group and serve new messages, even with every slot busy."""
    scenario = Scenario(volatile_redis.url, tmp_path)
    try:
        concurrency = 4
        worker = scenario.worker("--concurrency", str(concurrency), "--visibility-timeout",
                                 "2", "--shutdown-timeout", "5")
        before = [h.id for h in scenario.tasks["sleep"].enqueue_many([(3.0,)] * 10)]
        wait_until(lambda: scenario.ledger.count("start") >= concurrency, 10,
                   message="every slot to be busy")
        volatile_redis.kill()
        volatile_redis.start()  # same port, empty: nothing was persisted
        after = [h.id for h in scenario.tasks["noop"].enqueue_many([(i,) for i in range(20)])]
        try:
            scenario.wait_drained(after, 30)
            stuck = ""
        except AssertionError as exc:
            stuck = str(exc)
        lost_before = sorted(set(before) - scenario.ledger.done_ids())
        # Messages of before the restart are gone by design (no persistence): accounted.
        report = check("8b redis-restart (no persistence)", scenario.ledger, [*before, *after],
                       accounted=before, lost_before_restart=len(lost_before),
                       worker_stuck=bool(stuck))
        assert worker.alive()
        assert not stuck, f"the worker served nothing after Redis came back empty: {stuck}"
        assert report.lost == 0
        assert lost_before, "without persistence the queued messages are gone"
    finally:
        scenario.close()
