"""Periodic tasks in Django: @periodic, @blitzq_task(schedule=...), BLITZQ["PERIODIC"],
their checks (blitzq.E015, E016), ``manage.py blitzq schedules`` and ``runscheduler``."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from blitzq_django import conf
from blitzq_django import periodic as glue
from blitzq_django.checks import check_settings
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine.core.schedules import Cron, Every, occurrence_id
from blitzq_django.engine.scheduler import Scheduler
from blitzq_django.periodic import periodic
from testproject.shop import tasks
from tests.support.migrated import migrated_sqlite, sqlite_env
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def scratch() -> Iterator[list[str]]:
    """Names of task and schedules a test declares, forgotten afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        glue.code_schedules.remove(name)
        conf.registry._specs.pop(name, None)  # type: ignore[attr-defined]


def test_the_testproject_declares_its_periodic_tasks(blitzq_memory: Any) -> None:
    registry = blitzq_memory.schedule_registry
    counting = registry.get(tasks.count_orders.name)
    assert counting is not None and isinstance(counting.when, Every)
    assert counting.when.ms == 60_000 and counting.missed == "skip"
    nightly = registry.get(tasks.purge_old_deliveries.name)
    assert nightly is not None and isinstance(nightly.when, Cron)
    assert nightly.when.tz == "Europe/Berlin" and nightly.kwargs == {"days": 30}


def test_periodic_declares_a_task_and_its_schedule_in_the_default_time_zone(
        settings: Any, scratch: list[str]) -> None:
    settings.TIME_ZONE = "America/New_York"

    @periodic("0 9 * * mon-fri", args=(1,), retries=2, name="tests.weekday-morning")
    def weekday_morning(x: int) -> int:
        return x

    scratch += [weekday_morning.name, "tests.weekday-morning"]
    schedule = glue.code_schedules.get("tests.weekday-morning")
    assert schedule is not None and schedule.task == weekday_morning.name
    assert schedule.when == Cron("0 9 * * mon-fri", "America/New_York")
    assert weekday_morning.spec.retry.retries == 2
    assert weekday_morning(5) == 5


def test_periodic_without_a_schedule_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="needs a schedule"):
        @periodic  # type: ignore[arg-type]
        def forgot() -> None: ...


def test_blitzq_task_takes_a_schedule(scratch: list[str]) -> None:
    @blitzq_task(queue="default", schedule={"every": 30, "missed": "run_all",
                                            "kwargs": {"n": 2}, "timeout": 5})
    def every_half_minute(n: int) -> int:
        return n

    scratch.append(every_half_minute.name)
    schedule = glue.code_schedules.get(every_half_minute.name)
    assert schedule is not None and schedule.when == Every(30_000)
    assert schedule.missed == "run_all" and schedule.options == {"timeout": 5}


@pytest.mark.parametrize(("spec", "words"), [
    ({"cron": "0 25 * * *"}, ["cron", "0 25 * * *"]),
    ({"cron": "@daily", "tz": "Europe/Atlantis"}, ["tz", "Europe/Atlantis"]),
    ({"every": 0}, ["every"]),
    ({"every": 5, "args": [object()]}, ["args[0]"]),
    ("not cron", ["cron", "5 fields"]),
])
def test_a_bad_declaration_fails_at_import_naming_the_schedule_and_field(
        spec: Any, words: list[str], scratch: list[str]) -> None:
    def job(*args: Any) -> None: ...

    job.__qualname__ = f"bad_{len(scratch)}_{abs(hash(str(spec)))}"
    with pytest.raises(ImproperlyConfigured) as caught:
        blitzq_task(schedule=spec)(job)
    scratch.append(f"{job.__module__}.{job.__qualname__}")
    text = str(caught.value)
    assert "@blitzq_task on" in text and f"schedule '{scratch[-1]}'" in text
    for word in words:
        assert word in text, text


