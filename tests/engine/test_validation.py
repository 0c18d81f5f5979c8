"""Hostile input end to end: refused at enqueue with nothing written, or dead-lettered
as malformed by the worker without running, and namespaces that cannot collide."""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis

from blitzq_django.engine import (
    Client,
    ConfigurationError,
    DeadLetter,
    MessageEncodeError,
    RedisBroker,
)
from blitzq_django.engine.core.message import pack

from .helpers import inject, pending_count, run_burst


def keys_of(broker: RedisBroker, redis_client: redis.Redis) -> list[bytes]:
    return list(redis_client.scan_iter(match=broker.keys.all_keys_pattern(), count=1000))


@pytest.mark.parametrize(
    "options",
    [{"task_id": 123}, {"queue": 5}, {"queue": "a:b"}, {"retries": True}, {"retries": 1.5},
     {"initial_delay": math.nan}, {"delay": math.nan}, {"delay": math.inf}, {"delay": 1e300}],
)
def test_hostile_options_write_nothing_to_redis(redis_broker: RedisBroker,
                                                redis_client: redis.Redis,
                                                options: dict[str, Any]) -> None:
    client = Client(redis_broker)

    @client.task(name="t")
    def t(x: Any) -> None:
        return None

    with pytest.raises(ConfigurationError, match=next(iter(options))):
        t.options(**options).enqueue(1)
    with pytest.raises(MessageEncodeError, match=r"kwargs\['x'\]"):
        t.enqueue(x={(1, 2): "tuple key"})
    assert keys_of(redis_broker, redis_client) == []


@pytest.mark.parametrize("attempt", [-3, 0, 10**9])
def test_message_with_absurd_attempt_is_dead_lettered_not_run(redis_broker: RedisBroker,
                                                              attempt: int) -> None:
    # attempt -3 with retries=2 used to run 7 times.
    client = Client(redis_broker)
    runs: list[int] = []

    @client.task(name="good", retries=2)
    def good(i: int) -> int:
        runs.append(i)
        raise RuntimeError("fails")

    inject(redis_broker, "default", pack([1, "evil", "good", "default", [0], {}, attempt, 0,
                                          None, None, None, {}, None]))
    run_burst(client)
    body = redis_broker.dead_letter("default", "evil")
    assert body is not None
    assert DeadLetter.from_bytes(body).reason == "malformed message"
    assert runs == []
    assert pending_count(redis_broker, "default") == 0


def test_namespace_pattern_does_not_reach_a_longer_namespace(redis_url: str, namespace: str,
                                                             redis_client: redis.Redis) -> None:
    # Purging namespace "blitzq" once deleted every key of "blitzq2" too.
    short, longer = RedisBroker(redis_url, namespace=namespace), RedisBroker(
        redis_url, namespace=namespace + "2")
    try:
        for broker in (short, longer):
            Client(broker).task(name="t")(lambda: None).options(delay=60).enqueue()
        own, other = keys_of(short, redis_client), keys_of(longer, redis_client)
        assert own and other
        assert not set(own) & set(other)
    finally:
        for broker in (short, longer):
            keys = keys_of(broker, redis_client)
            if keys:
                redis_client.delete(*keys)
            broker.close()
