"""Leases at the broker level: renew, settle and recover check who owns a delivery."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from blitzq_django.engine import Client, DeadLetter, MemoryBroker, RedisBroker, current_task
from blitzq_django.engine.brokers.base import DEAD, DONE, RETRY, Delivery, Settlement
from blitzq_django.engine.core.record import Record

from ..support.waiting import await_until, wait_until
from .helpers import background_worker, dead_letter_ids, pending_count

T = TypeVar("T")


def run(broker: RedisBroker | MemoryBroker, scenario: Callable[[], Awaitable[T]]) -> T:
    """Run broker calls on a loop of their own, closing that loop's connections after."""
    async def wrapped() -> T:
        try:
            return await scenario()
        finally:
            await broker.aclose()

    return asyncio.run(wrapped())


def put(client: Client, count: int) -> list[str]:
    @client.task(name="t")
    def t(i: int) -> None:
        return None

    return [h.id for h in t.enqueue_many([(i,) for i in range(count)])]


def idle_for(broker: RedisBroker | MemoryBroker, seconds: float) -> None:
    """Wait until leases taken before this call are at least ``seconds`` idle."""
    until = time.monotonic() + seconds
    wait_until(lambda: time.monotonic() >= until, seconds + 5, message="leases to idle")


def record(message_id: str, state: str = "succeeded") -> bytes:
    return Record(id=message_id, task="t", queue="default", state=state, result=1).to_bytes()


@pytest.mark.reliable_only("fast mode has no lease to renew or lose")
def test_renew_renews_owned_entries_and_reports_the_others_lost(client: Client) -> None:
    put(client, 3)
    broker = client.broker

    async def scenario() -> tuple[list[str], list[Delivery], list[Delivery]]:
        await broker.prepare(["default"])
        mine = await broker.fetch(["default"], "a", 2, 10)
        theirs = await broker.fetch(["default"], "b", 1, 10)
        lost = await broker.renew("a", [*mine, *theirs])
        return lost, mine, theirs

    lost, mine, theirs = run(broker, scenario)
    assert len(mine) == 2 and len(theirs) == 1
    assert [d.entry_id for d in lost] == [theirs[0].entry_id]
    assert pending_count(broker, "default") == 3  # renew takes nothing over

    # A renewal resets the idle time of the owned entry only; it does not count a delivery.
    idle_for(broker, 0.3)

    async def renew_then_recover() -> tuple[list[str], list[Delivery]]:
        lost = await broker.renew("a", [mine[0]])
        claimed, _ = await broker.recover("default", "c", 200, 10)
        return lost, claimed

    lost, claimed = run(broker, renew_then_recover)
    assert lost == []
    assert sorted(d.entry_id for d in claimed) == sorted([mine[1].entry_id, theirs[0].entry_id])

    async def recover_renewed() -> list[Delivery]:
        claimed, _ = await broker.recover("default", "c", 0, 10)
        return claimed

    (again,) = [d for d in run(broker, recover_renewed) if d.entry_id == mine[0].entry_id]
    assert again.delivery_count == 2  # renewals did not count as deliveries


@pytest.mark.parametrize("kind", [DONE, RETRY, DEAD])
@pytest.mark.reliable_only("fast mode has no ownership: a popped message is its worker's alone")
def test_settle_by_a_former_owner_writes_nothing(client: Client, kind: str) -> None:
    (message_id,) = put(client, 1)
    broker = client.broker
    letter = DeadLetter(id=message_id, queue="default", task="t", reason="retries exhausted",
                        payload=b"", dead_ms=1).to_bytes()

    def settlement(delivery: Delivery) -> Settlement:
        body = letter if kind == DEAD else (delivery.payload or b"") if kind == RETRY else b""
        return Settlement(delivery, kind, message_id, record(message_id), True, body,
                          due_ms=int(time.time() * 1000) + 60_000)

    async def scenario() -> tuple[list[bool], list[bool]]:
        await broker.prepare(["default"])
        (stale,) = await broker.fetch(["default"], "stale", 1, 10)
        (fresh,), _ = await broker.recover("default", "fresh", 0, 1)
        refused = await broker.settle("stale", [settlement(stale)], 1)
        assert broker.get_record("default", message_id) is None
        assert broker.scheduled_due_ms("default", message_id) is None
        assert broker.dead_letter("default", message_id) is None
        assert pending_count(broker, "default") == 1  # not acked: the new owner still has it
        accepted = await broker.settle("fresh", [settlement(fresh)], 1)
        return refused, accepted

    refused, accepted = run(broker, scenario)
    assert refused == [False]
    assert accepted == [True]
    assert pending_count(broker, "default") == 0
    assert broker.get_record("default", message_id) is not None
    if kind == RETRY:
        assert broker.scheduled_due_ms("default", message_id) is not None
    if kind == DEAD:
        assert dead_letter_ids(broker, "default") == [message_id]