def test_a_second_schedule_under_one_name_is_refused(scratch: list[str]) -> None:
    @periodic(every=60, name="tests.once")
    def first() -> None: ...

    scratch += [first.name, "tests.once"]
    with pytest.raises(ImproperlyConfigured, match=r"'tests\.once' is declared twice"):
        @periodic(every=120, name="tests.once")
        def second() -> None: ...
    scratch.append(f"{__name__}.second")


# -- BLITZQ["PERIODIC"] -----------------------------------------------------------------


def test_settings_schedules_join_the_client_registry(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "PERIODIC": {
        "noop-hourly": {"task": tasks.noop.name, "cron": "@hourly", "missed": "skip"}}}
    schedule = conf.get_client().schedule_registry.get("noop-hourly")
    assert schedule is not None and schedule.source == "settings"
    assert schedule.when == Cron("@hourly", "UTC")  # TIME_ZONE of the testproject
    assert conf.get_client().schedule_registry.get(tasks.count_orders.name) is not None


@pytest.mark.parametrize(("entry", "words"), [
    ({"task": "shop.noop", "cron": "* * *"}, ["'bad'", "5 fields"]),
    ({"task": "shop.noop", "every": -1}, ["'bad'", "every"]),
    ({"task": "shop.noop", "cron": "@daily", "tz": "Moon/Base"}, ["'bad'", "Moon/Base"]),
    ({"cron": "@daily"}, ["'bad'", "'task'"]),
    ({"task": "shop.noop", "every": 5, "kwargs": {"x": {1}}}, ["'bad'", "x"]),
    ({"task": "shop.noop", "every": 5, "colour": "red"}, ["'bad'", "colour"]),
])
def test_a_bad_periodic_setting_is_check_e015(settings: Any, entry: Any,
                                              words: list[str]) -> None:
    settings.BLITZQ = {"BROKER": "memory", "PERIODIC": {"bad": entry}}
    errors = [e for e in check_settings() if e.id == "blitzq.E015"]
    assert len(errors) == 1, check_settings()
    for word in words:
        assert word in errors[0].msg, errors[0].msg
    with pytest.raises(ImproperlyConfigured, match="E015"):
        conf.get_client()


def test_a_schedule_of_a_task_that_does_not_exist_is_check_e016(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "PERIODIC": {
        "ghost": {"task": "shop.tasks.no_such_task", "every": 60}}}
    errors = [e for e in glue.check_schedules() if e.id == "blitzq.E016"]
    assert len(errors) == 1 and "'ghost'" in errors[0].msg
    assert "shop.tasks.no_such_task" in errors[0].msg


def test_a_settings_schedule_named_like_a_code_schedule_is_check_e016(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "PERIODIC": {
        tasks.count_orders.name: {"task": tasks.noop.name, "every": 60}}}
    errors = [e for e in glue.check_schedules() if e.id == "blitzq.E016"]
    assert errors and "also declared in code" in errors[0].msg


# -- observability -----------------------------------------------------------------------


def test_blitzq_schedules_shows_last_and_next_runs(blitzq_redis: Any) -> None:
    out = io.StringIO()
    call_command("blitzq", "schedules", "--json", stdout=out)
    listed = {s["name"]: s for s in json.loads(out.getvalue())["schedules"]}
    counting = listed[tasks.count_orders.name]
    assert counting["outcome"] == "never" and counting["next_run_ms"] % 60_000 == 0
    assert counting["schedule"] == "every 60s"
    assert listed[tasks.purge_old_deliveries.name]["schedule"] == \
        "cron '30 2 * * *' Europe/Berlin"

    scheduler = Scheduler(blitzq_redis, promote=False, clock=lambda: 1_800_000_000.0)
    asyncio.run(_dispatch(scheduler, 1_800_000_060_000))
    out = io.StringIO()
    call_command("blitzq", "schedules", stdout=out)
    text = out.getvalue()
    assert "LAST MESSAGE" in text and "OUTCOME" in text
    assert occurrence_id(tasks.count_orders.name, 1_800_000_060_000) in text
    assert "dispatched" in text


