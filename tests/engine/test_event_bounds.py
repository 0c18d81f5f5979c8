"""Readers of an events stream bound what they decode: a forged entry (any client of the
Redis may XADD one) costs a reader its bytes, not a hundred times them, and a forged
number (a huge duration) neither reads as a plausible one nor breaks the metrics fold.
A real Redis: the forged entries are written as an attacker would, with XADD."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
import redis

from blitzq_django.engine import Client, RedisBroker
from blitzq_django.engine import metrics as engine_metrics
from blitzq_django.engine.core import events as ev

#: A msgpack array of 1 MiB empty arrays (0x90 each): 1 MiB on the wire, and over 60 MiB
#: of Python lists once decoded without bounds.
FORGED_ARRAYS = b"\xdd" + (1 << 20).to_bytes(4, "big") + b"\x90" * (1 << 20)


def real_event(kind: str, id_: str, time_ms: int, **more: Any) -> bytes:
    fields = [kind, id_, "t.task", time_ms, more.get("attempt"), "w", more.get("duration"),
              None]
    return msgpack.packb(fields, use_bin_type=True)


def peak_bytes(read: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        found = read()
        return found, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def stream(redis_broker: RedisBroker, redis_client: redis.Redis) -> str:
    key = redis_broker.keys.queue("default").events
    redis_client.xadd(key, {"e": real_event(ev.ENQUEUED, "a1", 1_700_000_000_000)})
    redis_client.xadd(key, {"e": FORGED_ARRAYS})
    redis_client.xadd(key, {"e": b"\x90" * (ev.EVENT_MAX_BYTES + 1)})  # too big to decode
    redis_client.xadd(key, {"e": real_event(ev.STARTED, "a1", 1_700_000_000_005, attempt=1)})
    return key


def test_a_forged_entry_costs_a_reader_its_bytes_not_a_hundred_times_them(
        redis_broker: RedisBroker, stream: str) -> None:
    client = Client(redis_broker)
    # The XRANGE path (the metrics folder, the dashboard, `blitzq events`).
    found, peak = peak_bytes(lambda: client.events("default", count=10))
    assert [(e.kind, e.id) for e in found] == [(ev.ENQUEUED, "a1"), (ev.STARTED, "a1")]
    assert peak < 8 << 20, peak  # the 1 MiB reply and a little: not 60 MiB of lists
    # The consumer-group path (the history writer): the forged entries are skipped.
    found, peak = peak_bytes(lambda: client.read_events("default", "readers", "r1", 10))
    assert [(e.kind, e.id) for e in found] == [(ev.ENQUEUED, "a1"), (ev.STARTED, "a1")]
    assert peak < 8 << 20, peak


@pytest.mark.asyncio
async def test_the_async_reader_is_bounded_too(redis_broker: RedisBroker, stream: str) -> None:
    client = Client(redis_broker)
    await client.aevents("default", count=10)  # connected: the pool is not measured
    tracemalloc.start()
    try:
        found = await client.aevents("default", count=10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [e.kind for e in found] == [ev.ENQUEUED, ev.STARTED]
    assert peak < 8 << 20, peak
    await asyncio.sleep(0)


def test_out_of_range_numbers_read_as_unknown() -> None:
    huge = 2**64 - 1
    event = ev.parse("1-0", "q", msgpack.packb(
        [ev.SUCCEEDED, "a", "t", 1_700_000_000_000, huge, "w", huge, None]))
    assert event is not None and event.attempt is None and event.duration_ms is None
    event = ev.parse("1-0", "q", msgpack.packb(
        [ev.SUCCEEDED, "a", "t", 1_700_000_000_000, 0, "w", -5, None]))
    assert event is not None and event.attempt is None and event.duration_ms is None
    event = ev.parse("1-0", "q", msgpack.packb(
        [ev.SUCCEEDED, "a", "t", 1_700_000_000_000, 3, "w", 250, None]))
    assert event is not None and (event.attempt, event.duration_ms) == (3, 250)


def test_a_forged_huge_duration_and_huge_times_leave_the_metrics_right(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = Client(redis_broker)
    key = redis_broker.keys.queue("default").events
    huge = 2**63 - 1
    for e in (real_event(ev.ENQUEUED, "f", huge), real_event(ev.STARTED, "f", 0, attempt=1),
              real_event(ev.SUCCEEDED, "f", 5, attempt=1, duration=huge),
              real_event(ev.ENQUEUED, "g", 1_700_000_000_000),
              real_event(ev.STARTED, "g", huge, attempt=1),
              real_event(ev.ENQUEUED, "h", 1_700_000_000_000),
              real_event(ev.STARTED, "h", 1_700_000_000_020, attempt=1),
              real_event(ev.SUCCEEDED, "h", 1_700_000_000_050, attempt=1, duration=30)):
        redis_client.xadd(key, {"e": e})
    for _ in range(3):  # folded again and again: nothing overflows
        found = engine_metrics.collect(client, "default")
    assert found.counters[ev.SUCCEEDED] == 2 and found.counters[ev.STARTED] == 3
    assert found.duration.count == 1 and found.duration.sum_ms == 30  # the forged: unknown
    # "f" started before its enqueue (clocks disagree: 0), "g" ages after it (not counted)
    assert found.latency.count == 2 and found.latency.sum_ms == 20