@pytest.mark.reliable_only("fast mode has no ownership: every settlement of a batch is written")
def test_settle_batch_answers_per_delivery(client: Client) -> None:
    ids = put(client, 2)
    broker = client.broker

    async def scenario() -> list[bool]:
        await broker.prepare(["default"])
        mine = await broker.fetch(["default"], "a", 1, 10)
        theirs = await broker.fetch(["default"], "b", 1, 10)
        return await broker.settle("a", [
            Settlement(mine[0], DONE, ids[0], record(ids[0]), True),
            Settlement(theirs[0], DONE, ids[1], record(ids[1]), True),
        ], 1)

    assert run(broker, scenario) == [True, False]
    assert broker.get_record("default", ids[0]) is not None
    assert broker.get_record("default", ids[1]) is None
    assert pending_count(broker, "default") == 1


@pytest.mark.reliable_only("fast mode recovers nothing (at-most-once) and counts no deliveries")
def test_recover_counts_deliveries_up(client: Client) -> None:
    put(client, 1)
    broker = client.broker

    async def scenario() -> list[int]:
        await broker.prepare(["default"])
        (first,) = await broker.fetch(["default"], "w0", 1, 10)
        counts = [first.delivery_count]
        for i in range(1, 4):
            (claimed,), deleted = await broker.recover("default", f"w{i}", 0, 10)
            assert deleted == [] and claimed.entry_id == first.entry_id
            assert claimed.payload == first.payload
            counts.append(claimed.delivery_count)
        return counts

    assert run(broker, scenario) == [1, 2, 3, 4]


@pytest.mark.reliable_only("fast mode recovers nothing (at-most-once)")
def test_recover_takes_at_most_one_already_recovered_entry_per_call(client: Client) -> None:
    put(client, 5)
    broker = client.broker

    async def scenario() -> list[list[int]]:
        await broker.prepare(["default"])
        assert len(await broker.fetch(["default"], "dead", 3, 10)) == 3
        calls = []
        claimed, _ = await broker.recover("default", "r1", 0, 10)
        calls.append(sorted(d.delivery_count for d in claimed))  # all fresh: all taken
        for _ in range(2):
            claimed, _ = await broker.recover("default", "r2", 0, 10)
            calls.append(sorted(d.delivery_count for d in claimed))
        # Two entries never recovered, beside three recovered ones: both fresh ones
        # and one suspect are taken.
        assert len(await broker.fetch(["default"], "dead", 2, 10)) == 2
        claimed, _ = await broker.recover("default", "r3", 0, 10)
        calls.append(sorted(d.delivery_count for d in claimed))
        return calls

    calls = run(broker, scenario)
    assert calls[0] == [2, 2, 2]
    assert len(calls[1]) == 1 and len(calls[2]) == 1
    assert len(calls[3]) == 3 and calls[3][:2] == [2, 2]
    assert calls[3][2] >= 3


@pytest.mark.reliable_only("fast mode recovers nothing (at-most-once)")
def test_recover_skips_entries_not_idle_long_enough(client: Client) -> None:
    put(client, 1)
    broker = client.broker

    async def scenario() -> tuple[int, int]:
        await broker.prepare(["default"])
        await broker.fetch(["default"], "busy", 1, 10)
        early, _ = await broker.recover("default", "thief", 60_000, 10)
        late, _ = await broker.recover("default", "thief", 0, 10)
        return len(early), len(late)

    assert run(broker, scenario) == (0, 1)


@pytest.mark.asyncio
async def test_a_live_worker_keeps_its_lease_past_the_visibility_timeout(
        client: Client) -> None:
    ran: list[int] = []
    release = threading.Event()

    @client.task(name="long")
    def long() -> str:
        ran.append(current_task().delivery_count)  # type: ignore[union-attr]
        release.wait(1.2)  # over two visibility timeouts
        return "once"

    h = long.enqueue()
    options: dict[str, Any] = {"visibility_timeout": 0.5, "concurrency": 2}
    async with (background_worker(client, name="owner", **options) as owner,
                background_worker(client, name="other", **options) as other):
        assert await h.aresult(timeout=5) == "once"
    assert ran == [1]
    assert owner.stats.lost_leases == other.stats.lost_leases == 0
    assert owner.stats.succeeded + other.stats.succeeded == 1



@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode has no lease: nothing is refused or recovered")
async def test_an_entry_that_ran_here_and_comes_back_here_is_not_run_again(
        client: Client) -> None:
    # Its lease lost while it ran (a pause, a stalled loop), its settlement is refused;
    # the worker that took it dies before running it, and the entry comes back to the
    # worker where it ran: that outcome is written, the body does not run twice.
    broker = client.broker
    runs: list[int] = []

    @client.task(name="once")
    async def once() -> str:
        runs.append(1)
        claimed, _ = await broker.recover("default", "taker", 0, 10)  # then it "dies"
        assert len(claimed) == 1
        return "ran"

    h = once.enqueue()
    async with background_worker(client, visibility_timeout=0.5) as worker:
        record = await client.afinal_record(h.id, timeout=15)
        assert record is not None and record.state == "succeeded"
        await await_until(lambda: pending_count(broker, "default") == 0, 10,
                          message="nothing pending")
    assert runs == [1]
    assert worker.stats.lost_leases == 1
    assert await h.aresult(timeout=1) == "ran"

