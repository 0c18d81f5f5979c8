"""Regressions found by fault injection and hostile input (the hardening issue).

Each test here failed on the worker that kept its state in five dicts: recovery
starved by a backlog, a worker re-running its own message, a slot leaked by two
runs of one message, a false "lease lost" after a re-sent settlement, a busy
lease keeper while draining, outcomes that could not be settled, and a settle
script that failed half-way on a long list.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
import pytest_asyncio

from blitzq_django.engine import BrokerUnavailable, Client, RedisBroker, Retry, Worker
from blitzq_django.engine.brokers.base import DEAD, Delivery, Settlement
from blitzq_django.engine.core import record as states
from blitzq_django.engine.core.deadletter import DeadLetter

from ..support.waiting import await_until
from .helpers import FAST, background_worker, dead_letter_ids, inject, raw_redis

LEASE = {"visibility_timeout": 1.0}  # recovery every 0.5 s, renewal every 1/3 s
WORK_S = 0.02  # what one task of a backlog takes


class FaultyBroker(RedisBroker):
    """The real broker, with settle writes that can be made to fail (Redis out of reach)
    or to lose their reply after Redis applied them, and renewals counted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stalled = False
        self.stalled_calls = 0
        self.lose_next_reply = False
        self.renewals = 0

    async def settle(self, consumer: str, settlements: Sequence[Settlement], now_ms: int,
                     token: str | None = None) -> list[bool]:
        if self.stalled:
            self.stalled_calls += 1
            raise BrokerUnavailable("settle stalled by the test")
        replies = await super().settle(consumer, settlements, now_ms, token)
        if self.lose_next_reply:
            self.lose_next_reply = False
            raise BrokerUnavailable("reply lost by the test (Redis applied the write)")
        return replies

    async def renew(self, consumer: str, deliveries: Sequence[Delivery]) -> list[Delivery]:
        self.renewals += 1
        return await super().renew(consumer, deliveries)


@pytest_asyncio.fixture
async def faulty(redis_broker: RedisBroker) -> Any:
    broker = FaultyBroker(redis_broker.url, namespace=redis_broker.keys.namespace)
    yield broker
    await broker.aclose()
    broker.close()


# -- 1. recovery under a backlog ---------------------------------------------------------


@pytest.mark.asyncio
async def test_orphan_starts_ahead_of_a_backlog(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)
    started: dict[int, float] = {}

    @client.task(name="work")
    async def work(i: int) -> None:
        started.setdefault(i, time.monotonic())
        await asyncio.sleep(WORK_S)  # the task body's own work

    work.enqueue(-1)  # the orphan: delivered to a worker that dies at once
    await redis_broker.prepare(["default"])
    assert len(await redis_broker.fetch(["default"], "dead-worker", 1, 10)) == 1
    orphaned_at = time.monotonic()
    work.enqueue_many([(i,) for i in range(2000)])  # ~20 s of work for 2 slots

    async with background_worker(client, concurrency=2, **LEASE) as worker:
        bound = worker.config.visibility_timeout + worker.config.recovery_s + 1.0
        await await_until(lambda: -1 in started, bound + 5, message="the orphan to start")
    delay = started[-1] - orphaned_at
    assert delay <= bound, f"orphan started {delay:.2f} s after its worker died (> {bound})"
    assert len(started) < 2000, "the backlog ran dry first: this test proves nothing"


# -- 2. a worker never re-runs its own message ------------------------------------------


@pytest.mark.asyncio
async def test_a_settlement_waiting_for_redis_keeps_its_lease(faulty: FaultyBroker,
                                                              caplog: Any) -> None:
    client = Client(faulty)
    runs: list[int] = []

    @client.task(name="once")
    async def once() -> str:
        runs.append(1)
        return "done"

    async with background_worker(client, **LEASE) as worker:
        faulty.stalled = True
        handle = await once.aenqueue()
        await await_until(lambda: runs, 5, message="the attempt")
        # Backoff 0.05, 0.1, ... 1.6 s: seven refused writes span > 3 visibility timeouts.
        await await_until(lambda: faulty.stalled_calls >= 7, 10, message="a long stall")
        faulty.stalled = False
        record = await handle.aresult(timeout=5)
    assert record == "done"
    assert runs == [1], "the worker recovered its own settling message and ran it again"
    assert worker.stats.lost_leases == 0
    assert "recovered" not in caplog.text


