"""Shared fixtures: a real Redis per test session, a fresh namespace per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from blitzq_django.engine import Client, MemoryBroker, RedisBroker

from .support import topology
from .support.clients import drop_keys, raw_client
from .support.redis_server import RedisServer, url_from_env


@pytest.fixture(scope="session")
def single_redis_url() -> Iterator[str]:
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


def _topology_url(env: str, make: Callable[[], topology.Cluster | topology.SentinelSet],
                  ) -> Iterator[str]:
    """The URL scripts/test.py exported in ``env``, else a topology started here for
    the session (only when a test asks for it), else a skip with the reason."""
    url = os.environ.get(env)
    if url:
        yield url
        return
    why = topology.missing_reason()
    if why:
        pytest.skip(why)
    with topology.started(make()) as up:
        yield up.url if isinstance(up, topology.Cluster) else up.url()


@pytest.fixture(scope="session")
def cluster_url() -> Iterator[str]:
    """A Redis Cluster, 3 masters with a replica each: ``redis+cluster://h:p,...``.
    Shared by the whole session: never kill a node of it (fault tests start their own
    with tests.support.topology)."""
    yield from _topology_url(topology.CLUSTER_URL_ENV, topology.shared_cluster)


@pytest.fixture(scope="session")
def sentinel_url() -> Iterator[str]:
    """A Sentinel set, 1 master, 2 replicas, 3 sentinels:
    ``redis+sentinel://h:p,h:p,h:p/blitzq/0``. Shared like :func:`cluster_url`."""
    yield from _topology_url(topology.SENTINEL_URL_ENV, topology.shared_sentinels)


#: The Redis a test can run on, by param id, and the session fixture of its URL: one
#: server ("redis", the id the broker fixture always had), a Sentinel set, a Cluster.
TOPOLOGY_URLS = {"redis": "single_redis_url", "sentinel": "sentinel_url",
                 "cluster": "cluster_url"}


@pytest.fixture
def redis_topology(request: pytest.FixtureRequest) -> str:
    """Which Redis the test runs on: one server unless the test is parametrized over
    topologies (tests/engine/conftest.py does it for the engine's behaviour tests)."""
    return str(getattr(request, "param", "redis"))


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, redis_topology: str) -> str:
    """The URL of the Redis this test runs on (see ``redis_topology``); each
    topology is started once per session."""
    return str(request.getfixturevalue(TOPOLOGY_URLS[redis_topology]))


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = raw_client(redis_url)
    yield client
    client.close()


@pytest.fixture
def redis_broker(redis_url: str, namespace: str,
                 redis_client: redis.Redis) -> Iterator[RedisBroker]:
    broker = RedisBroker(redis_url, namespace=namespace)
    yield broker
    broker.close()
    drop_keys(redis_client, broker.keys.all_keys_pattern())


@pytest.fixture(params=["redis", "memory"])
def broker(request: pytest.FixtureRequest) -> RedisBroker | MemoryBroker:
    """Each behaviour test runs against both brokers."""
    if request.param == "memory":
        return MemoryBroker()
    return request.getfixturevalue("redis_broker")


@pytest.fixture
def client(broker: RedisBroker | MemoryBroker) -> Client:
    return Client(broker)
