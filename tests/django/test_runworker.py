"""manage.py runworker: burst drain in a real subprocess, SIGTERM, errors, command clash."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command, get_commands
from django.core.management.base import CommandError
from django.test import override_settings

from blitzq_django import conf
from blitzq_django.checks import check_runworker_command
from testproject.shop import tasks
from tests.support.migrated import migrated_sqlite, sqlite_env
from tests.support.redis_server import RedisServer, free_port, redis_server_binary
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker_env(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    return sqlite_env({**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
                       "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                       "BLITZQ_SQLITE": str(migrated_sqlite(tmp_path / "db.sqlite3")),
                       "PYTHONPATH": str(ROOT)})


def test_burst_drains_the_queue_and_exits(blitzq_redis: Any, worker_env: dict[str, str],
                                          manage: Any) -> None:
    handles = tasks.noop.enqueue_many([() for _ in range(200)])
    handles += tasks.fetch_exchange_rate.enqueue_many([("EUR",)] * 50)
    proc = manage("runworker", "--burst", "--queues", "default", "--concurrency", "20",
                  env=worker_env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "succeeded 250" in out
    assert all(h.record(timeout=1).succeeded for h in handles[::25])
    assert blitzq_redis.broker.queue_stats("default")["ready"] == 0


def test_supervised_processes_drain_the_queue_and_recycle(
        blitzq_redis: Any, worker_env: dict[str, str], manage: Any) -> None:
    # Two worker processes under the supervisor, each recycled after 40 messages: the
    # pool drains the queue, replaces recycled children, and ends when all are drained.
    handles = tasks.noop.enqueue_many([() for _ in range(300)])
    proc = manage("runworker", "--burst", "--processes", "2", "--max-tasks-per-child", "40",
                  "--queues", "default", "--concurrency", "10", "-v", "2", env=worker_env)
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert "recycled" in err
    assert all(h.record(timeout=1).succeeded for h in handles)
    stats = blitzq_redis.broker.queue_stats("default")
    assert stats["ready"] == 0 and stats["in_flight"] == 0


def test_sigterm_stops_the_worker_gracefully(worker_env: dict[str, str], manage: Any) -> None:
    proc = manage("runworker", "-v", "2", "--no-reload", env=worker_env)
    lines: list[str] = []
    assert proc.stderr is not None
    wait_until(lambda: lines.append(proc.stderr.readline()) or "serving" in lines[-1],
               timeout=30, message="worker started")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, "".join(lines) + err
    assert "stopping gracefully" in err and "worker" in out and "stopped" in out


def test_a_worker_started_before_redis_waits_for_it(worker_env: dict[str, str],
                                                     manage: Any) -> None:
    if redis_server_binary() is None:
        pytest.skip("needs a redis-server binary to start on the port later")
    port = free_port()
    worker_env["REDIS_URL"] = f"redis://:hunter2@127.0.0.1:{port}/0"
    proc = manage("runworker", "--burst", env=worker_env)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    wait_until(lambda: sum("cannot reach Redis (attempt" in line for line in err) >= 2
               or proc.poll() is not None, 30, message="two logged attempts")
    assert proc.poll() is None, "runworker exited instead of waiting for Redis:\n" + "".join(err)
    server = RedisServer(port=port, password="hunter2").start()
    try:
        assert proc.wait(timeout=60) == 0, "".join(err)
    finally:
        server.stop()
    reader.join(10)
    proc.communicate()  # closes its pipes
    text = "".join(err)
    assert "hunter2" not in text and "Traceback" not in text
    assert "redis://:***@127.0.0.1:" in text


def test_misconfiguration_is_a_command_error_naming_the_key(settings: Any) -> None:
    settings.BLITZQ = {"CONCURRENCY": "lots"}
    with pytest.raises(CommandError, match=r"BLITZQ\['CONCURRENCY'\]"):
        call_command("runworker", "--burst")


# Django 6.1's system checks query the database (JSONField support on SQLite).
@pytest.mark.django_db
def test_bad_options_are_refused(blitzq_memory: Any) -> None:
    with pytest.raises(CommandError):
        call_command("runworker", "--burst", "--concurrency", "0")
    with pytest.raises(CommandError, match="names no queue"):
        call_command("runworker", "--burst", "--queues", ",")


# Django 6.1's system checks query the database (JSONField support on SQLite).
# transaction=True: runworker's history writer commits rows through its own thread's
# connection; the flush after the test removes them, so no later test sees them.
@pytest.mark.django_db(transaction=True)
def test_runworker_in_process_burst(blitzq_memory: Any) -> None:
    handle = tasks.noop.enqueue()
    call_command("runworker", "--burst", "--concurrency", "2", verbosity=0)
    assert handle.record(timeout=1).succeeded


# Django 6.1's system checks query the database (JSONField support on SQLite).
@pytest.mark.django_db
def test_processes_from_call_command_is_refused(blitzq_redis: Any, monkeypatch: Any) -> None:
    # Each worker process runs this process's command line again: under call_command()
    # that is some other program's (the test runner's here), never a runworker.
    from blitzq_django.engine.supervisor import Supervisor

    started: list[list[str]] = []
    monkeypatch.setattr(Supervisor, "run", lambda self: started.append(self.argv) or 0)
    monkeypatch.setattr(sys, "argv", ["pytest", "tests/django"])
    with pytest.raises(CommandError, match="start runworker from a command line"):
        call_command("runworker", "--processes", "2", "--burst", "--no-history")
    assert started == []


# Django 6.1's system checks query the database (JSONField support on SQLite).
@pytest.mark.django_db(transaction=True)
def test_time_limit_grace_comes_from_the_setting_or_the_option(settings: Any,
                                                                 monkeypatch: Any) -> None:
    from blitzq_django.management.commands import runworker

    seen: list[float] = []

    class Recording(runworker.Worker):
        def __init__(self, client: Any, config: Any, **kwargs: Any) -> None:
            seen.append(config.time_limit_grace)
            super().__init__(client, config, **kwargs)

    monkeypatch.setattr(runworker, "Worker", Recording)
    settings.BLITZQ = {"BROKER": "memory", "QUEUES": ["default"], "TIME_LIMIT_GRACE": 2.5}
    call_command("runworker", "--burst", "--no-history", verbosity=0)
    call_command("runworker", "--burst", "--no-history", "--time-limit-grace", "0.5",
                 verbosity=0)
    assert seen == [2.5, 0.5]


def test_runworker_is_ours_when_listed_before_channels() -> None:
    assert get_commands()["runworker"] == "blitzq_django"
    assert check_runworker_command() == []


def test_warning_when_channels_is_listed_first(settings: Any) -> None:
    apps = [a for a in settings.INSTALLED_APPS if a != "channels"]
    apps.insert(apps.index("blitzq_django"), "channels")
    with override_settings(INSTALLED_APPS=apps):
        assert get_commands()["runworker"] == "channels"
        (warning,) = check_runworker_command()
    assert warning.id == "blitzq.W001"
    assert "'channels'" in warning.msg and "before" in warning.hint


def test_default_queues_are_settings_queues_plus_declared_ones(settings: Any) -> None:
    from blitzq_django.checks import check_task_queues
    from blitzq_django.decorators import blitzq_task
    from blitzq_django.management.commands.runworker import Command

    settings.BLITZQ = {"BROKER": "memory", "QUEUES": ["default", "low"]}

    @blitzq_task(queue="reports")
    def build_report() -> None: ...

    command = Command()
    queues = command._queues([], conf.get_settings(), conf.get_client())
    assert queues[:2] == ("default", "low") and "reports" in queues
    assert command._queues(["a,b", "c"], conf.get_settings(),
                           conf.get_client()) == ("a", "b", "c")
    warnings = [w for w in check_task_queues() if w.obj == build_report.name]
    assert [w.id for w in warnings] == ["blitzq.W002"]


def test_reload_restarts_the_worker_on_a_code_change(worker_env: dict[str, str],
                                                     manage: Any) -> None:
    proc = manage("runworker", "--reload", "-v", "2", "--log-level", "info", env=worker_env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()

    def serving() -> int:
        return sum("serving" in line for line in lines)

    wait_until(lambda: serving() >= 1, timeout=30, message="worker started")
    source = Path(tasks.__file__)
    # Django's file watcher polls mtimes each second; keep touching until it notices.
    wait_until(lambda: os.utime(source) or serving() >= 2, timeout=30,
               message="worker started again after the change")
    text = "".join(lines)
    assert "changed, reloading" in text and "code changed: starting the worker again" in text
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, "".join(lines)
    reader.join(10)
    proc.communicate()  # closes its pipes
    assert "Traceback" not in "".join(lines)
