"""Promotion: due scheduled messages move onto their queue once, however many promoters run."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
import uuid
from typing import Any

import pytest

from blitzq_django.engine import Client, MemoryBroker, RedisBroker, current_task
from blitzq_django.engine.brokers.base import Enqueue
from blitzq_django.engine.core.message import Message, encode

from ..support.waiting import await_until
from .helpers import background_worker, ready_message_ids


def now_ms() -> int:
    return int(time.time() * 1000)


def twin(broker: RedisBroker | MemoryBroker) -> RedisBroker | MemoryBroker:
    """Another broker object on the same data, as another worker process would have."""
    if isinstance(broker, MemoryBroker):
        return broker  # one process: the same object (it is thread-safe)
    return RedisBroker(broker.url, namespace=broker.keys.namespace, mode=broker.mode)


def schedule(client: Client, task_name: str, due: list[int]) -> list[str]:
    """Put one message per due time on the schedule (due times may be in the past)."""
    items = []
    for i, due_ms in enumerate(due):
        message = Message(id=uuid.uuid4().hex, task=task_name, queue="default", args=(i,),
                          created_ms=now_ms(), eta_ms=due_ms)
        items.append(Enqueue("default", message.id, encode(message), due_ms))
    return client.broker.enqueue(items)


def test_promote_moves_due_messages_and_returns_the_earliest_remaining(client: Client) -> None:
    @client.task(name="t")
    def t(i: int) -> None:
        return None

    now = now_ms()
    past, soon, later = schedule(client, "t", [now - 1000, now + 5000, now + 9000])

    async def scenario() -> list[tuple[int, int]]:
        broker = client.broker
        out = [await broker.promote("default", now, 1000),
               await broker.promote("default", now, 1000),
               await broker.promote("default", now + 9000, 1),  # limit: the earlier one first
               await broker.promote("default", now + 9000, 1),
               await broker.promote("default", now + 9000, 1)]
        await broker.aclose()
        return out

    replies = asyncio.run(scenario())
    assert replies == [(1, now + 5000), (0, now + 5000), (1, now + 9000), (1, -1), (0, -1)]
    assert ready_message_ids(client.broker, "default") == [past, soon, later]
    assert client.broker.scheduled_due_ms("default", soon) is None


def test_concurrent_promoters_never_promote_an_entry_twice(client: Client) -> None:
    @client.task(name="t")
    def t(i: int) -> None:
        return None

    count = 600
    ids = schedule(client, "t", [now_ms() - 1000 - i for i in range(count)])
    brokers = [twin(client.broker) for _ in range(6)]
    start = threading.Barrier(len(brokers), timeout=10)
    moved: list[int] = []
    errors: list[BaseException] = []

    def promoter(broker: Any) -> None:
        async def run() -> int:
            total = 0
            start.wait()
            try:
                while True:  # small batches, so the promoters interleave
                    n, _next = await broker.promote("default", now_ms(), 7)
                    if n == 0:
                        return total
                    total += n
            finally:
                await broker.aclose()

        try:
            moved.append(asyncio.run(run()))
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=promoter, args=(b,)) for b in brokers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for b in brokers:
        if b is not client.broker:
            b.close()
    assert errors == []
    assert sum(moved) == count
    waiting = ready_message_ids(client.broker, "default")
    assert len(waiting) == count
    assert collections.Counter(waiting) == collections.Counter(ids)


@pytest.mark.asyncio
async def test_four_workers_run_each_scheduled_message_exactly_once(client: Client) -> None:
    runs: collections.Counter[str] = collections.Counter()

    @client.task(name="t")
    async def t(i: int) -> None:
        runs[current_task().id] += 1  # type: ignore[union-attr]

    count = 300
    now = now_ms()
    # Due over the next ~0.3 s: the four promoters are all polling while they come due.
    ids = schedule(client, "t", [now + 150 + i for i in range(count)])
    async with (background_worker(client, name="w1") as w1,
                background_worker(client, name="w2") as w2,
                background_worker(client, name="w3") as w3,
                background_worker(client, name="w4") as w4):
        await await_until(lambda: sum(runs.values()) >= count, 10,
                          message=f"{count} scheduled messages to run")
        for h_id in ids[-5:]:
            assert (await client.aget_result(h_id, 5)).succeeded
    assert runs == collections.Counter(ids)
    assert sum(w.stats.succeeded for w in (w1, w2, w3, w4)) == count


@pytest.mark.asyncio
async def test_delayed_message_runs_after_its_delay_and_not_much_later(client: Client) -> None:
    started: list[int] = []

    @client.task(name="t")
    async def t() -> None:
        started.append(now_ms())

    poll = 0.5
    async with background_worker(client, schedule_poll_interval=poll):
        enqueued = now_ms()
        h = await t.options(delay=0.6).aenqueue()
        record = await client.aget_result(h.id, 5)
    assert record.succeeded
    (ran,) = started
    assert ran >= enqueued + 600  # never early
    assert ran - (enqueued + 600) < 2000  # and promoted within about one poll interval


@pytest.mark.asyncio
async def test_retry_backoff_is_promoted_by_a_running_worker(client: Client) -> None:
    from blitzq_django.engine import Retry

    started: list[int] = []

    @client.task(name="t", retries=1)
    async def t() -> str:
        started.append(now_ms())
        if len(started) == 1:
            raise Retry(delay=0.3)
        return "second"

    async with background_worker(client):
        h = await t.aenqueue()
        assert await h.aresult(timeout=5) == "second"
    assert len(started) == 2
    assert started[1] - started[0] >= 300
    assert started[1] - started[0] < 2300


def test_burst_does_not_stop_while_a_promoted_message_waits(client: Client) -> None:
    # A burst worker drains its queues before it stops. A promoter (its own helper, or
    # another worker's) may move a due retry onto the queue between the burst's last empty
    # fetch and its final "anything due?" check; that message must still be run, not left
    # behind. Here the race is forced: a promotion right after every empty fetch.
    from .helpers import run_burst

    attempts: list[int] = []

    @client.task(name="flaky", retries=1, initial_delay=0)
    def flaky() -> str:
        attempts.append(current_task().attempt)  # type: ignore[union-attr]
        if len(attempts) == 1:
            raise ValueError("first attempt fails")
        return "second"

    broker = client.broker
    fetch = broker.fetch

    async def fetch_then_promote(queues: Any, consumer: str, count: int,
                                 block_ms: int) -> Any:
        deliveries = await fetch(queues, consumer, count, block_ms)
        if not deliveries:
            for queue in queues:
                await broker.promote(queue, now_ms(), 1000)
        return deliveries

    broker.fetch = fetch_then_promote  # type: ignore[method-assign]
    h = flaky.enqueue()
    run_burst(client)
    assert attempts == [1, 2]
    assert h.result(timeout=1) == "second"
