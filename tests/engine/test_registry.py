"""The worker registry (client.workers()) and queue stats (client.queue_stats())."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from blitzq_django.engine import Client
from blitzq_django.engine.brokers.base import DEAD, Settlement
from blitzq_django.engine.core.registry import WorkerInfo

from ..support.waiting import await_until
from .helpers import background_worker, is_fast

BEAT = {"visibility_timeout": 1.0}  # a heartbeat every third of a second


@pytest.mark.asyncio
async def test_a_worker_is_listed_while_it_runs(client: Client) -> None:
    @client.task(name="t", queue="reports")
    async def t() -> None:
        return None

    assert await client.aworkers() == []
    async with background_worker(client, concurrency=7, **BEAT) as worker:
        await await_until(lambda: any(w.name == worker.name for w in client.workers()), 5,
                          message="the worker listed")
        (info,) = await client.aworkers()
        assert (info.pid, info.concurrency, info.queues) == (os.getpid(), 7,
                                                            ["default", "reports"])
        assert info.host and info.version and info.started_ms <= info.heartbeat_ms
        assert info.expires_ms > time.time() * 1000
        for _ in range(3):
            await t.aenqueue()
        await await_until(lambda: client.workers()[0].processed == 3, 5,
                          message="the processed count in a heartbeat")
    assert client.workers() == []  # a stopping worker leaves the registry


@pytest.mark.asyncio
async def test_an_entry_that_is_not_renewed_expires(client: Client) -> None:
    broker: Any = client.broker
    # The sync client made (a cluster's reads its slot map: up to a quarter of a second
    # under load) before the entry's time starts running.
    assert client.workers() == []
    now = int(time.time() * 1000)
    info = WorkerInfo(name="killed", host="h", pid=1, expires_ms=now + 1000)
    await broker.heartbeat("killed", info.to_bytes(), now, 1000)
    assert [w.name for w in client.workers()] == ["killed"]
    await await_until(lambda: client.workers() == [], 5, message="the entry to expire")


@pytest.mark.asyncio
async def test_queue_stats_count_each_state(client: Client) -> None:
    broker: Any = client.broker

    @client.task(name="t")
    def t() -> None:
        return None

    empty = await client.aqueue_stats()
    assert (empty.ready, empty.in_flight, empty.scheduled, empty.dead_letters) == (0, 0, 0, 0)
    assert empty.oldest_ready_age_ms is None
    handles = [t.enqueue() for _ in range(4)]
    t.options(delay=3600).enqueue()
    t.options(delay=3600).enqueue()
    await broker.prepare(["default"])
    taken = await broker.fetch(["default"], "reader", 2, 10)
    assert len(taken) == 2
    letter = Settlement(taken[0], DEAD, handles[0].id, body=b"letter", due_ms=1)
    assert await broker.settle("reader", [letter], 1) == [True]
    await await_until(lambda: client.queue_stats().oldest_ready_age_ms, 5,
                      message="the oldest ready message to age")
    stats = client.queue_stats()
    # Fast mode: a popped message has left Redis; no consumer group counts readers.
    held = 0 if is_fast(broker) else 1
    assert (stats.ready, stats.in_flight, stats.scheduled, stats.dead_letters) == (2, held, 2, 1)
    assert stats.consumers == held
    assert stats.queue == "default"
    again = await client.aqueue_stats()
    assert (again.ready, again.in_flight, again.scheduled, again.dead_letters,
            again.consumers) == (2, held, 2, 1, held)


# -- purge ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_purge_drops_ready_and_scheduled_and_dead_letters_when_asked(
        client: Client) -> None:
    broker: Any = client.broker

    @client.task(name="t")
    def t() -> None:
        return None

    handles = [t.enqueue() for _ in range(3)]
    t.options(delay=3600).enqueue()
    await broker.prepare(["default"])
    (taken,) = await broker.fetch(["default"], "reader", 1, 10)
    letter = Settlement(taken, DEAD, handles[0].id, body=b"letter", due_ms=1)
    assert await broker.settle("reader", [letter], 1) == [True]

    purged = client.purge("default")
    assert (purged.ready, purged.scheduled, purged.dead_letters, purged.in_flight) == (2, 1, 0, 0)
    stats = client.queue_stats()
    assert (stats.ready, stats.scheduled, stats.dead_letters) == (0, 0, 1)
    again = await client.apurge("default", dead_letters=True)
    assert (again.ready, again.scheduled, again.dead_letters) == (0, 0, 1)
    assert client.queue_stats().dead_letters == 0


@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode keeps nothing in flight in Redis: purge never refuses")
async def test_purge_leaves_held_messages_and_refuses_unless_forced(client: Client) -> None:
    from blitzq_django.engine import QueueBusy

    broker: Any = client.broker

    @client.task(name="t")
    def t() -> None:
        return None

    for _ in range(3):
        t.enqueue()
    await broker.prepare(["default"])
    (held,) = await broker.fetch(["default"], "worker", 1, 10)
    with pytest.raises(QueueBusy, match="1 messages in flight"):
        client.purge("default")
    assert client.queue_stats().ready == 2  # a refused purge removed nothing
    purged = client.purge("default", force=True)
    assert (purged.ready, purged.in_flight) == (2, 1)
    # The held message is untouched: its worker still settles it.
    assert await broker.settle("worker", [Settlement(held, "done", "x")], 1) == [True]


def test_purge_of_an_unknown_or_invalid_queue_names_it(client: Client) -> None:
    from blitzq_django.engine import ConfigurationError

    with pytest.raises(ConfigurationError, match="queue 'nowhere' does not exist"):
        client.purge("nowhere")
    with pytest.raises(ConfigurationError, match="queue name 'a:b' is invalid"):
        client.purge("a:b")
    assert client.purge("default").ready == 0  # known, even before anything used it
