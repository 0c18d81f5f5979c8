"""Engine tests: every behaviour test runs against each broker, delivery mode and Redis
topology; async tests close the broker connections they opened on their loop.

The ``broker`` fixture (tests/conftest.py) is parametrized here once more: "redis"
(reliable mode: streams), "redis-fast" (fast mode: lists, at-most-once), "sentinel" and
"cluster" (reliable mode on a Sentinel set and on a Redis Cluster), "cluster-fast" (fast
mode on the cluster; in the ``topology`` pass) and "memory".
A test of something fast mode does not have (leases, recovery, delivery counts) is
marked ``@pytest.mark.reliable_only("why")`` and skipped there with that reason.

A test that takes ``redis_url`` (or ``redis_broker``, ``redis_client``) without
``broker`` runs on the three topologies: ids "redis", "sentinel", "cluster". One that
only makes sense on a single server (it restarts it, counts its commands...) is marked
``@pytest.mark.single_node("why")``.

The Sentinel and Cluster cases of the modules in ``DEFAULT_PASS_MODULES`` run in the
default pass; those of every other module are marked ``topology``, which pytest.ini
leaves out (``-m "not topology"``) and scripts/test.py runs in a pass of its own
(``pytest -m topology tests/engine``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
import redis

from blitzq_django.engine import MemoryBroker, RedisBroker

from ..support.clients import drop_keys

#: The broker params of the engine's behaviour tests, and the topology each runs on.
BROKERS = {"redis": "redis", "redis-fast": "redis", "sentinel": "sentinel",
           "cluster": "cluster", "cluster-fast": "cluster", "memory": "redis"}
REDIS_PARAMS = {"redis": "redis_broker", "redis-fast": "fast_redis_broker",
                "sentinel": "redis_broker", "cluster": "redis_broker",
                "cluster-fast": "fast_redis_broker"}
#: The topologies of a test that takes redis_url without broker (tests/conftest.py).
TOPOLOGIES = ("redis", "sentinel", "cluster")
#: The modules whose Sentinel and Cluster cases run in the default pass: the behaviour
#: of enqueue, fetch, settle, retry, results, cancel, unique, rate limits, periodic
#: schedules, progress and events. The rest run in the ``-m topology`` pass.
#: One module's Sentinel and Cluster cases run in the default pass (a developer's run
#: sees a topology break at once); the rest in the topology pass, which CI runs beside
#: the main pass: with 13 modules here the main pass alone took longer than CI's budget.
DEFAULT_PASS_MODULES = frozenset({"test_flow"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "reliable_only(reason): a reliable-mode guarantee (lease, recovery, "
        "delivery count): skipped for the fast mode broker with this reason")
    config.addinivalue_line(
        "markers", "single_node(reason): runs on one Redis server only, not on the "
        "Sentinel and Cluster topologies, for this reason")


def _topology_marks(topology: str, module: str, fast: bool = False,
                    ) -> list[pytest.MarkDecorator]:
    if topology == "redis":
        return []
    marks = [getattr(pytest.mark, topology)]
    if fast or module not in DEFAULT_PASS_MODULES:
        marks.append(pytest.mark.topology)  # fast mode on a cluster: the topology pass
    return marks


def _broker_cases(module: str, single: bool, reliable_only: bool) -> list[Any]:
    cases = []
    for name, topology in BROKERS.items():
        if single and topology != "redis":
            continue
        if name == "cluster-fast" and reliable_only:
            continue  # not made at all, rather than made and skipped like "redis-fast"
        marks = _topology_marks(topology, module, fast=name.endswith("-fast"))
        cases.append(pytest.param(name, topology, id=name, marks=marks))
    return cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The broker and topology params (see the module docstring)."""
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    single = metafunc.definition.get_closest_marker("single_node") is not None
    if "broker" in metafunc.fixturenames and "redis_topology" in metafunc.fixturenames:
        reliable_only = metafunc.definition.get_closest_marker("reliable_only") is not None
        metafunc.parametrize(("broker", "redis_topology"),
                             _broker_cases(module, single, reliable_only), indirect=True)
    elif "redis_topology" in metafunc.fixturenames and not single:
        metafunc.parametrize("redis_topology", [
            pytest.param(topology, id=topology, marks=_topology_marks(topology, module))
            for topology in TOPOLOGIES], indirect=True)


@pytest.fixture
def fast_redis_broker(redis_url: str, namespace: str,
                      redis_client: redis.Redis) -> Iterator[RedisBroker]:
    """A RedisBroker with every queue in fast mode (lists, at-most-once)."""
    broker = RedisBroker(redis_url, namespace=namespace, mode="fast")
    yield broker
    broker.close()
    drop_keys(redis_client, broker.keys.all_keys_pattern())


@pytest.fixture
def broker(request: pytest.FixtureRequest, redis_topology: str) -> RedisBroker | MemoryBroker:
    """Each behaviour test runs against Redis in both delivery modes, on Sentinel and
    Cluster, and in memory (params: pytest_generate_tests above)."""
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test with a memory param of its own (fast_broker...) parametrized over the
    # topologies too: its memory case runs once, not once per topology.
    twins = [item for item in items if _memory_on_a_topology(item)]
    if twins:
        config.hook.pytest_deselected(items=twins)
        items[:] = [item for item in items if not _memory_on_a_topology(item)]
    for item in items:
        if item.get_closest_marker("asyncio") is not None and "tests/engine/" in item.nodeid:
            item.fixturenames.insert(0, "_close_loop_connections")  # type: ignore[attr-defined]


def _memory_on_a_topology(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("redis_topology", "redis") == "redis":
        return False
    return "memory" in callspec.params.values() and "broker" not in callspec.params
