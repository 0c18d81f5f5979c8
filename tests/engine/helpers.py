"""Helpers of the engine tests: run a worker, and look at what a broker holds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import redis

from blitzq_django.engine import Client, MemoryBroker, RedisBroker, Worker
from blitzq_django.engine.brokers.base import Enqueue
from blitzq_django.engine.core.message import decode

from ..support.waiting import await_until

# Fast workers for tests: short fetch blocks, so stop() and burst end quickly.
FAST = {"block_timeout": 0.05, "schedule_poll_interval": 0.05, "shutdown_timeout": 5.0}


BURST_LIMIT_S = 10.0


def run_burst(client: Client, **options: Any) -> Any:
    """Drain the queues with a burst worker on a fresh event loop; return its stats."""
    return asyncio.run(arun_burst(client, close_broker=True, **options))


async def arun_burst(client: Client, close_broker: bool = False, **options: Any) -> Any:
    """Drain the queues with a burst worker on this loop; return its stats."""
    worker = Worker(client, burst=True, **{**FAST, **options})
    try:
        return await asyncio.wait_for(worker.run(close_broker=close_broker), BURST_LIMIT_S)
    except TimeoutError:
        raise AssertionError(f"a burst worker did not return within {BURST_LIMIT_S} s "
                             f"(active: {len(worker.inflight)})") from None


@contextlib.asynccontextmanager
async def background_worker(client: Client, stop_within: float = 10.0,
                            **options: Any) -> AsyncIterator[Worker]:
    """A long-running worker on this loop, stopped (and checked to stop) on exit."""
    worker = Worker(client, **{**FAST, **options})
    running = asyncio.create_task(worker.run())
    await await_until(lambda: worker._loop is not None or running.done(), 5,
                      message="worker to start")
    try:
        yield worker
    finally:
        worker.stop()
        done, _ = await asyncio.wait({running}, timeout=stop_within)
        if not done:
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
            raise AssertionError(f"worker.stop() did not return within {stop_within} s")
        running.result()  # re-raise whatever the worker died of


async def deliveries_of_dead_workers(broker: RedisBroker | MemoryBroker, recoveries: int,
                                     started: bool, queue: str = "default") -> None:
    """The one message on ``queue`` taken by a worker that died, then recovered
    ``recoveries`` times by workers that died too: after starting it (``started``, each
    start counted as a worker counts it) or holding it unstarted."""
    await broker.prepare([queue])
    assert len(await broker.fetch([queue], "dead-worker", 10, 10)) == 1
    for n in range(recoveries):
        claimed, _ = await broker.recover(queue, "dead-worker", 0, 10)
        assert [d.delivery_count for d in claimed] == [n + 2]
        if started:
            assert await broker.start_recovered("dead-worker", claimed[0]) == n + 1


def raw_redis(broker: RedisBroker) -> redis.Redis:
    return broker.sync.client


def inject(broker: RedisBroker | MemoryBroker, queue: str, payload: bytes,
           message_id: str = "raw") -> None:
    """Put bytes on a queue as if a producer had sent them (no encoding, no checks)."""
    broker.enqueue([Enqueue(queue, message_id, payload)])


def is_fast(broker: RedisBroker | MemoryBroker, queue: str = "default") -> bool:
    """True when ``queue`` is in fast mode on this broker (lists, at-most-once)."""
    return broker.mode_of(queue) == "fast"


def ready_payloads(broker: RedisBroker, queue: str) -> list[bytes]:
    """The encoded messages waiting on a Redis queue's normal lane, next out first."""
    if is_fast(broker, queue):  # a list: LPUSH in, RPOP out
        return raw_redis(broker).lrange(broker.keys.queue(queue).list, 0, -1)[::-1]
    return [fields[b"m"] for _, fields in
            raw_redis(broker).xrange(broker.keys.queue(queue).stream)]


def ready_message_ids(broker: RedisBroker | MemoryBroker, queue: str) -> list[str]:
    """Ids of the messages waiting on the queue (delivered or not)."""
    if isinstance(broker, MemoryBroker):
        q = broker._queue(queue)
        payloads = [p for _, p in q.ready] + [p.payload for p in q.pending.values()]
    else:
        payloads = ready_payloads(broker, queue)
    return [decode(p).id for p in payloads if p]


def pending_count(broker: RedisBroker | MemoryBroker, queue: str) -> int:
    return broker.queue_stats(queue)["in_flight"]


def dead_letter_ids(broker: RedisBroker | MemoryBroker, queue: str) -> list[str]:
    if isinstance(broker, MemoryBroker):
        return list(broker._queue(queue).dead)
    members = raw_redis(broker).zrange(broker.keys.queue(queue).dead_letters, 0, -1)
    return [m.decode() for m in members]
