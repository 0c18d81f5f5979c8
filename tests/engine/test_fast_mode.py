"""Fast mode (lists, at-most-once): what differs from reliable mode.

The engine's behaviour tests already run in fast mode (the "redis-fast" broker param of
tests/engine/conftest.py); these check what only fast mode does: where messages wait,
the order of a requeue, no lease and no recovery, and a mode per queue.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from blitzq_django.engine import Client, MemoryBroker, RedisBroker
from blitzq_django.engine.brokers.base import DONE, REQUEUE, RETRY, Settlement
from blitzq_django.engine.core.message import decode
from blitzq_django.engine.errors import ConfigurationError

from ..support.waiting import await_until
from .helpers import background_worker, raw_redis, run_burst


@pytest.fixture(params=["redis", "memory"])
def fast_broker(request: pytest.FixtureRequest) -> RedisBroker | MemoryBroker:
    if request.param == "memory":
        return MemoryBroker(mode="fast")
    return request.getfixturevalue("fast_redis_broker")


def _ids(deliveries: list[Any]) -> list[str]:
    return [decode(d.payload).id for d in deliveries]


def test_messages_wait_in_the_list_of_their_lane(fast_redis_broker: RedisBroker) -> None:
    client = Client(fast_redis_broker, track_state=True)

    @client.task(name="t")
    def t() -> None:
        return None

    r, keys = raw_redis(fast_redis_broker), fast_redis_broker.keys.queue("default")
    t.enqueue()
    t.options(priority="high").enqueue()
    t.options(idempotency_key="k").enqueue()  # the script path: LPUSH too
    t.options(delay=3600).enqueue()
    assert (r.llen(keys.list), r.llen(keys.lane("high").list)) == (2, 1)
    assert not r.exists(keys.stream) and not r.exists(keys.lane("high").stream)
    assert r.zcard(keys.schedule) == 1
    stats = client.queue_stats()
    assert (stats.ready, stats.in_flight, stats.scheduled, stats.consumers) == (3, 0, 1, 0)
    assert stats.oldest_ready_age_ms is not None


@pytest.mark.asyncio
async def test_fetch_takes_the_high_lane_first_and_blocks_on_every_lane(
        fast_broker: Any) -> None:
    client = Client(fast_broker)

    @client.task(name="t")
    def t() -> None:
        return None

    low = t.options(priority="low").enqueue()
    normal = t.enqueue()
    high = t.options(priority="high").enqueue()
    await fast_broker.prepare(["default"])
    taken = await fast_broker.fetch(["default"], "w", 10, 10)
    assert _ids(taken) == [high.id, normal.id, low.id]
    assert [d.priority for d in taken] == ["high", None, "low"]
    assert len({d.entry_id for d in taken}) == 3  # each its own name in the worker

    # Nothing ready: the fetch blocks, and a message on the low lane wakes it.
    waiting = asyncio.ensure_future(fast_broker.fetch(["default"], "w", 10, 5000))
    if isinstance(fast_broker, RedisBroker):  # until it blocks in BRPOP
        r = raw_redis(fast_broker)
        await await_until(lambda: r.info("clients")["blocked_clients"] >= 1, 5,
                          message="the fetch to block")
    late = t.options(priority="low").enqueue()
    began = time.monotonic()
    (woken,) = await asyncio.wait_for(waiting, 5)
    assert _ids([woken]) == [late.id] and woken.priority == "low"
    assert time.monotonic() - began < 2.0


@pytest.mark.asyncio
async def test_no_lease_no_recovery_and_a_requeue_is_next_in_line(fast_broker: Any) -> None:
    client = Client(fast_broker)

    @client.task(name="t")
    def t() -> None:
        return None

    a, b, c = t.enqueue(), t.enqueue(), t.enqueue()
    await fast_broker.prepare(["default"])
    (first,) = await fast_broker.fetch(["default"], "w", 1, 10)
    assert _ids([first]) == [a.id]
    assert await fast_broker.renew("w", [first]) == []  # never lost
    assert await fast_broker.recover("default", "other", 0, 10) == ([], [])
    # A graceful shutdown's requeue: the message is the next one out, before b and c.
    assert await fast_broker.settle("w", [Settlement(first, REQUEUE, a.id,
                                                     body=first.payload)], 1) == [True]
    again = await fast_broker.fetch(["default"], "w", 3, 10)
    assert _ids(again) == [a.id, b.id, c.id]


@pytest.mark.asyncio
async def test_settle_writes_retries_and_is_idempotent_per_token(
        fast_redis_broker: RedisBroker) -> None:
    client = Client(fast_redis_broker)

    @client.task(name="t")
    def t() -> None:
        return None

    a, b = t.enqueue(), t.enqueue()
    broker = fast_redis_broker
    taken = await broker.fetch(["default"], "w", 2, 10)
    first, second = taken
    batch = [Settlement(first, DONE, a.id, record=b"", notify=False),
             Settlement(second, RETRY, b.id, body=second.payload, due_ms=1)]
    assert await broker.settle("w", batch, 1, token="tok") == [True, True]
    assert await broker.settle("w", batch, 1, token="tok") == [True, True]  # re-sent
    keys = broker.keys.queue("default")
    r = raw_redis(broker)
    assert r.zrange(keys.schedule, 0, -1) == [b.id.encode()]  # once, not twice
    assert r.llen(keys.list) == 0
    assert await broker.promote("default", int(time.time() * 1000), 10) == (1, -1)
    assert _ids(await broker.fetch(["default"], "w", 5, 10)) == [b.id]
    await broker.aclose()


def test_a_mode_per_queue(redis_url: str, namespace: str, redis_client: redis.Redis) -> None:
    broker = RedisBroker(redis_url, namespace=namespace, queue_modes={"bulk": "fast"})
    try:
        client = Client(broker)
        ran: list[str] = []

        @client.task(name="t")
        async def t(where: str) -> None:
            ran.append(where)

        t.enqueue("default")
        t.options(queue="bulk").enqueue("bulk")
        assert broker.mode_of("bulk") == "fast" and broker.mode_of("default") == "reliable"
        assert redis_client.llen(broker.keys.queue("bulk").list) == 1
        assert redis_client.xlen(broker.keys.queue("default").stream) == 1
        run_burst(client, queues=("default", "bulk"))
        assert sorted(ran) == ["bulk", "default"]
    finally:
        broker.close()
        keys = list(redis_client.scan_iter(match=broker.keys.all_keys_pattern()))
        if keys:
            redis_client.delete(*keys)


@pytest.mark.asyncio
async def test_a_worker_serves_fast_queues_with_results_and_purge(fast_broker: Any) -> None:
    client = Client(fast_broker)

    @client.task(name="add")
    async def add(x: int, y: int) -> int:
        return x + y

    handles = add.enqueue_many([(i, 1) for i in range(50)])
    async with background_worker(client):
        for i, h in enumerate(handles):
            assert await h.aresult(timeout=10) == i + 1
    add.enqueue_many([(i, 1) for i in range(5)])
    purged = client.purge("default")
    assert (purged.ready, purged.in_flight) == (5, 0)
    assert client.queue_stats().ready == 0


@pytest.mark.parametrize("options", [{"mode": "turbo"}, {"queue_modes": {"q": "turbo"}},
                                     {"queue_modes": {"a b": "fast"}},
                                     {"queue_modes": ["q"]}])
@pytest.mark.parametrize("kind", [RedisBroker, MemoryBroker])
def test_an_unknown_mode_or_queue_name_is_refused(kind: Any, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        kind(**options)
