"""Rate limits at run time: the bucket script, deferral without an attempt, shared buckets,
both brokers, and a take that fails (docs/rate-limits.md)."""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

import pytest

from blitzq_django.engine import Client, MemoryBroker, RedisBroker, current_task
from blitzq_django.engine.core import record as states
from blitzq_django.engine.core.ids import now_ms
from blitzq_django.engine.core.message import decode
from blitzq_django.engine.core.rates import Rate
from blitzq_django.engine.errors import BrokerUnavailable
from blitzq_django.engine.worker import ratelimit

from ..support.waiting import await_until
from .helpers import background_worker, dead_letter_ids, raw_redis

Broker = RedisBroker | MemoryBroker


def scheduled(broker: Broker, queue: str, message_id: str) -> tuple[int | None, Any]:
    """(due ms, decoded message) of a message on the schedule, or (None, None)."""
    due = broker.scheduled_due_ms(queue, message_id)
    payload = broker.scheduled_payload(queue, message_id)
    return due, decode(payload) if payload else None


class Takes:
    """Counts the broker's take_tokens calls (and can make them fail)."""

    def __init__(self, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fail_next = 0
        self.error: BaseException = BrokerUnavailable("Redis at redis://x did not answer")
        self.gate: asyncio.Event | None = None
        real = broker.take_tokens

        async def take_tokens(bucket: str, capacity: float, refill_per_ms: float,
                              wanted: int) -> tuple[int, int]:
            self.calls.append((bucket, wanted))
            if self.gate is not None:
                await self.gate.wait()
            if self.fail_next:
                self.fail_next -= 1
                raise self.error
            return await real(bucket, capacity, refill_per_ms, wanted)

        monkeypatch.setattr(broker, "take_tokens", take_tokens)

    @property
    def wanted(self) -> int:
        return sum(w for _, w in self.calls)


# -- the bucket script ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_bucket_grants_refuses_and_refills(redis_broker: RedisBroker) -> None:
    rate = Rate(10, 1)  # capacity 10, a token every 100 ms
    loop = asyncio.get_running_loop()
    begun = loop.time()
    granted, wait = await redis_broker.take_tokens("b", rate.capacity, rate.refill_per_ms, 12)
    assert (granted, wait) == (10, 100)  # the capacity at once; the rest in 100 ms
    assert await redis_broker.take_tokens("b", rate.capacity, rate.refill_per_ms, 0) == (0, 0)
    # Tokens come back at the rate, by the server's clock: the next one about 100 ms on.
    await await_until(lambda: _granted(redis_broker, "b", rate, 1), 5,
                      message="a token to come back")
    assert loop.time() - begun >= 0.1 - 0.01  # GRACE_MS early at most
    fields = raw_redis(redis_broker).hgetall(redis_broker.keys.rate_bucket("b"))
    assert set(fields) == {b"t", b"ts", b"d"}
    # The bucket expires once it would be full again (and past its horizon) + 1 s.
    ttl = raw_redis(redis_broker).pttl(redis_broker.keys.rate_bucket("b"))
    assert 1000 < ttl <= 1000 + 3000


@pytest.mark.asyncio
async def test_refusing_takes_no_token_and_spaces_the_refused(broker: Broker) -> None:
    rate = Rate(10, 60)  # a token every 6 s: nothing comes back during the test
    granted, wait = await broker.take_tokens("b", rate.capacity, rate.refill_per_ms, 14)
    assert granted == 10
    assert 5900 <= wait <= 6000  # the first of the 4 refused, when the next token is due
    # A second batch is told to come after the 4 refused before it, not with them.
    granted, wait2 = await broker.take_tokens("b", rate.capacity, rate.refill_per_ms, 2)
    assert granted == 0
    assert wait2 == pytest.approx(wait + 4 * 6000, abs=200)
    # Nothing was reserved: a bucket that refilled grants again at once, whatever it refused.
    fresh = Rate(1000, 1)
    await broker.take_tokens("c", fresh.capacity, fresh.refill_per_ms, 1000)
    await broker.take_tokens("c", fresh.capacity, fresh.refill_per_ms, 1000)  # refused
    await await_until(lambda: _granted(broker, "c", fresh, 1), 5,
                      message="a token of the refilling bucket")


async def _granted(broker: Broker, bucket: str, rate: Rate, wanted: int) -> bool:
    got, _ = await broker.take_tokens(bucket, rate.capacity, rate.refill_per_ms, wanted)
    return got == wanted


@pytest.mark.asyncio
async def test_buckets_are_per_namespace_and_per_name(redis_url: str,
                                                      redis_broker: RedisBroker) -> None:
    other = RedisBroker(redis_url, namespace=redis_broker.keys.namespace + "x")
    try:
        rate = Rate(1, 60)
        assert (await redis_broker.take_tokens("b", rate.capacity, rate.refill_per_ms, 1))[0]
        assert not (await redis_broker.take_tokens("b", rate.capacity, rate.refill_per_ms, 1))[0]
        assert (await redis_broker.take_tokens("b2", rate.capacity, rate.refill_per_ms, 1))[0]
        assert (await other.take_tokens("b", rate.capacity, rate.refill_per_ms, 1))[0]
    finally:
        await other.aclose()
        keys = list(raw_redis(redis_broker).scan_iter(match=other.keys.all_keys_pattern()))
        if keys:
            raw_redis(redis_broker).delete(*keys)
        other.close()


# -- the worker -------------------------------------------------------------------


@pytest.mark.asyncio
async def test_over_the_limit_a_message_is_deferred_without_using_an_attempt(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    client = Client(broker, track_state=True)
    takes = Takes(broker, monkeypatch)
    ran: list[str] = []

    @client.task(name="limited", rate_limit="2/m", retries=0)
    async def limited(i: int) -> int:
        ran.append(current_task().id)  # type: ignore[union-attr]
        return i

    handles = [await limited.aenqueue(i) for i in range(3)]
    async with background_worker(client) as worker:
        await await_until(lambda: len(ran) == 2, 5, message="the first two to run")
        (late,) = [h for h in handles if h.id not in ran]
        due, message = await await_until(lambda: _on_schedule(broker, late.id), 5,
                                         message="the third to be deferred")
        # Deferred to when the bucket has a token again (2/m: one every 30 s), as the
        # same attempt: no attempt used, though retries=0 allows no other.
        assert now_ms() + 25_000 <= due <= now_ms() + 31_000
        assert message.attempt == 1 and message.eta_ms == due
        record = late.inspect()
        assert record is not None and record.state == states.SCHEDULED
        assert record.attempt == 1
        # Acked and settled: the worker holds nothing meanwhile.
        await await_until(lambda: len(worker.inflight) == 0, 5, message="nothing held")
        assert worker.stats.retried == 0 and worker.stats.dead_lettered == 0
    for h in handles:
        if h.id in ran:
            assert (await h.aresult(5)) in (0, 1, 2)
    assert [b for b, _ in takes.calls] == ["limited"] * len(takes.calls)


def _on_schedule(broker: Broker, message_id: str) -> tuple[int, Any] | None:
    due, message = scheduled(broker, "default", message_id)
    return (due, message) if due is not None else None


@pytest.mark.asyncio
async def test_deferred_messages_run_later_at_the_rate_without_polling(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    client = Client(broker)
    takes = Takes(broker, monkeypatch)
    started: dict[int, int] = {}
    attempts: list[int] = []

    @client.task(name="limited", rate_limit="10/s")
    async def limited(i: int) -> None:
        started[i] = now_ms()
        attempts.append(current_task().attempt)  # type: ignore[union-attr]

    count = 16
    await client.aenqueue_many(limited.spec, [((i,), {}) for i in range(count)])
    async with background_worker(client, concurrency=4, batch_size=50) as worker:
        # Started, then settled: the last settlement is written just after its body runs.
        await await_until(lambda: worker.stats.succeeded == count, 10,
                          message="every message to run and settle")
        assert len(started) == count and worker.stats.retried == 0
    assert attempts == [1] * count
    times = sorted(started.values())
    # 10 at once (the bucket's capacity), then the 6 others 100 ms apart: the last about
    # 600 ms after the first, never earlier.
    assert times[-1] - times[0] >= 600 - 10
    # No polling: each deferred message asked for a token again about once.
    assert takes.wanted <= count + 2 * (count - 10)


@pytest.mark.asyncio
async def test_a_named_bucket_is_shared_by_the_tasks_that_name_it(broker: Broker) -> None:
    client = Client(broker, rate_limits={"shared": "3/m", "geo:IN": "1/m", "geo:US": "1/m"})
    ran: list[str] = []

    @client.task(name="a", rate_key="shared")
    async def a(i: int) -> None:
        ran.append(f"a{i}")

    @client.task(name="b", rate_key="shared")
    def b(i: int) -> None:
        ran.append(f"b{i}")

    @client.task(name="geo", rate_key=lambda country, **_: f"geo:{country}")
    async def geo(country: str, n: int = 0) -> None:
        ran.append(f"geo:{country}")

    handles = [await a.aenqueue(1), await b.aenqueue(1), await a.aenqueue(2),
               await b.aenqueue(2)]
    geos = [await geo.aenqueue("IN"), await geo.aenqueue("IN", n=1), await geo.aenqueue("US")]
    async with background_worker(client) as worker:
        await await_until(lambda: len(ran) == 5 and worker.stats.succeeded == 5, 5,
                          message="3 of the shared bucket and 1 of each country to run")
        # The others wait on the schedule, not in the worker.
        waiting = [h for h in handles + geos if _on_schedule(broker, h.id)]
        await await_until(lambda: len(worker.inflight) == 0, 5, message="the worker to settle")
    assert len([r for r in ran if not r.startswith("geo")]) == 3
    assert collections.Counter(r for r in ran if r.startswith("geo")) == {"geo:IN": 1,
                                                                          "geo:US": 1}
    assert len(waiting) == 2


@pytest.mark.asyncio
async def test_rate_key_with_its_own_rate_limit(broker: Broker) -> None:
    client = Client(broker)  # no rate_limits: the task's own rate names the bucket's rate
    ran: list[int] = []

    @client.task(name="t", rate_key=lambda user: f"user:{user}", rate_limit="1/m")
    async def t(user: int) -> None:
        ran.append(user)

    for user in (1, 1, 2, 3):
        await t.aenqueue(user)
    async with background_worker(client) as worker:
        await await_until(lambda: worker.stats.succeeded == 3, 5, message="one per user")
    assert sorted(ran) == [1, 2, 3]


@pytest.mark.parametrize("key", [lambda: "nope", lambda: None, lambda: "a b",
                                 lambda: {}["missing"]], ids=["unknown", "none", "invalid",
                                                              "raises"])
@pytest.mark.asyncio
async def test_a_rate_key_naming_no_bucket_fails_the_attempt_without_retry(
        broker: Broker, key: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(broker, rate_limits={"known": "5/s"})
    ran: list[int] = []

    @client.task(name="t", rate_key=key, retries=3, initial_delay=0)
    async def t() -> None:
        ran.append(1)

    h = await t.aenqueue()
    with caplog.at_level(logging.ERROR, "blitzq.worker"):
        async with background_worker(client):
            record = await client.aget_result(h.id, 5)
    assert ran == []
    assert record.state == states.DEAD_LETTERED and record.attempt == 1
    assert record.reason == "not retryable"
    (letter,) = client.dead_letters.list()
    assert letter.reason == "not retryable" and letter.attempt == 1
    assert letter.error_type == "ConfigurationError"
    assert record.error_type == "ConfigurationError"
    assert "task 't': " in record.error_message and "rate" in record.error_message
    assert dead_letter_ids(broker, "default") == [h.id]
    assert "dead-lettered (not retryable): ConfigurationError" in caplog.text


@pytest.mark.asyncio
async def test_a_string_rate_key_missing_from_rate_limits_is_reported_and_fails(
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(broker, rate_limits={"known": "5/s"})

    @client.task(name="t", rate_key="unknown", dead_letter=False)
    async def t() -> None: ...

    h = await t.aenqueue()
    with caplog.at_level(logging.ERROR, "blitzq.worker"):
        async with background_worker(client):
            record = await client.aget_result(h.id, 5)
            # Said once at start, before any message arrives.
            assert "names rate bucket 'unknown', which is not in the client's rate_limits" \
                in caplog.text
    assert record.state == states.FAILED  # dead_letter=False: the failure is recorded
    assert "rate bucket 'unknown' has no rate" in record.error_message
    assert "known: 'known'" in record.error_message


@pytest.mark.asyncio
async def test_unlimited_tasks_never_wait_on_the_bucket(broker: Broker,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    client = Client(broker)
    takes = Takes(broker, monkeypatch)

    @client.task(name="free")
    async def free() -> None: ...

    await client.aenqueue_many(free.spec, [((), {})] * 20)
    async with background_worker(client) as worker:
        await await_until(lambda: worker.stats.succeeded == 20, 5, message="all to run")
    assert takes.calls == []


# -- a take that fails -----------------------------------------------------------


@pytest.mark.parametrize("error", [BrokerUnavailable("down"), RuntimeError("bug")],
                         ids=["redis-down", "anything"])
@pytest.mark.asyncio
async def test_a_failed_take_defers_the_message_which_still_settles(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, error: BaseException,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(ratelimit, "DEFER_ON_ERROR_MS", 200)
    client = Client(broker)
    takes = Takes(broker, monkeypatch)
    takes.fail_next, takes.error = 2, error
    attempts: list[int] = []

    @client.task(name="limited", rate_limit="100/s")
    async def limited() -> str:
        attempts.append(current_task().attempt)  # type: ignore[union-attr]
        return "ran"

    h = await limited.aenqueue()
    with caplog.at_level(logging.WARNING, "blitzq.worker"):
        async with background_worker(client) as worker:
            assert await h.aresult(5) == "ran"
            await await_until(lambda: len(worker.inflight) == 0, 5, message="nothing held")
    assert attempts == [1]  # deferred twice, run once, as attempt 1
    assert len(takes.calls) == 3
    assert "taking tokens failed" in caplog.text


@pytest.mark.asyncio
async def test_a_take_still_waiting_at_shutdown_hands_the_message_back(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    client = Client(broker)
    takes = Takes(broker, monkeypatch)
    takes.gate = asyncio.Event()  # every take waits until this is set

    @client.task(name="limited", rate_limit="100/s")
    async def limited() -> None: ...

    h = await limited.aenqueue()
    async with background_worker(client) as worker:
        await await_until(lambda: takes.calls, 5, message="the take to start")
        assert len(worker.inflight) == 1
    # Stopped while the take waited: the message was requeued, not lost nor held.
    stats = await client.aqueue_stats()
    assert stats.ready == 1 and stats.in_flight == 0
    takes.gate.set()
    async with background_worker(client):
        assert (await client.aget_result(h.id, 5)).succeeded
