"""prune_consumers removes dead workers' consumers from the group, never an owner."""

from __future__ import annotations

import asyncio

import pytest
import redis

from blitzq_django.engine import Client, MemoryBroker, RedisBroker
from blitzq_django.engine.brokers.redis.keys import GROUP

from ..support.clients import client_list
from ..support.waiting import await_until

MIN_IDLE_MS = 200


def consumers(redis_client: redis.Redis, broker: RedisBroker) -> dict[str, dict[str, int]]:
    """name -> {"pending": n, "idle": ms}, from XINFO CONSUMERS."""
    stream = broker.keys.queue("default").stream
    return {c["name"].decode(): {"pending": c["pending"], "idle": c["idle"]}
            for c in redis_client.xinfo_consumers(stream, GROUP)}


@pytest.mark.asyncio
async def test_only_idle_consumers_that_own_nothing_are_removed(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = Client(redis_broker)

    @client.task(name="t")
    def t() -> None:
        return None

    stream = redis_broker.keys.queue("default").stream
    await redis_broker.prepare(["default"])
    t.enqueue_many([(), (), ()])
    # A worker that settled what it read, then died: it owns nothing.
    (done,) = await redis_broker.fetch(["default"], "gone", 1, 1)
    redis_client.xack(stream, GROUP, done.entry_id)
    assert len(await redis_broker.fetch(["default"], "owner", 1, 1)) == 1  # holds one
    await await_until(lambda: all(c["idle"] > MIN_IDLE_MS
                                  for c in consumers(redis_client, redis_broker).values()),
                      message="both consumers to be idle")
    (done,) = await redis_broker.fetch(["default"], "recent", 1, 1)  # a live worker
    redis_client.xack(stream, GROUP, done.entry_id)

    assert await redis_broker.prune_consumers("default", MIN_IDLE_MS) == 1
    left = consumers(redis_client, redis_broker)
    assert set(left) == {"owner", "recent"}
    assert left["owner"]["pending"] == 1
    assert await redis_broker.prune_consumers("default", MIN_IDLE_MS) == 0


@pytest.mark.asyncio
async def test_a_dead_owner_goes_once_its_entries_are_recovered(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = Client(redis_broker)

    @client.task(name="t")
    def t() -> None:
        return None

    await redis_broker.prepare(["default"])
    t.enqueue()
    assert len(await redis_broker.fetch(["default"], "dead", 10, 1)) == 1
    await await_until(lambda: consumers(redis_client, redis_broker)["dead"]["idle"]
                      > MIN_IDLE_MS, message="the dead consumer to be idle")
    assert await redis_broker.prune_consumers("default", MIN_IDLE_MS) == 0  # it owns one

    claimed, _ = await redis_broker.recover("default", "rescuer", MIN_IDLE_MS, 10)
    assert len(claimed) == 1
    assert await redis_broker.prune_consumers("default", MIN_IDLE_MS) == 1
    assert set(consumers(redis_client, redis_broker)) == {"rescuer"}


@pytest.mark.asyncio
async def test_a_consumer_pruned_while_blocked_in_a_read_owns_what_it_reads(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    # Before Redis 7.2 an empty read does not reset idle: a live worker on an empty
    # queue can be pruned. Its blocked XREADGROUP must still own what it is given.
    client = Client(redis_broker)

    @client.task(name="t")
    def t() -> None:
        return None

    await redis_broker.prepare(["default"])
    t.enqueue()
    (done,) = await redis_broker.fetch(["default"], "live", 1, 1)
    redis_client.xack(redis_broker.keys.queue("default").stream, GROUP, done.entry_id)
    await await_until(lambda: consumers(redis_client, redis_broker)["live"]["idle"]
                      > MIN_IDLE_MS, message="the consumer to be idle")
    reading = asyncio.ensure_future(redis_broker.fetch(["default"], "live", 1, 10_000))
    await await_until(lambda: any(c["cmd"] == "xreadgroup" and "b" in c["flags"]
                                  for c in client_list(redis_client)),
                      message="the read to block")
    assert await redis_broker.prune_consumers("default", MIN_IDLE_MS) == 1
    t.enqueue()
    (delivery,) = await asyncio.wait_for(reading, 10)
    assert consumers(redis_client, redis_broker)["live"]["pending"] == 1
    claimed, _ = await redis_broker.recover("default", "other", 0, 10)
    assert [d.entry_id for d in claimed] == [delivery.entry_id]  # recoverable as usual


@pytest.mark.asyncio
async def test_nothing_to_prune_without_a_group(redis_broker: RedisBroker) -> None:
    assert await redis_broker.prune_consumers("never-used", 0) == 0


@pytest.mark.asyncio
async def test_memory_broker_has_no_consumers_to_prune() -> None:
    assert await MemoryBroker().prune_consumers("default", 0) == 0