@pytest.mark.django_db
def test_blitzq_schedules_lists_the_database_schedules_too(blitzq_redis: Any) -> None:
    from blitzq_django.models import PeriodicSchedule

    PeriodicSchedule.objects.create(name="nightly-report", task=tasks.noop.name,
                                    cron="0 4 * * *", timezone="Europe/Berlin")
    out = io.StringIO()
    call_command("blitzq", "schedules", "--json", stdout=out)
    listed = {s["name"]: s for s in json.loads(out.getvalue())["schedules"]}
    assert listed["nightly-report"]["schedule"] == "cron '0 4 * * *' Europe/Berlin"
    assert listed["nightly-report"]["outcome"] == "never"
    assert tasks.count_orders.name in listed  # beside the code-declared ones


async def _dispatch(scheduler: Scheduler, now_ms: int) -> None:
    try:
        await scheduler.load()
        await scheduler.tick(now_ms)
    finally:
        await scheduler.broker.aclose()  # type: ignore[attr-defined]


# -- the commands ------------------------------------------------------------------------


@pytest.fixture
def command_env(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    return sqlite_env({**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
                       "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                       "BLITZQ_SQLITE": str(migrated_sqlite(tmp_path / "db.sqlite3")),
                       "PYTHONPATH": str(ROOT)})


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT,
                            env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(proc: subprocess.Popen[str], needle: str, lines: list[str]) -> None:
    assert proc.stderr is not None
    wait_until(lambda: lines.append(proc.stderr.readline()) or needle in lines[-1]  # type: ignore[union-attr]
               or proc.poll() is not None, timeout=30, message=needle)
    assert proc.poll() is None, "".join(lines)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_runscheduler_promotes_delayed_messages_and_stops_gracefully(
        blitzq_redis: Any, command_env: dict[str, str], signum: int) -> None:
    proc = _start(command_env, "runscheduler", "--no-reload", "-v", "2")
    try:
        lines: list[str] = []
        _wait_for(proc, "running", lines)
        handle = tasks.noop.options(delay=0.2).enqueue()
        # Its own state, not only a count: the queue may hold another message already.
        wait_until(lambda: getattr(handle.inspect(), "state", None) != "scheduled"
                   and blitzq_redis.queue_stats("default").ready >= 1, 10,
                   message="the delayed message promoted by the scheduler")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, "".join(lines) + err
    assert "stopping" in err and "scheduler" in out and "stopped" in out


def test_runworker_with_scheduler_runs_one_beside_the_worker(
        blitzq_redis: Any, command_env: dict[str, str]) -> None:
    proc = _start(command_env, "runworker", "--with-scheduler", "--no-reload", "-v", "2")
    try:
        lines: list[str] = []
        # The scheduler's thread and the worker (and its companions) log in either order;
        # the banner names the scheduler too, so wait for the scheduler's own list.
        _wait_for(proc, "schedule(s):", lines)
        if not any("serving" in line for line in lines):
            _wait_for(proc, "serving", lines)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = "".join(lines) + err
    assert proc.returncode == 0, text
    assert f"{tasks.count_orders.name} (every 60s)" in text
    assert "scheduler" in text and "stopped" in text


def test_runscheduler_reload_restarts_it_on_a_code_change(
        blitzq_redis: Any, command_env: dict[str, str]) -> None:
    import threading

    proc = _start(command_env, "runscheduler", "--reload", "-v", "2")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        def running() -> int:
            return sum(" running (promoting" in line for line in lines)

        wait_until(lambda: running() >= 1, timeout=30, message="scheduler started")
        source = Path(tasks.__file__)
        # Django's file watcher polls mtimes each second; keep touching until it notices.
        wait_until(lambda: os.utime(source) or running() >= 2, timeout=30,
                   message="scheduler started again after the change")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(10)
        proc.communicate()
    assert "Traceback" not in "".join(lines)
