"""Fault-injection scenarios: real worker processes, SIGKILLs, Redis restarts.

Each module gets its own redis-server, so killing and restarting it never touches
the server the rest of the suite uses. Run with ``pytest tests/fault -m fault -s``:
every scenario prints one ``[fault]`` line (enqueued / executed / lost / duplicated),
repeated in the terminal summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.redis_server import RedisServer
from .harness import Scenario
from .ledger import REPORTS


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
