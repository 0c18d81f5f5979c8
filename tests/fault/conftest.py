"""Fault-injection scenarios: real worker processes, SIGKILLs, Redis restarts.

Each module gets its own redis-server, so killing and restarting it never touches
the server the rest of the suite uses. Run with ``pytest tests/fault -m fault -s``:
every scenario prints one ``[fault]`` line (enqueued / executed / lost / duplicated),
repeated in the terminal summary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..support.redis_server import RedisServer
from .harness import Scenario
from .ledger import REPORTS
from .pools import DJANGO_ENV, Pool, migrate


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if REPORTS:
        terminalreporter.section("fault scenarios")
        for line in REPORTS:
            terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def fault_redis() -> Iterator[RedisServer]:
    """A redis-server of this module's own (never REDIS_URL's: these tests kill things)."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def durable_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, AOF with appendfsync always (it gets SIGKILLed)."""
    server = RedisServer(appendonly=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def scenario(fault_redis: RedisServer, tmp_path: Path) -> Iterator[Scenario]:
    s = Scenario(fault_redis.url, tmp_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated SQLite database for the module's ``manage.py`` commands (pools.py)."""
    return migrate(tmp_path_factory.mktemp("pools") / "db.sqlite3")


@pytest.fixture
def pools(scenario: Scenario, database: str) -> Iterator[Callable[..., Pool]]:
    """Start commands in process groups of their own; each is killed at teardown."""
    started: list[Pool] = []

    def start(command: list[str], env: dict[str, str] | None = None) -> Pool:
        env = {**scenario.env, **DJANGO_ENV, "BLITZQ_SQLITE": database, **(env or {})}
        pool = Pool(scenario, command, env, name=f"pool{len(started)}")
        started.append(pool)
        return pool

    yield start
    for pool in started:
        pool.kill()
