"""Engine tests: every behaviour test runs against each broker and delivery mode; async
tests close the broker connections they opened on their loop.

The ``broker`` fixture (tests/conftest.py) is parametrized here once more: "redis"
(reliable mode: streams), "redis-fast" (fast mode: lists, at-most-once) and "memory".
A test of something fast mode does not have (leases, recovery, delivery counts) is
marked ``@pytest.mark.reliable_only("why")`` and skipped there with that reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redis

from blitzq_django.engine import MemoryBroker, RedisBroker

#: The broker params of the engine's behaviour tests.
BROKERS = ["redis", "redis-fast", "memory"]
REDIS_PARAMS = {"redis": "redis_broker", "redis-fast": "fast_redis_broker"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "reliable_only(reason): a reliable-mode guarantee (lease, recovery, "
        "delivery count): skipped for the fast mode broker with this reason")


@pytest.fixture
def fast_redis_broker(redis_url: str, namespace: str,
                      redis_client: redis.Redis) -> Iterator[RedisBroker]:
    """A RedisBroker with every queue in fast mode (lists, at-most-once)."""
    broker = RedisBroker(redis_url, namespace=namespace, mode="fast")
    yield broker
    broker.close()
    keys = list(redis_client.scan_iter(match=broker.keys.all_keys_pattern(), count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> RedisBroker | MemoryBroker:
    """Each behaviour test runs against Redis in both delivery modes, and in memory."""
    if request.param == "memory":
        return MemoryBroker()
    marker = request.node.get_closest_marker("reliable_only")
    if request.param == "redis-fast" and marker is not None:
        pytest.skip(f"reliable mode only: {marker.args[0] if marker.args else ''}")
    return request.getfixturevalue(REDIS_PARAMS[request.param])


@pytest_asyncio.fixture
async def _close_loop_connections(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    # Taken before the test, so the broker is torn down after this fixture.
    name = _redis_fixture(request)
    broker = request.getfixturevalue(name) if name else None
    yield
    # A redis.asyncio connection belongs to the loop that opened it, and the loop of an
    # async test ends with the test: close them here rather than leave them to the GC.
    if broker is not None:
        await broker.aclose()


def _redis_fixture(request: pytest.FixtureRequest) -> str | None:
    """The name of the Redis broker fixture the test uses, if any."""
    if "redis_broker" in request.fixturenames and "broker" not in request.fixturenames:
        return "redis_broker"
    if "fast_redis_broker" in request.fixturenames:
        return "fast_redis_broker"
    callspec = getattr(request.node, "callspec", None)
    if callspec is None:
        return None
    if callspec.params.get("fast_broker") == "redis":  # test_fast_mode.py
        return "fast_redis_broker"
    return REDIS_PARAMS.get(callspec.params.get("broker"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("asyncio") is not None and "tests/engine/" in item.nodeid:
            item.fixturenames.insert(0, "_close_loop_connections")  # type: ignore[attr-defined]
