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

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from blitzq_django.engine.worker.supervision import REPEAT_WINDOW_S

from ..support.waiting import wait_until
from .harness import Scenario
from .pools import PY, producer, serving, started

pytestmark = pytest.mark.fault

DJANGO_ADMIN = str(Path(PY).with_name("django-admin"))
TASK_S = 3.0


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
    # The history writer process outlived the workers (it stops when runworker closes
    # its stdin), so it wrote their last rows: no signal stopped it first.
    assert "history writer process exited" not in text, text
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
