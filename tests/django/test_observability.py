"""Observability of the Django commands (docs/observability.md): failures on stderr with
their traceback, the start-up banner, JSON logs, the settings that drive them, and
Django's AdminEmailHandler on ``blitzq.task``.

Real ``manage.py`` subprocesses on a real Redis, with the settings of a project that
did not configure logging (tests/django/plain_logging_settings.py)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
from pathlib import Path
from typing import Any

import django
import pytest
from django.core.mail.message import EmailMessage
from django.core.management import get_commands, load_command_class
from django.utils.log import AdminEmailHandler

from blitzq_django import conf
from blitzq_django.engine import Client
from testproject.shop import tasks
from tests.support.migrated import migrated_sqlite, sqlite_env
from tests.support.waiting import wait_until

from .conftest import running_worker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    # runworker and runscheduler refuse to start without blitzq's tables.
    return sqlite_env({**os.environ,
                       "DJANGO_SETTINGS_MODULE": "tests.django.plain_logging_settings",
                       "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                       "BLITZQ_SQLITE": str(migrated_sqlite(tmp_path / "db.sqlite3")),
                       "PYTHONPATH": str(ROOT)})


def burst(manage: Any, env: dict[str, str], *args: str) -> str:
    proc = manage("runworker", "--burst", "--queues", "default", "--no-history", *args,
                  env=env)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


def test_a_failing_task_logs_warning_then_error_with_its_traceback_on_stderr(
        blitzq_redis: Any, env: dict[str, str], manage: Any) -> None:
    handle = tasks.validate_card.enqueue("4242424242424242")
    err = burst(manage, env)
    task = f"task {tasks.validate_card.name} [{handle.id}]"
    warning = err.index(f" WARNING blitzq.task: {task} failed on attempt 1 of 2 (queue default, ")
    error = err.index(f" ERROR blitzq.task: {task} failed on attempt 2 of 2 (queue default, ")
    assert warning < error
    retried, final = err[warning:error], err[error:]
    assert "retrying in 0.05 s: ValueError: card 4242 declined (simulated)" in retried
    assert "dead-lettered (retries exhausted): ValueError: card 4242" in final
    for part in (retried, final):  # each line is followed by the task's traceback
        assert "Traceback (most recent call last):" in part
        assert 'shop/tasks.py", line' in part and "in validate_card" in part
        assert part.count("ValueError: card 4242 declined (simulated)") == 2


def test_the_banner_says_what_the_worker_serves(blitzq_redis: Any, env: dict[str, str],
                                                manage: Any, redis_url: str) -> None:
    err = burst(manage, env, "--concurrency", "7")
    assert "blitzq worker " in err and " starting\n" in err
    assert "  queues:      default\n" in err
    counted = re.search(r"\n  tasks:       (\d+) registered \(-v 2 lists them\)\n", err)
    assert counted is not None, err
    assert f"  redis:       {redis_url}, from BLITZQ['REDIS_URL']\n" in err
    assert "  mode:        reliable\n" in err
    assert "  concurrency: 7 per process, 7 threads for def tasks, 1 process\n" in err
    assert "  history:     not here (--no-history: manage.py runhistory writes it)" in err
    # -v 2: each task by name, with its queue.
    err = burst(manage, env, "-v", "2")
    assert f"  tasks:       {counted[1]} registered:\n" in err
    listed = re.findall(r"\n    (\S+) \(queue (\S+)\)", err)
    assert len(listed) == int(counted[1])
    assert (tasks.validate_card.name, "default") in listed


def test_the_banner_of_a_pool_is_printed_once(blitzq_redis: Any, env: dict[str, str],
                                              manage: Any) -> None:
    err = burst(manage, env, "--processes", "2")
    assert err.count(" starting\n") == 1, err
    assert "blitzq worker pool of 2 processes starting" in err
    assert "1 process per worker, 2 processes" not in err
    assert err.count(" serving default") == 2  # each child's own line


def test_json_logs_carry_the_task_fields(blitzq_redis: Any, env: dict[str, str],
                                         manage: Any) -> None:
    handle = tasks.validate_card.enqueue("4242424242424242")
    lines = [json.loads(line) for line in burst(manage, env, "--log-format", "json")
             .splitlines() if line.startswith("{")]
    failures = [line for line in lines if line["logger"] == "blitzq.task"]
    assert [line["level"] for line in failures] == ["WARNING", "ERROR"]
    warning = failures[0]
    assert {k: warning[k] for k in ("task_name", "task_id", "queue", "attempt",
                                    "max_attempts", "outcome", "error_type")} == {
        "task_name": tasks.validate_card.name, "task_id": handle.id, "queue": "default",
        "attempt": 1, "max_attempts": 2, "outcome": "retrying", "error_type": "ValueError"}
    assert isinstance(warning["duration_ms"], int) and warning["time"]
    assert "Traceback (most recent call last)" in warning["exc_info"]
    assert "in validate_card" in warning["exc_info"]
    (start,) = [line for line in lines if "starting" in line["message"]]
    assert start["queues"] == ["default"] and start["redis_source"] == "BLITZQ['REDIS_URL']"


def test_the_log_format_setting_turns_json_on(blitzq_redis: Any, env: dict[str, str],
                                              manage: Any) -> None:
    tasks.validate_card.enqueue("4242424242424242")
    err = burst(manage, {**env, "TEST_LOG_FORMAT": "json"})
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [r["level"] for r in records if r["logger"] == "blitzq.task"] == ["WARNING", "ERROR"]


def test_json_asked_of_a_project_with_its_own_logging_says_so(
        blitzq_redis: Any, env: dict[str, str], manage: Any) -> None:
    err = burst(manage, {**env, "DJANGO_SETTINGS_MODULE": "testproject.settings"},
                "--log-format", "json")
    assert "the project's LOGGING configures logging itself" in err


def test_every_long_running_command_takes_log_format() -> None:
    for name in ("runworker", "runscheduler", "runhistory", "runoutbox"):
        command = load_command_class(get_commands()[name], name)
        options = command.create_parser("manage.py", name).parse_args(["--log-format", "json"])
        assert options.log_format == "json", name


def test_runscheduler_says_where_redis_is(env: dict[str, str], manage: Any,
                                          redis_url: str) -> None:
    proc = manage("runscheduler", "--no-reload", env=env)
    lines: list[str] = []
    assert proc.stderr is not None
    wait_until(lambda: lines.append(proc.stderr.readline()) or "starting" in lines[-1]
               or proc.poll() is not None, timeout=30, message="the scheduler's line")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert f"starting: redis {redis_url}, from BLITZQ['REDIS_URL']; promotes delayed" \
        in lines[-1]


def test_the_redis_source_names_the_setting_the_environment_or_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from blitzq_django.management import banner

    merged = {**conf.DEFAULTS}
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert banner.redis_source(merged) == (
        "the default redis://localhost:6379/0: neither BLITZQ['REDIS_URL'] nor the "
        "REDIS_URL environment variable is set")
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:6379/0")
    assert banner.redis_source(merged) == "the REDIS_URL environment variable"
    assert banner.redis_source({**merged, "REDIS_URL": "redis://x"}) == "BLITZQ['REDIS_URL']"
    assert banner.redis_source({**merged, "REDIS_URL": lambda: "redis://x"}) == \
        "BLITZQ['REDIS_URL'] (a callable)"
    assert banner.redis_source({**merged, "CACHE_ALIAS": "default"}) == \
        "settings.CACHES['default'] (BLITZQ['CACHE_ALIAS'])"
    assert banner.redis_source({**merged, "BROKER": "memory"}) == "BLITZQ['BROKER'] 'memory'"


def test_the_banner_masks_the_password(settings: Any, caplog: pytest.LogCaptureFixture
                                       ) -> None:
    settings.BLITZQ = {"REDIS_URL": "redis://:hunter2@cache.internal:6380/3"}
    client = conf.get_client()  # builds no connection
    from blitzq_django.engine import WorkerConfig
    from blitzq_django.management import banner

    with caplog.at_level(logging.INFO, logger="blitzq.worker"):
        banner.worker(client, WorkerConfig(queues=("default",)), conf.get_settings(),
                      {"processes": 1, "verbosity": 1, "history": True})
    (line,) = [r for r in caplog.records if "starting" in r.getMessage()]
    assert "redis://:***@cache.internal:6380/3, from BLITZQ['REDIS_URL']" in line.getMessage()
    assert "hunter2" not in caplog.text and line.redis_source == "BLITZQ['REDIS_URL']"  # type: ignore[attr-defined]


def test_log_format_and_tracing_are_checked(settings: Any) -> None:
    settings.BLITZQ = {"LOG_FORMAT": "yaml", "TRACING": "yes"}
    found = {(p.id, p.key) for p in conf.problems()}
    assert ("blitzq.E004", "LOG_FORMAT") in found and ("blitzq.E003", "TRACING") in found
    settings.BLITZQ = {"LOG_FORMAT": "json", "TRACING": True}  # opentelemetry is installed
    assert conf.problems() == []


def test_tracing_on_instruments_the_client(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory"}
    assert conf.get_client().tracing is None
    settings.BLITZQ = {"BROKER": "memory", "TRACING": True}
    assert conf.get_client().tracing is not None


@pytest.mark.django_db(transaction=True)
def test_admin_emails_carry_the_traceback(blitzq_redis: Any, settings: Any,
                                          mailoutbox: list[EmailMessage]) -> None:
    # Django 6 takes addresses; (name, address) pairs are deprecated there, needed before.
    settings.ADMINS = (["ops@example.com"] if django.VERSION >= (6, 0)
                       else [("Ops", "ops@example.com")])
    handler = AdminEmailHandler()
    handler.setLevel(logging.ERROR)
    logger = logging.getLogger("blitzq.task")
    logger.addHandler(handler)
    try:
        handle = tasks.validate_card.enqueue("4242424242424242")
        with running_worker():
            wait_until(lambda: mailoutbox, timeout=20, message="the admins' email")
    finally:
        logger.removeHandler(handler)
    (mail,) = mailoutbox
    assert f"task testproject.shop.tasks.validate_card [{handle.id}] failed on attempt 2 of 2" in \
        mail.subject
    assert "Traceback (most recent call last)" in mail.body and "in validate_card" in mail.body


def test_log_format_reaches_the_child_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    from blitzq_django.history import process
    from blitzq_django.management.logs import configure_logging

    monkeypatch.setenv("BLITZQ_LOG_FORMAT", "text")  # restored (unset) after the test
    blitzq = logging.getLogger("blitzq")
    level = blitzq.level
    try:
        configure_logging(1, None, "json")
    finally:
        blitzq.setLevel(level)
    assert process.child_env()["BLITZQ_LOG_FORMAT"] == "json"  # the history writer's


@pytest.mark.django_db(transaction=True)
def test_tracing_follows_the_django_enqueue_paths(blitzq_redis: Any, settings: Any) -> None:
    from django.db import transaction
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from blitzq_django.engine import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.instrument(blitzq_redis, tracer_provider=provider)
    with provider.get_tracer("web").start_as_current_span("request") as request:
        with transaction.atomic():
            on_commit = tasks.noop.enqueue_on_commit()
        sent = [on_commit.id]
        if django_tasks_available():
            from testproject.shop import dtasks

            settings.TASKS = {"default": {"BACKEND": "blitzq_django.backend.BlitzQBackend"}}
            sent.append(dtasks.add.enqueue(1, 2).id)
    with running_worker():
        wait_until(lambda: len([s for s in exporter.get_finished_spans()
                                if s.name.startswith("process ")]) == len(sent), timeout=20,
                   message="a consumer span per message")
    spans = exporter.get_finished_spans()
    creates = {s.attributes["messaging.message.id"]: s for s in spans  # type: ignore[index]
               if s.name.startswith("create ")}
    assert set(creates) == set(sent)
    for span in creates.values():
        assert span.parent.span_id == request.get_span_context().span_id  # type: ignore[union-attr]
    for span in (s for s in spans if s.name.startswith("process ")):
        message_id = span.attributes["messaging.message.id"]  # type: ignore[index]
        assert span.parent.span_id == creates[message_id].context.span_id  # type: ignore[union-attr]


def django_tasks_available() -> bool:
    """django.tasks (Django 6) or the django-tasks backport (tests/django/test_tasks_backend.py)."""
    from django.core.exceptions import ImproperlyConfigured

    try:
        import blitzq_django.backend  # noqa: F401
    except ImproperlyConfigured:
        return False
    return True


def test_the_banner_says_the_mode_and_the_history_writer() -> None:
    from blitzq_django.engine import MemoryBroker, RedisBroker
    from blitzq_django.engine.banner import delivery_mode

    redis = Client(RedisBroker("redis://localhost:1/0", queue_modes={"bulk": "fast"}))
    assert delivery_mode(redis, ["default", "bulk", "mail"]) == "reliable; fast: bulk"
    assert delivery_mode(redis, ["default"]) == "reliable"
    assert delivery_mode(Client(MemoryBroker()), ["default"]).startswith("memory: ")
    from blitzq_django.management.banner import history_writer

    merged = {**conf.DEFAULTS}
    assert history_writer(merged, True) == "writer process (HISTORY 'all')"
    assert history_writer({**merged, "HISTORY_WRITER": "thread", "HISTORY": "failures"},
                          True) == "writer thread (HISTORY 'failures')"
    assert history_writer({**merged, "HISTORY": "off"}, True) == \
        "off (BLITZQ['HISTORY'] is 'off')"
    assert history_writer({**merged, "EVENTS": False}, True) == \
        "off (BLITZQ['EVENTS'] is False)"


def test_the_log_format_environment_variable_wins_over_the_setting(
        blitzq_redis: Any, env: dict[str, str], manage: Any) -> None:
    tasks.validate_card.enqueue("4242424242424242")
    err = burst(manage, {**env, "TEST_LOG_FORMAT": "text", "BLITZQ_LOG_FORMAT": "json"})
    assert [json.loads(line)["level"] for line in err.splitlines()
            if '"logger": "blitzq.task"' in line] == ["WARNING", "ERROR"]
