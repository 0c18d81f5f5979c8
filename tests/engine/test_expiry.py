"""expires=: a message not started by then is dropped, recorded expired and counted;
per task and per call, in seconds, as a timedelta or an aware datetime; checked again
right before a prefetched message starts; bad values refused where they are given."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time
from typing import Any

import pytest

from blitzq_django.engine import (
    Client,
    ConfigurationError,
    MemoryBroker,
    RedisBroker,
    TaskExpired,
    TaskFailed,
)
from blitzq_django.engine.core import record as states
from blitzq_django.engine.core.message import decode

from ..support.waiting import await_until, wait_until
from .helpers import background_worker, ready_payloads, run_burst


def expires_ms_of(client: Client, handle: Any) -> int:
    """The expiry written in a message (read back from where it waits)."""
    broker = client.broker
    if isinstance(broker, MemoryBroker):
        payloads = [p for _, p in broker._queue(handle.queue).ready]
    else:
        payloads = ready_payloads(broker, handle.queue)
    for payload in payloads:
        message = decode(payload)
        if message.id == handle.id:
            assert message.expires_ms is not None
            return message.expires_ms
    raise AssertionError(f"{handle.id} is not waiting on its queue")


def wait_past(ms: int) -> None:
    wait_until(lambda: time.time() * 1000 > ms + 1, 5, message="the expiry to pass")


def test_a_task_expiry_drops_what_did_not_start_in_time(client: Client) -> None:
    ran: list[str] = []

    @client.task(name="brief", expires=0.05)
    def brief(tag: str) -> str:
        ran.append(tag)
        return tag

    h = brief.enqueue("late")
    wait_past(expires_ms_of(client, h))
    stats = run_burst(client)
    assert ran == []
    assert (stats.expired, stats.succeeded) == (1, 0)
    record = h.record(timeout=1)
    assert record.state == states.EXPIRED
    assert record.started_ms is None and record.finished_ms is not None
    assert "expired" in (record.error_message or "")
    with pytest.raises(TaskExpired) as raised:
        h.result(timeout=1)
    assert isinstance(raised.value, TaskFailed)
    assert client.queue_stats().ready == 0 and client.queue_stats().in_flight == 0  # acked


def test_what_starts_in_time_runs(client: Client) -> None:
    @client.task(name="brief", expires=3600)
    def brief() -> int:
        return 1

    h = brief.enqueue()
    stats = run_burst(client)
    assert h.result(timeout=5) == 1
    assert stats.expired == 0


@pytest.mark.parametrize("expires", [
    0.05,
    dt.timedelta(milliseconds=50),
    "datetime",
])
def test_a_call_expiry_in_seconds_timedelta_or_aware_datetime(client: Client,
                                                              expires: Any) -> None:
    ran: list[int] = []

    @client.task(name="t", expires=3600)  # the call's own expiry wins over the task's
    def t(n: int) -> None:
        ran.append(n)

    if expires == "datetime":
        expires = dt.datetime.now(dt.timezone(dt.timedelta(hours=5))) + dt.timedelta(
            milliseconds=50)
    h = t.options(expires=expires).enqueue(1)
    kept = t.enqueue(2)
    assert expires_ms_of(client, h) < time.time() * 1000 + 1000
    wait_past(expires_ms_of(client, h))
    stats = run_burst(client)
    assert ran == [2]
    assert (stats.expired, stats.succeeded) == (1, 1)
    assert h.record(timeout=1).state == states.EXPIRED
    assert kept.result(timeout=1) is None


@pytest.mark.asyncio
async def test_a_message_that_expires_while_prefetched_is_dropped_before_it_starts(
        client: Client) -> None:
    release = asyncio.Event()
    ran: list[str] = []

    @client.task(name="blocker")
    async def blocker() -> None:
        ran.append("blocker")
        await release.wait()

    @client.task(name="brief")
    async def brief() -> None:
        ran.append("brief")

    b = await blocker.aenqueue()
    async with background_worker(client, concurrency=1) as worker:
        await await_until(lambda: ran == ["blocker"], 5, message="the blocker to start")
        h = await brief.options(expires=0.2).aenqueue()
        await await_until(lambda: len(worker.inflight) == 2, 5,
                          message="the brief message to be prefetched")
        held = next(x for x in worker.inflight if x.message and x.message.id == h.id)
        assert held.state == "prefetched"  # admitted in time, waiting for the slot
        await await_until(lambda: time.time() * 1000 > held.message.expires_ms + 1, 5,
                          message="it to expire while it waits")
        release.set()
        await b.aresult(timeout=5)
        record = await client.afinal_record(h.id, timeout=5)
    assert record.state == states.EXPIRED
    assert ran == ["blocker"]
    assert (worker.stats.expired, worker.stats.succeeded) == (1, 1)


@pytest.mark.asyncio
async def test_a_retry_past_the_expiry_expires(client: Client) -> None:
    attempts: list[int] = []

    # The worker runs before the enqueue, and the expiry leaves a loaded machine a
    # second to start the first attempt: the retry, due 1.5 s after it, is past it.
    @client.task(name="flaky", retries=3, initial_delay=1.5, jitter=False, expires=1.0)
    def flaky() -> None:
        attempts.append(1)
        raise ValueError("later")

    async with background_worker(client) as worker:
        h = await flaky.aenqueue()
        record = await client.afinal_record(h.id, timeout=15)
    assert record.state == states.EXPIRED
    assert attempts == [1]  # the first attempt started in time, its retry did not
    assert (worker.stats.retried, worker.stats.expired) == (1, 1)


def test_expired_without_stored_results_is_still_acked_and_counted(
        broker: RedisBroker | MemoryBroker) -> None:
    client = Client(broker, store_results=False)

    @client.task(name="brief", expires=0.05)
    def brief() -> None:
        raise AssertionError("never runs")

    h = brief.enqueue()
    wait_past(expires_ms_of(client, h))
    stats = run_burst(client)
    assert stats.expired == 1
    assert client.inspect(h.id) is None
    assert client.queue_stats().in_flight == 0


def test_track_state_records_expired(broker: RedisBroker | MemoryBroker) -> None:
    client = Client(broker, track_state=True)

    @client.task(name="brief", expires=0.05)
    def brief() -> None:
        return None

    h = brief.enqueue()
    assert client.inspect(h.id).state == states.QUEUED  # type: ignore[union-attr]
    wait_past(expires_ms_of(client, h))
    run_burst(client)
    assert client.inspect(h.id).state == states.EXPIRED  # type: ignore[union-attr]


def test_an_expiry_writes_its_event(broker: RedisBroker | MemoryBroker) -> None:
    client = Client(broker)

    @client.task(name="brief", expires=0.05)
    def brief() -> None:
        return None

    h = brief.enqueue()
    wait_past(expires_ms_of(client, h))
    run_burst(client)
    kinds = [e.kind for e in broker.events("default", "0", 100, None) if e.id == h.id]
    assert kinds == ["enqueued", "expired"]


NAIVE = dt.datetime(2030, 1, 1)


@pytest.mark.parametrize("bad, match", [
    (NAIVE, "timezone-aware"),
    (dt.datetime(2000, 1, 1, tzinfo=dt.UTC), "in the past"),
    (math.nan, "expires must be"),
    (math.inf, "expires must be"),
    (0, "expires must be"),
    (-1, "expires must be"),
    (dt.timedelta(seconds=-1), "expires must be"),
    ("10", "expires must be"),
    (True, "expires must be"),
])
def test_bad_expiries_are_refused_where_they_are_given(client: Client, bad: Any,
                                                       match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        client.task(name="t1", expires=bad)(lambda: None)

    @client.task(name="t2")
    def t2() -> None:
        return None

    with pytest.raises(ConfigurationError, match=match):
        t2.options(expires=bad)


def test_an_aware_datetime_that_passed_by_the_enqueue_is_refused_then(client: Client) -> None:
    @client.task(name="t")
    def t() -> None:
        return None

    soon = dt.datetime.now(dt.UTC) + dt.timedelta(milliseconds=30)
    call = t.options(expires=soon)  # in the future here
    wait_until(lambda: dt.datetime.now(dt.UTC) > soon, 5, message="it to pass")
    with pytest.raises(ConfigurationError, match="in the past"):
        call.enqueue()
    assert client.queue_stats().ready == 0
