"""Graceful pools (issue 19, item 6): ``runworker --processes 2`` stopped the ways a
terminal (Ctrl-C: SIGINT to the foreground process group), ``kill -INT -<pgid>``,
``timeout -s TERM`` (the command, then its group) and systemd (``KillMode=control-group``:
every process) stop it is one graceful stop: the running `def` task finishes, runs once,
nothing is requeued, exit status 0. A second SIGINT forces (exit status 1). And a pool
starts and runs tasks however the command was invoked.

Each pool runs in a session of its own (its own process group), with the test project and
tests/fault/pool_app (pool_settings.py); the producer enqueues by task name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from blitzq_django.engine.worker.supervision import REPEAT_WINDOW_S

from ..support.waiting import wait_until
from .harness import ROOT, Scenario

pytestmark = pytest.mark.fault

PY = sys.executable
DJANGO_ADMIN = str(Path(PY).with_name("django-admin"))
TASK_S = 3.0


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


DJANGO_ENV = {"DJANGO_SETTINGS_MODULE": "tests.fault.pool_settings", "DJANGO_DEBUG": "0",
              "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated SQLite database (history and outbox tables) for the module's pools."""
    path = str(tmp_path_factory.mktemp("pools") / "db.sqlite3")
    subprocess.run([PY, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True, timeout=300,
                   env={**os.environ, **DJANGO_ENV, "BLITZQ_SQLITE": path})
    return path


@pytest.fixture
def pools(scenario: Scenario, database: str) -> Any:
    started: list[Pool] = []

    def start(command: list[str], env: dict[str, str] | None = None) -> Pool:
        env = {**scenario.env, **DJANGO_ENV, "BLITZQ_SQLITE": database, **(env or {})}
        pool = Pool(scenario, command, env, name=f"pool{len(started)}")
        started.append(pool)
        return pool

    yield start
    for pool in started:
        pool.kill()


def producer(scenario: Scenario) -> Any:
    """The pool_app task, for enqueueing by name from this process."""
    @scenario.client.task(name="pool.sleep")
    def sleep(seconds: float) -> float:
        raise AssertionError("runs in the pool")

    return sleep


def serving(scenario: Scenario, pool: Pool, count: int, timeout: float = 60) -> None:
    def ready() -> bool:
        assert pool.process.poll() is None, f"the pool exited:\n{pool.text()}"
        return len(scenario.client.workers()) >= count

    wait_until(ready, timeout, interval=0.1, message=f"{count} worker processes to serve")


def started(scenario: Scenario, message_id: str) -> None:
    wait_until(lambda: any(x.phase == "start" for x in scenario.ledger.of(message_id)), 30,
               interval=0.02, message="the task to start")


def runworker(*args: str) -> list[str]:
    return [PY, "manage.py", "runworker", "--queues", "default", *args]


STOPS = ["sigint-to-group", "sigterm-to-group", "sigterm-to-supervisor", "timeout-s-term",
         "systemd-control-group"]


@pytest.mark.parametrize("stop", STOPS)
def test_one_graceful_stop_of_a_pool(scenario: Scenario, pools: Any, stop: str) -> None:
    if stop == "timeout-s-term" and shutil.which("timeout") is None:
        pytest.skip("needs coreutils' timeout")
    command = runworker("--processes", "2")
    if stop == "timeout-s-term":
        # timeout(1) as the group leader; signalled, it passes the signal on as on expiry:
        # to the command, then to the whole process group.
        command = ["timeout", "-s", "TERM", "600", *command]
    pool = pools(command)
    serving(scenario, pool, 2)
    handle = producer(scenario).enqueue(TASK_S)
    started(scenario, handle.id)
    if stop == "sigint-to-group":  # Ctrl-C in a terminal; kill -INT -<pgid>
        pool.signal_group(signal.SIGINT)
    elif stop == "sigterm-to-group":
        pool.signal_group(signal.SIGTERM)
    elif stop in ("sigterm-to-supervisor", "timeout-s-term"):  # kill <pid>; kill <timeout>
        pool.process.send_signal(signal.SIGTERM)
    else:  # systemd's default stop: SIGTERM to every process of the unit, one by one
        pids = [int(p) for p in Path(f"/proc/{pool.pgid}/task/{pool.pgid}/children")
                .read_text().split()]
        for pid in [*reversed(pids), pool.pgid]:  # the children first: the worst order
            os.kill(pid, signal.SIGTERM)
    code = pool.wait(TASK_S + 30)
    text = pool.text()
    assert code == 0, text
    lines = scenario.ledger.of(handle.id)
    assert [x.phase for x in lines] == ["start", "done"], text  # ran once, completed
    assert scenario.client.get_result(handle.id, timeout=1).succeeded
    assert scenario.drained(), "a message was left on the queue or pending"
    assert "requeued message" not in text and "forcing" not in text, text
    assert "Traceback" not in text, text
    assert text.count("stopping gracefully") >= 2  # each child, once or more
    assert "started worker process" in text and "restart" not in text, text


def test_a_second_sigint_forces_the_pool_to_exit(scenario: Scenario, pools: Any) -> None:
    pool = pools(runworker("--processes", "2", "--shutdown-timeout", "60"))
    serving(scenario, pool, 2)
    handle = producer(scenario).enqueue(60)
    started(scenario, handle.id)
    pool.signal_group(signal.SIGINT)  # Ctrl-C
    first = time.monotonic()

    def stopping() -> bool:
        text = pool.text()
        return ("stopping the worker processes gracefully" in text
                and text.count("stopping gracefully") >= 2
                and time.monotonic() - first > 2 * REPEAT_WINDOW_S)  # a person's second press

    wait_until(stopping, 15, interval=0.05, message="the pool to stop gracefully")
    pool.signal_group(signal.SIGINT)  # Ctrl-C again: force
    code = pool.wait(20)  # well before the task's 60 s
    text = pool.text()
    assert code == 1, text  # documented: docs/failures.md, "Graceful shutdown and worker pools"
    assert "forcing the worker processes to exit" in text, text
    # The forced child handed its running message back: it is not lost.
    lines = scenario.ledger.of(handle.id)
    assert [x.phase for x in lines] == ["start"]
    assert "requeued message" in text
    assert scenario.pending() == [] and scenario.stream_len() == 1


INVOCATIONS = {
    "manage.py": [PY, "manage.py"],
    "django-admin": [DJANGO_ADMIN],
    "python -m django": [PY, "-m", "django"],
}


@pytest.mark.parametrize("invocation", [*INVOCATIONS, "PROCESSES setting", "engine"])
def test_a_pool_runs_tasks_however_it_was_invoked(scenario: Scenario, pools: Any,
                                                 invocation: str) -> None:
    env = None
    if invocation == "engine":
        command = [PY, "-m", "blitzq_django.engine", "worker", "tests.fault.app:make_client",
                   "--processes", "2"]
        handle = scenario.tasks["sync_sleep"].enqueue(0.1)
    else:
        args = ["runworker", "--queues", "default"]
        if invocation == "PROCESSES setting":  # BLITZQ["PROCESSES"] = 2, no option
            command, env = [PY, "manage.py", *args], {"PROCESSES": "2"}
        else:
            command = [*INVOCATIONS[invocation], *args, "--processes", "2"]
        handle = producer(scenario).enqueue(0.1)
    pool = pools(command, env=env)
    serving(scenario, pool, 2)
    scenario.wait_drained([handle.id], 30)
    assert scenario.client.get_result(handle.id, timeout=5).succeeded
    assert len(scenario.client.workers()) == 2  # two children, none a supervisor itself
    pool.process.send_signal(signal.SIGTERM)
    text = pool.text()
    assert pool.wait(30) == 0, pool.text()
    assert "Traceback" not in text and "died" not in text, text
    assert text.count("started worker process") == 2, text


def test_runscheduler_stops_once_and_gracefully(scenario: Scenario, pools: Any) -> None:
    """runscheduler under a group SIGINT, then a group SIGTERM right behind it (a Ctrl-C
    while systemd stops it): one graceful stop, exit status 0."""
    pool = pools([PY, "manage.py", "runscheduler", "--no-reload"])
    wait_until(lambda: " running" in pool.text() or pool.process.poll() is not None, 60,
               interval=0.05, message="the scheduler to run")
    pool.signal_group(signal.SIGINT)
    pool.signal_group(signal.SIGTERM)
    assert pool.wait(30) == 0, pool.text()
    text = pool.text()
    assert "Traceback" not in text and text.count("stopped") >= 1, text
