"""Priorities: each is a lane of its queue (its own stream and schedule under the
queue's hash tag); under a backlog a worker always takes higher first."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from blitzq_django.engine import Client, MemoryBroker, RedisBroker, Retry
from blitzq_django.engine.errors import ConfigurationError

from ..support.clients import client_list
from ..support.waiting import await_until
from .helpers import background_worker, raw_redis, run_burst


def test_backlog_of_1000_runs_high_then_normal_then_low(broker: Any) -> None:
    client = Client(broker)
    ran: list[str] = []

    @client.task(name="job")
    async def job(priority: str) -> None:
        ran.append(priority)

    calls = ["high", "normal", "low"] * 333 + ["high"]
    random.Random(7).shuffle(calls)
    for priority in calls:
        job.options(priority=priority).enqueue(priority)
    run_burst(client, concurrency=1)
    assert ran == sorted(calls, key=["high", "normal", "low"].index)


def test_a_higher_message_fetched_later_starts_before_waiting_lower_ones(broker: Any) -> None:
    # Prefetched lower messages wait in the worker; a high one read after them still
    # goes first: each queue's line is ordered by priority inside the worker too.
    client = Client(broker)
    ran: list[str] = []
    gate = asyncio.Event()

    @client.task(name="job")
    async def job(tag: str) -> None:
        if tag == "first":
            await gate.wait()
        ran.append(tag)

    async def scenario() -> None:
        job.enqueue("first")
        async with background_worker(client, concurrency=1, prefetch=10,
                                     batch_size=10) as worker:
            await await_until(lambda: len(worker.inflight) == 1)
            for i in range(5):
                job.options(priority="low").enqueue(f"low{i}")
            await await_until(lambda: len(worker.inflight) == 6)
            job.options(priority="high").enqueue("high")
            await await_until(lambda: len(worker.inflight) == 7)
            gate.set()
            await await_until(lambda: len(ran) == 7)
        await broker.aclose()

    asyncio.run(scenario())
    assert ran[:2] == ["first", "high"]


def test_lone_low_message_is_not_delayed_by_the_blocking_read(
        redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)
    done = asyncio.Event()

    @client.task(name="job")
    async def job() -> None:
        done.set()

    async def scenario() -> float:
        # A worker idle in a 5 s blocking read of the queue: the low message must wake it.
        async with background_worker(client, block_timeout=5.0, stop_within=10):
            await await_until(lambda: _blocked_in_a_read(redis_broker),
                              message="the worker to block in its read")
            loop = asyncio.get_running_loop()
            sent = loop.time()
            await job.options(priority="low").aenqueue()
            await asyncio.wait_for(done.wait(), 2.0)  # far below the 5 s block
            took = loop.time() - sent
        await redis_broker.aclose()
        return took

    assert asyncio.run(scenario()) < 2.0


def _blocked_in_a_read(broker: RedisBroker) -> bool:
    return any(c.get("cmd") == "xreadgroup" and "b" in c.get("flags", "")
               for c in client_list(raw_redis(broker)))


def test_priority_per_task_and_per_call(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)

    @client.task(name="urgent", priority="high")
    def urgent() -> None: ...

    r = raw_redis(redis_broker)
    keys = redis_broker.keys.queue("default")
    urgent.enqueue()
    urgent.options(priority="low").enqueue()
    urgent.options(priority="normal").enqueue()
    assert r.xlen(keys.lane("high").stream) == 1
    assert r.xlen(keys.lane("low").stream) == 1
    assert r.xlen(keys.stream) == 1
    stats = client.queue_stats()
    assert stats.ready == 3


def test_a_retry_stays_in_its_lane(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)

    @client.task(name="later", priority="high", retries=1)
    def later() -> None:
        raise Retry(delay=600)

    handle = later.enqueue()
    run_burst(client)
    high = redis_broker.keys.queue("default").lane("high")
    assert raw_redis(redis_broker).zscore(high.schedule, handle.id) is not None
    assert client.queue_stats().scheduled == 1
    record = client.inspect(handle.id)
    assert record is not None and record.state == "scheduled"


def test_delayed_low_message_is_promoted_into_its_lane_and_runs(broker: Any) -> None:
    client = Client(broker)
    ran: list[str] = []

    @client.task(name="job")
    def job() -> None:
        ran.append("ran")

    handle = job.options(priority="low", delay=0.05).enqueue()
    assert client.inspect(handle.id).state == "scheduled"  # type: ignore[union-attr]
    run_burst(client)
    assert ran == ["ran"]


def test_purge_and_stats_cover_every_lane(broker: Any) -> None:
    client = Client(broker)

    @client.task(name="job")
    def job() -> None: ...

    for priority in ("high", "normal", "low"):
        job.options(priority=priority).enqueue()
        job.options(priority=priority, delay=600).enqueue()
    stats = client.queue_stats()
    assert (stats.ready, stats.scheduled) == (3, 3)
    purged = client.purge("default")
    assert (purged.ready, purged.scheduled) == (3, 3)
    assert (client.queue_stats().ready, client.queue_stats().scheduled) == (0, 0)


@pytest.mark.parametrize("bad", ["urgent", "HIGH", 1, ""])
def test_unknown_priority_is_refused_where_it_is_given(bad: Any) -> None:
    client = Client(MemoryBroker())
    with pytest.raises(ConfigurationError, match="priority must be one of"):
        client.task(name="a", priority=bad)(lambda: None)

    @client.task(name="b")
    def b() -> None: ...

    with pytest.raises(ConfigurationError, match=r"b.options\(\).*priority must be one of"):
        b.options(priority=bad)


def test_one_settle_batch_spanning_lanes_settles_every_lane(redis_broker: RedisBroker) -> None:
    # One settle call is one script call per lane under one token; each lane's call
    # must find only its own receipt (a shared one answered the second lane with the
    # first lane's replies and applied nothing).
    from blitzq_django.engine.brokers.base import DONE, Settlement
    from blitzq_django.engine.core.message import decode

    client = Client(redis_broker)

    @client.task(name="job")
    async def job() -> None: ...

    ids = [job.options(priority=p).enqueue().id for p in ("high", "normal", "low", "low")]

    async def scenario() -> list[bool]:
        await redis_broker.prepare(["default"])
        deliveries = await redis_broker.fetch(["default"], "c1", 10, 0)
        assert sorted(d.priority or "" for d in deliveries) == ["", "high", "low", "low"]
        messages = {d.key: decode(d.payload or b"") for d in deliveries}
        assert sorted(m.id for m in messages.values()) == sorted(ids)
        settled = [Settlement(d, DONE, messages[d.key].id) for d in deliveries]
        replies = await redis_broker.settle("c1", settled, now_ms=1, token="t1")
        # The batch sent again (its reply lost) changes nothing and answers the same.
        assert await redis_broker.settle("c1", settled, now_ms=1, token="t1") == replies
        await redis_broker.aclose()
        return replies

    assert asyncio.run(scenario()) == [True] * 4
    assert redis_broker.queue_stats("default")["in_flight"] == 0
