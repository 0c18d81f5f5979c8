"""Commands in process groups of their own, for the pool and time-limit scenarios
(test_graceful_pools.py, test_time_limits.py; fixtures ``database`` and ``pools`` in
conftest.py): ``manage.py`` commands run the test project with tests/fault/pool_app
(pool_settings.py), on a migrated SQLite database of the module's own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..support.waiting import wait_until
from .harness import ROOT, Scenario

PY = sys.executable
DJANGO_ENV = {"DJANGO_SETTINGS_MODULE": "tests.fault.pool_settings", "DJANGO_DEBUG": "0",
              "PYTHONPATH": str(ROOT)}


def migrate(path: Path) -> str:
    """A migrated SQLite database at ``path`` (history and outbox tables)."""
    subprocess.run([PY, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True, timeout=300,
                   env={**os.environ, **DJANGO_ENV, "BLITZQ_SQLITE": str(path)})
    return str(path)


class Pool:
    """A command in a process group of its own (``start_new_session``), output in a file."""

    def __init__(self, scenario: Scenario, command: list[str], env: dict[str, str],
                 name: str = "pool") -> None:
        self.log = scenario.tmp / f"{name}.log"
        self._out = open(self.log, "ab")  # noqa: SIM115 - closed in wait()/kill()
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=self._out,
                                        stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        self.pgid = self.process.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def signal_group(self, signum: int) -> None:
        os.killpg(self.pgid, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s:\n{self.text()}") from None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.process.wait(10)
        self._out.close()


def producer(scenario: Scenario, name: str = "pool.sleep") -> Any:
    """A pool_app task (pool_app/tasks.py), for enqueueing by name from this process."""
    def stand_in(seconds: float = 0.0) -> None:
        raise AssertionError("runs in the pool")

    return scenario.client.task(name=name)(stand_in)


def serving(scenario: Scenario, pool: Pool, count: int, timeout: float = 60) -> None:
    def ready() -> bool:
        assert pool.process.poll() is None, f"the pool exited:\n{pool.text()}"
        return len(scenario.client.workers()) >= count

    wait_until(ready, timeout, interval=0.1, message=f"{count} worker processes to serve")


def started(scenario: Scenario, message_id: str) -> None:
    wait_until(lambda: any(x.phase == "start" for x in scenario.ledger.of(message_id)), 30,
               interval=0.02, message="the task to start")
