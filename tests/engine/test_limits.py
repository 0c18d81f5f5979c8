"""Sizes, retention and duplicates: big messages, dead-letter caps, record TTLs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis

from blitzq_django.engine import Client, MemoryBroker, RedisBroker, current_task
from blitzq_django.engine.core import record as states
from blitzq_django.engine.core.deadletter import DeadLetter
from blitzq_django.engine.worker.outcome import KEPT_PAYLOAD_BYTES

from .helpers import background_worker, dead_letter_ids, ready_message_ids, run_burst


@pytest.fixture
def like(request: pytest.FixtureRequest) -> Callable[..., RedisBroker | MemoryBroker]:
    """Make a broker on the same data as another (same namespace), with other settings."""

    def make(broker: RedisBroker | MemoryBroker, **options: Any) -> RedisBroker | MemoryBroker:
        if isinstance(broker, MemoryBroker):
            return MemoryBroker(**options)
        other = RedisBroker(broker.url, namespace=broker.keys.namespace, **options)
        request.addfinalizer(other.close)
        return other

    return make


def test_big_binary_message_survives_retry_and_dead_letter(client: Client) -> None:
    blob = bytes(range(256)) * 4096  # 1 MiB, every byte value

    @client.task(name="big", retries=1, initial_delay=0)
    def big(data: bytes) -> bytes:
        if current_task().attempt == 1:  # type: ignore[union-attr]
            raise ValueError("once more")  # the retry carries the whole message back
        return data[::-1]

    @client.task(name="dies")
    def dies(data: bytes) -> None:
        raise ValueError("dead with a big payload")

    h = big.enqueue(blob)
    d = dies.enqueue(blob)
    run_burst(client)
    assert h.result(timeout=5) == blob[::-1]
    body = client.broker.dead_letter("default", d.id)
    assert body is not None
    from blitzq_django.engine import DeadLetter

    letter = DeadLetter.from_bytes(body)
    assert letter.message is not None and letter.message.args == [blob]


def test_dead_letters_are_capped_oldest_first(broker: Any, like: Any) -> None:
    capped = like(broker, dead_letter_max=3)
    client = Client(capped)

    @client.task(name="bad")
    def bad(i: int) -> None:
        raise ValueError(i)

    ids = [bad.enqueue(i).id for i in range(5)]
    run_burst(client, concurrency=1)
    kept = dead_letter_ids(capped, "default")
    assert len(kept) == 3
    # Oldest first by dead-letter time (its record's finish time); letters of the same
    # millisecond may go in either order.
    when = {i: client.get_result(i).finished_ms for i in ids}
    dropped = [i for i in ids if i not in kept]
    assert max(when[i] for i in dropped) <= min(when[i] for i in kept)
    for gone in dropped:
        assert capped.dead_letter("default", gone) is None  # the body went with it
    assert capped.queue_stats("default")["dead_letters"] == 3


def test_records_expire_after_record_ttl(redis_broker: RedisBroker, redis_client: redis.Redis,
                                         like: Any) -> None:
    short = like(redis_broker, record_ttl=7)
    client = Client(short)

    @client.task(name="t")
    def t() -> int:
        return 1

    h = t.enqueue()
    run_burst(client)
    assert h.result(timeout=5) == 1
    ttl = redis_client.ttl(redis_broker.keys.queue("default").record(h.id))
    assert 0 < ttl <= 7


def test_idempotency_key_repeated_inside_one_batch(client: Client) -> None:
    ran: list[int] = []

    @client.task(name="t")
    def t(i: int) -> None:
        ran.append(i)

    handles = t.options(idempotency_key="same").enqueue_many([(1,), (2,), (3,)])
    assert len({h.id for h in handles}) == 1
    run_burst(client)
    assert ran == [1]


def test_idempotency_key_dedups_scheduled_messages(client: Client) -> None:
    @client.task(name="t")
    def t() -> None:
        return None

    first = t.options(delay=60, idempotency_key="nightly").enqueue()
    again = t.options(delay=60, idempotency_key="nightly").enqueue()
    assert again.id == first.id
    assert client.broker.queue_stats("default")["scheduled"] == 1


@pytest.mark.asyncio
async def test_requeued_on_stop_is_not_shown_as_running(broker: Any) -> None:
    client = Client(broker, track_state=True)
    never = asyncio.Event()

    @client.task(name="hang")
    async def hang() -> None:
        await never.wait()

    h = await hang.aenqueue()
    async with background_worker(client, shutdown_timeout=0.2) as worker:
        await asyncio.wait_for(_until_running(client, h.id), 5)
        assert worker is not None
    assert ready_message_ids(broker, "default") == [h.id]  # back on the queue
    record = client.inspect(h.id)
    assert record is not None
    # It waits on the queue again: "running" would send an operator after a ghost.
    assert record.state == states.QUEUED


async def _until_running(client: Client, message_id: str) -> None:
    from ..support.waiting import await_until

    await await_until(lambda: (r := client.inspect(message_id)) is not None
                      and r.state == states.RUNNING, 5, message="running record")


def test_message_over_the_workers_size_limit_is_dead_lettered(broker: Any) -> None:
    producer = Client(broker)  # 8 MiB limit
    consumer = Client(broker, max_message_size=64 * 1024)  # a worker configured smaller
    for c in (producer, consumer):

        @c.task(name="t")
        def t(data: bytes) -> int:
            return len(data)

    big = producer.enqueue(producer.registry.get("t"), (b"x" * 200_000,))
    small = producer.enqueue(producer.registry.get("t"), (b"x" * 10,))
    run_burst(consumer)
    assert small.result(timeout=5) == 10
    raw = consumer.broker.dead_letter("default", big.id)
    assert raw is not None
    assert dead_letter_ids(broker, "default") == [big.id]
    # Only its start is kept (with its size): enough to see what it was.
    letter = DeadLetter.from_bytes(raw)
    assert letter.truncated and letter.payload_size is not None
    assert letter.payload_size > 200_000
    assert len(letter.payload) == KEPT_PAYLOAD_BYTES
    assert "over max_message_size" in (letter.error_message or "")


@pytest.mark.asyncio
async def test_aenqueue_many_over_one_batch(client: Client) -> None:
    from .helpers import arun_burst

    seen: set[int] = set()

    @client.task(name="t")
    async def t(i: int) -> None:
        seen.add(i)

    handles = await t.aenqueue_many([(i,) for i in range(1500)])
    assert len({h.id for h in handles}) == 1500
    await arun_burst(client, concurrency=200)
    assert seen == set(range(1500))