@pytest.mark.asyncio
async def test_a_reclaimed_entry_running_here_is_not_run_twice(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)
    release = threading.Event()
    runs: list[str] = []

    @client.task(name="long")
    def long() -> str:
        runs.append("run")
        release.wait(30)
        return "finished"

    @client.task(name="probe")
    async def probe() -> int:
        return 1

    async with background_worker(client, concurrency=2, **LEASE) as worker:
        handle = long.enqueue()
        await await_until(lambda: runs, 5, message="the long attempt to start")
        # Worker B takes it over (this worker paused past its lease), then dies: this worker
        # recovers the entry while its own first run still goes on.
        stream = redis_broker.keys.queue("default").stream
        (entry,) = [e for e, _p in raw_redis(redis_broker).xrange(stream)]
        raw_redis(redis_broker).xclaim(stream, "workers", "worker-b", 0, [entry])
        await await_until(lambda: any(h.lost for h in worker.inflight), 5,
                          message="the renewal to see the lease lost")
        await await_until(lambda: not any(h.lost for h in worker.inflight), 10,
                          message="the entry recovered back")
        release.set()
        assert await handle.aresult(timeout=5) == "finished"
        # Both slots are free again: two probes run at once.
        probes = [await probe.aenqueue() for _ in range(2)]
        assert [await p.aresult(timeout=5) for p in probes] == [1, 1]
        await await_until(lambda: len(worker.inflight) == 0, 5, message="an empty table")
        assert worker.inflight.running == 0
    assert runs == ["run"], "the same message ran twice at once in one worker"
    assert worker.stats.lost_leases == 0


# -- 4. a re-sent settlement is not a lost lease -----------------------------------------


@pytest.mark.asyncio
async def test_a_resent_settle_batch_answers_as_the_first(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)

    @client.task(name="t")
    def t() -> None:
        return None

    handle = t.enqueue()
    await redis_broker.prepare(["default"])
    (delivery,) = await redis_broker.fetch(["default"], "me", 1, 10)
    settlement = Settlement(delivery, "done", handle.id)
    assert await redis_broker.settle("me", [settlement], 0, "batch-1") == [True]
    assert await redis_broker.settle("me", [settlement], 0, "batch-1") == [True]
    assert await redis_broker.settle("me", [settlement], 0, "batch-2") == [False]
    await redis_broker.aclose()


@pytest.mark.asyncio
async def test_a_lost_settle_reply_is_not_a_lost_lease(faulty: FaultyBroker) -> None:
    client = Client(faulty)
    failures: list[Any] = []

    @client.task(name="fails", on_failure=failures.append)
    async def fails() -> None:
        raise RuntimeError("boom")

    faulty.lose_next_reply = True
    async with background_worker(client, **LEASE) as worker:
        handle = await fails.aenqueue()
        record = await client.aget_result(handle.id, timeout=5)
        await await_until(lambda: failures, 5, message="the failure hook")
    assert record.state == states.DEAD_LETTERED
    assert worker.stats.lost_leases == 0
    assert worker.stats.dead_lettered == 1


# -- 5. no busy loop while draining ------------------------------------------------------


@pytest.mark.asyncio
async def test_draining_does_not_spin_the_lease_keeper(faulty: FaultyBroker) -> None:
    client = Client(faulty)
    release = threading.Event()
    running = threading.Event()

    @client.task(name="slow")
    def slow() -> None:
        running.set()
        release.wait(10)

    handle = slow.enqueue()
    worker = Worker(client, **{**FAST, **LEASE})
    serving = asyncio.create_task(worker.run())
    await await_until(running.is_set, 5, message="the attempt")
    await await_until(lambda: worker.leases._rounds >= 1, 5, message="a recovery round")
    worker.stop()
    before, began = faulty.renewals, time.monotonic()
    # Drain for longer than the next recovery time, then let the attempt end.
    await await_until(lambda: time.monotonic() - began > 1.2, 5, message="draining a while")
    release.set()
    await asyncio.wait_for(serving, 10)
    drained = time.monotonic() - began
    calls = faulty.renewals - before
    assert calls <= drained / worker.config.heartbeat_s + 2, f"{calls} renewals in {drained:.1f} s"
    assert handle.result(timeout=5) is None


# -- 8. settling never fails silently ------------------------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot describe myself")


class NotAString(Exception):
    def __str__(self) -> Any:
        return 42


@pytest.mark.parametrize("error", [Unprintable, NotAString], ids=["str-raises", "str-not-str"])
@pytest.mark.asyncio
async def test_an_undescribable_error_is_still_dead_lettered(redis_broker: RedisBroker,
                                                             error: type[Exception]) -> None:
    client = Client(redis_broker)

    @client.task(name="bad")
    def bad() -> None:
        raise error()

    @client.task(name="healthy")
    async def healthy() -> int:
        return 7

    async with background_worker(client, concurrency=1) as worker:
        first = await bad.aenqueue()
        record = await client.aget_result(first.id, timeout=5)
        # The one slot came back: a healthy task runs after it.
        assert await (await healthy.aenqueue()).aresult(timeout=5) == 7
    assert record.state == states.DEAD_LETTERED
    assert record.error_type == error.__qualname__
    assert "unprintable" in (record.error_message or "")
    assert worker.inflight.running == 0


