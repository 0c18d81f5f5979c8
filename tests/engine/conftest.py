"""Engine tests: async tests close the broker connections they opened on their loop."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio


@pytest_asyncio.fixture
async def _close_loop_connections(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    # Taken before the test, so the broker is torn down after this fixture.
    broker = request.getfixturevalue("redis_broker") if _uses_redis(request) else None
    yield
    # A redis.asyncio connection belongs to the loop that opened it, and the loop of an
    # async test ends with the test: close them here rather than leave them to the GC.
    if broker is not None:
        await broker.aclose()


def _uses_redis(request: pytest.FixtureRequest) -> bool:
    if "redis_broker" in request.fixturenames and "broker" not in request.fixturenames:
        return True
    callspec = getattr(request.node, "callspec", None)
    return callspec is not None and callspec.params.get("broker") == "redis"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("asyncio") is not None and "tests/engine/" in item.nodeid:
            item.fixturenames.insert(0, "_close_loop_connections")  # type: ignore[attr-defined]
