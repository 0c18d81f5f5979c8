"""The events' ninth element (Event.detail), written when a broker is told so
(``event_details=True``, set by the Django glue while HISTORY is not "off"): the encoded
message on enqueued, scheduled and replayed; [error message, traceback, message] on
failures. Both brokers; and nothing of it with the flag off."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from blitzq_django.engine import Client, MemoryBroker, RedisBroker, Worker
from blitzq_django.engine.core import events as ev
from blitzq_django.engine.core.message import decode


@pytest.fixture(params=["redis", "memory"])
def detailed(request: pytest.FixtureRequest, redis_url: str, namespace: str,
             redis_client: Any) -> Iterator[Client]:
    if request.param == "memory":
        yield Client(MemoryBroker(event_details=True))
        return
    broker = RedisBroker(redis_url, namespace=namespace, event_details=True)
    yield Client(broker)
    broker.close()
    keys = list(redis_client.scan_iter(match=broker.keys.all_keys_pattern(), count=1000))
    if keys:
        redis_client.delete(*keys)


def _run_until_idle(client: Client, n: int) -> None:
    async def main() -> None:
        worker = Worker(client, concurrency=4, block_timeout=0.05)
        task = asyncio.create_task(worker.run(close_broker=True))
        deadline = asyncio.get_running_loop().time() + 20
        while sum(e.terminal for e in client.events("default", count=10_000)) < n:
            assert asyncio.get_running_loop().time() < deadline, "tasks did not finish"
            await asyncio.sleep(0.01)  # (noqa: sleep) the poll step of a deadline-bounded wait
        worker.stop()
        await task

    asyncio.run(main())


def test_enqueue_side_and_failure_events_carry_details(detailed: Client) -> None:
    @detailed.task(name="d.ok")
    def ok(x: int, *, y: str = "") -> int:
        return x

    @detailed.task(name="d.bad", retries=1, initial_delay=0.01, jitter=False)
    def bad(x: int) -> None:
        raise KeyError(f"missing {x}")

    first = ok.options(idempotency_key="k-1").enqueue(1, y="z")
    later = ok.options(delay=0.05).enqueue(2)
    many = ok.enqueue_many([(3,), (4,)])
    doomed = bad.enqueue(9)
    _run_until_idle(detailed, 5)
    found = detailed.events("default", count=10_000)
    by_kind: dict[tuple[str, str], ev.Event] = {(e.id, e.kind): e for e in found}
    message = decode(by_kind[(first.id, ev.ENQUEUED)].detail)
    assert (message.args, message.kwargs, message.idempotency_key) == ([1], {"y": "z"}, "k-1")
    assert decode(by_kind[(later.id, ev.SCHEDULED)].detail).args == [2]
    assert [decode(by_kind[(h.id, ev.ENQUEUED)].detail).args for h in many] == [[3], [4]]
    retried, dead = by_kind[(doomed.id, ev.RETRIED)], by_kind[(doomed.id, ev.DEAD_LETTERED)]
    for failure in (retried, dead):
        error, trace, payload = failure.detail
        assert error == "'missing 9'" and "KeyError" in trace
        assert decode(payload).args == [9]
    # Outcomes without a failure, and starts, carry nothing more.
    assert by_kind[(first.id, ev.SUCCEEDED)].detail is None
    assert by_kind[(first.id, ev.STARTED)].detail is None
    # A replayed dead letter: its message again.
    assert detailed.dead_letters.replay(doomed.id, queue="default") == 1
    replayed = [e for e in detailed.events("default", count=10_000) if e.kind == ev.REPLAYED]
    assert decode(replayed[-1].detail).args == [9]


def test_large_messages_and_long_tracebacks_are_cut() -> None:
    assert ev.message_detail(b"x" * (ev.DETAIL_MAX_MESSAGE + 1)) == ev.DETAIL_MAX_MESSAGE + 1
    assert ev.message_detail(b"abc") == b"abc" and ev.message_detail(b"") is None

    class Failure:
        error_message = "e" * 10_000
        traceback = "line\n" * 10_000

    class Settled:
        failure = Failure()
        letter = None

        class delivery:  # noqa: N801 - a stand-in for Delivery
            payload = b"m"

    error, trace, payload = ev.failure_detail(Settled())
    assert len(error) == ev.DETAIL_MAX_ERROR and error.endswith("...")
    assert len(trace) == ev.DETAIL_MAX_TRACEBACK and trace.startswith("...")
    assert payload == b"m"


def test_no_details_without_the_flag(redis_url: str, namespace: str, redis_client: Any) -> None:
    broker = RedisBroker(redis_url, namespace=namespace)
    client = Client(broker)

    @client.task(name="d.plain")
    def plain() -> None:
        return None

    plain.enqueue()
    plain.options(idempotency_key="k").enqueue()
    raw = redis_client.xrange(broker.keys.queue("default").events)
    assert [len(msgpack.unpackb(fields[b"e"])) for _id, fields in raw] == [8, 8]
    assert all(e.detail is None for e in client.events("default"))
    broker.close()
    redis_client.delete(*redis_client.scan_iter(match=broker.keys.all_keys_pattern()))