@pytest.mark.parametrize("delay", [float("inf"), float("nan"), 1e300])
@pytest.mark.asyncio
async def test_retry_with_an_impossible_delay_fails_clearly(redis_broker: RedisBroker,
                                                            delay: float) -> None:
    client = Client(redis_broker)

    @client.task(name="retrying", retries=2, initial_delay=0.01, jitter=False)
    async def retrying() -> None:
        raise Retry(delay=delay)

    async with background_worker(client, concurrency=1):
        handle = await retrying.aenqueue()
        record = await client.aget_result(handle.id, timeout=5)
    assert record.state == states.DEAD_LETTERED
    assert record.error_type == "ValueError"
    assert "delay must be a finite number" in (record.error_message or "")


# -- 9. no script unpacks an unbounded list ----------------------------------------------


@pytest.mark.asyncio
async def test_lowering_dead_letter_max_trims_thousands_at_once(redis_broker: RedisBroker) -> None:
    keys = redis_broker.keys.queue("default")
    pipe = raw_redis(redis_broker).pipeline(transaction=False)
    for i in range(9000):
        pipe.zadd(keys.dead_letters, {f"old{i}": i})
        pipe.hset(keys.dead_letter_data, f"old{i}", b"x")
    pipe.execute()
    small = RedisBroker(redis_broker.url, namespace=redis_broker.keys.namespace,
                        dead_letter_max=100)
    client = Client(small)

    @client.task(name="t")
    def t() -> None:
        return None

    handle = t.enqueue()
    await small.prepare(["default"])
    (delivery,) = await small.fetch(["default"], "me", 1, 10)
    letter = DeadLetter(id=handle.id, queue="default", reason="test", payload=b"p",
                        dead_ms=10**12)
    dead = Settlement(delivery, DEAD, handle.id, body=letter.to_bytes(), due_ms=letter.dead_ms)
    settled = await small.settle("me", [dead], 0)
    await small.aclose()
    small.close()
    assert settled == [True]
    assert raw_redis(redis_broker).zcard(keys.dead_letters) == 100
    assert raw_redis(redis_broker).hlen(keys.dead_letter_data) == 100
    assert handle.id in dead_letter_ids(redis_broker, "default")


# -- 15. what comes from the stream is logged escaped --------------------------------------


@pytest.mark.asyncio
async def test_ids_and_task_names_from_the_stream_cannot_forge_log_lines(
        redis_broker: RedisBroker, caplog: Any) -> None:
    from blitzq_django.engine.core.message import pack

    client = Client(redis_broker)
    forged = "x\n2026-01-01 CRITICAL forged line"
    inject(redis_broker, "default", pack([1, forged, forged, "default", [], {}, 1, 0, None,
                                          None, None, {}, None]))
    caplog.set_level(logging.INFO, logger="blitzq")
    async with background_worker(client):
        await await_until(lambda: dead_letter_ids(redis_broker, "default"), 5,
                          message="the dead letter")
    for line in caplog.records:
        assert "\n" not in line.getMessage(), line.getMessage()


# -- 7. consumers of dead workers leave the group ------------------------------------------


@pytest.mark.asyncio
async def test_a_running_worker_removes_the_consumers_of_dead_workers(
        redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)
    stream = redis_broker.keys.queue("default").stream
    await redis_broker.prepare(["default"])
    r = raw_redis(redis_broker)
    for name in ("dead-1", "dead-2", "dead-3"):  # each settled one message, then died
        r.xadd(stream, {"m": b"x"})
        ((_s, [(entry, _f)]),) = r.xreadgroup("workers", name, {stream: ">"}, count=1)
        r.xack(stream, "workers", entry)
        r.xdel(stream, entry)

    def consumers() -> set[str]:
        return {c["name"].decode() for c in r.xinfo_consumers(stream, "workers")}

    assert consumers() == {"dead-1", "dead-2", "dead-3"}
    async with background_worker(client, visibility_timeout=0.5) as worker:
        await await_until(lambda: consumers() <= {worker.name}, 10,
                          message="the dead consumers removed")


# -- 13. results have a size limit ---------------------------------------------------------


@pytest.mark.asyncio
async def test_a_result_over_max_result_size_fails_the_attempt_clearly(
        redis_broker: RedisBroker) -> None:
    client = Client(redis_broker, max_result_size=4096)

    @client.task(name="big", retries=3)
    async def big(size: int) -> bytes:
        return b"x" * size

    async with background_worker(client):
        small = await big.aenqueue(100)
        large = await big.aenqueue(10_000)
        assert await small.aresult(timeout=5) == b"x" * 100
        record = await client.aget_result(large.id, timeout=5)
    assert record.state == states.DEAD_LETTERED
    assert record.attempt == 1  # a result that is too large is not retried
    assert record.error_type == "ResultTooLarge"
    assert "over max_result_size (4096 bytes)" in (record.error_message or "")


@pytest.mark.asyncio
async def test_a_large_message_is_decoded_off_the_loop_and_runs(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)

    @client.task(name="size")
    async def size(data: bytes) -> int:
        return len(data)

    async with background_worker(client):
        handle = await size.aenqueue(b"y" * 1_000_000)
        assert await handle.aresult(timeout=5) == 1_000_000
