"""Shared fixtures: a real Redis per test session, a fresh namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from blitzq_django.engine import Client, MemoryBroker, RedisBroker

from .support.redis_server import RedisServer, url_from_env


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """REDIS_URL when set; otherwise a redis-server of our own on a free port."""
    url = url_from_env()
    if url:
        yield url
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def redis_broker(redis_url: str, namespace: str,
                 redis_client: redis.Redis) -> Iterator[RedisBroker]:
    broker = RedisBroker(redis_url, namespace=namespace)
    yield broker
    broker.close()
    keys = list(redis_client.scan_iter(match=broker.keys.all_keys_pattern(), count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture(params=["redis", "memory"])
def broker(request: pytest.FixtureRequest) -> RedisBroker | MemoryBroker:
    """Each behaviour test runs against both brokers."""
    if request.param == "memory":
        return MemoryBroker()
    return request.getfixturevalue("redis_broker")


@pytest.fixture
def client(broker: RedisBroker | MemoryBroker) -> Client:
    return Client(broker)
