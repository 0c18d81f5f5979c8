"""Every task outcome that is not a plain success is logged on ``blitzq.task`` with the
task's fields and, for a failed attempt, the exception itself (docs/observability.md);
successes are logged on ``blitzq.task.succeeded`` once a project turns it on.

Real workers on a real Redis; the records are those ``logging`` hands to its handlers
(caplog), never a stand-in logger."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from blitzq_django.engine import Client, current_task
from blitzq_django.engine.core.message import pack

from ..support.waiting import await_until
from . import process_tasks
from .helpers import arun_burst, background_worker, deliveries_of_dead_workers, inject, run_burst

TASK_LOGGER = "blitzq.task"


def task_records(caplog: pytest.LogCaptureFixture, name: str = TASK_LOGGER
                 ) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name]


def assert_fields(record: logging.LogRecord, **expected: Any) -> None:
    for key, value in expected.items():
        assert getattr(record, key) == value, (key, getattr(record, key, "<missing>"))
    assert isinstance(record.duration_ms, int) and record.duration_ms >= 0  # type: ignore[attr-defined]


def test_a_retried_then_dead_lettered_def_task_logs_warning_then_error_with_its_exception(
        redis_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)
    raised: list[BaseException] = []

    @client.task(name="shop.charge", retries=1, initial_delay=0)
    def charge(order: int) -> None:
        try:
            raise RuntimeError(f"card declined for order {order}")
        except RuntimeError as exc:
            raised.append(exc)
            raise

    handle = charge.enqueue(7)
    run_burst(client)
    warning, error = task_records(caplog)
    assert warning.levelno == logging.WARNING and error.levelno == logging.ERROR
    # The exception object itself, with its traceback: what Sentry and AdminEmailHandler
    # read from exc_info.
    assert warning.exc_info is not None and warning.exc_info[1] is raised[0]
    assert error.exc_info is not None and error.exc_info[1] is raised[1]
    frames = [f.name for f in traceback.extract_tb(error.exc_info[2])]
    assert "charge" in frames
    assert_fields(warning, task_name="shop.charge", task_id=handle.id, queue="default",
                  attempt=1, max_attempts=2, outcome="retrying", error_type="RuntimeError",
                  retry_in_s=0)
    assert_fields(error, task_name="shop.charge", task_id=handle.id, queue="default",
                  attempt=2, max_attempts=2, outcome="dead_lettered",
                  reason="retries exhausted", error_type="RuntimeError")
    text = warning.getMessage()
    assert ("task shop.charge [" + handle.id + "] failed on attempt 1 of 2 (queue default,"
            in text)
    assert "retrying in 0 s: RuntimeError: card declined for order 7" in text
    assert "dead-lettered (retries exhausted): RuntimeError" in error.getMessage()
    assert "attempt 2 of 2" in error.getMessage()
    # The formatted line ends with the traceback, as any handler prints it.
    formatted = logging.Formatter().format(error)
    assert "Traceback (most recent call last)" in formatted and "in charge" in formatted


def test_an_async_task_that_fails_for_good_logs_error(
        redis_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)

    @client.task(name="reports.build", dead_letter=False)
    async def build() -> None:
        await asyncio.sleep(0)
        raise KeyError("missing column")

    handle = build.enqueue()
    run_burst(client)
    (error,) = task_records(caplog)
    assert error.levelno == logging.ERROR
    assert error.exc_info is not None and isinstance(error.exc_info[1], KeyError)
    assert "in build" in logging.Formatter().format(error)
    assert_fields(error, task_name="reports.build", task_id=handle.id, attempt=1,
                  max_attempts=1, outcome="failed", error_type="KeyError")
    assert "failed for good: KeyError" in error.getMessage()


def test_a_process_executor_failure_logs_the_childs_traceback(
        redis_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)
    fail = client.task(process_tasks.fail, name="fail", executor="process")
    handle = fail.enqueue("in the child")
    run_burst(client, processes=1)
    (error,) = task_records(caplog)
    assert error.levelno == logging.ERROR
    assert isinstance(error.exc_info[1], ValueError)  # type: ignore[index]
    assert_fields(error, task_id=handle.id, outcome="dead_lettered")
    # Its frames stayed in the child; their text comes back as the cause.
    formatted = logging.Formatter().format(error)
    assert "in the child process" in formatted
    assert "process_tasks.py" in formatted and "in fail" in formatted
    assert "ValueError: in the child" in formatted
    # The record's traceback shows it too.
    record = client.get_result(handle.id, 5)
    assert record.traceback is not None and "in fail" in record.traceback


def test_dead_letters_that_never_ran_log_error(redis_broker: Any,
                                               caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)
    client.task(name="known")(lambda: None)
    unknown = client.task(name="gone")(lambda: None)
    handle = unknown.enqueue()
    client.registry._specs.pop("gone")  # a worker that does not know the task
    inject(client.broker, "default", b"not msgpack at all")
    inject(client.broker, "default", pack(["a list", "that is not a message"]))
    run_burst(client)
    records = task_records(caplog)
    assert [r.levelno for r in records] == [logging.ERROR] * 3
    by_reason = {r.reason: r for r in records}  # type: ignore[attr-defined]
    gone = by_reason["unknown task"]
    assert gone.exc_info is None
    assert gone.task_name == "gone" and gone.task_id == handle.id  # type: ignore[attr-defined]
    assert gone.queue == "default" and gone.outcome == "dead_lettered"  # type: ignore[attr-defined]
    assert gone.delivery_count == 1  # type: ignore[attr-defined]
    assert "dead-lettered without running (unknown task)" in gone.getMessage()
    malformed = [r for r in records if r.reason == "malformed message"]  # type: ignore[attr-defined]
    assert len(malformed) == 2
    assert all(r.task_id is None and r.queue == "default" for r in malformed)  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_a_message_delivered_too_many_times_logs_error(
        redis_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)
    t = client.task(name="t")(lambda: None)
    handle = t.enqueue()
    await deliveries_of_dead_workers(client.broker, 2, started=True)
    async with background_worker(client, visibility_timeout=0.3, max_deliveries=3):
        await await_until(lambda: task_records(caplog), 5, message="its log line")
    (error,) = task_records(caplog)
    assert error.levelno == logging.ERROR
    assert error.reason == "max deliveries exceeded"  # type: ignore[attr-defined]
    assert error.task_id == handle.id and error.delivery_count == 4  # type: ignore[attr-defined]
    assert "started 3 times, delivered 4 times (max_deliveries 3)" in error.getMessage()


def test_an_expired_message_logs_a_warning(redis_broker: Any,
                                           caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)
    t = client.task(name="t")(lambda: None)
    handle = t.options(expires=0.001).enqueue()
    asyncio.run(asyncio.sleep(0.01))  # (noqa: sleep) past its expiry, by construction
    run_burst(client)
    (warning,) = task_records(caplog)
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert warning.task_id == handle.id and warning.outcome == "expired"  # type: ignore[attr-defined]
    assert "dropped without running" in warning.getMessage()


def test_a_result_that_cannot_be_stored_logs_error(redis_broker: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)

    @client.task(name="t")
    def t() -> object:
        return object()

    t.enqueue()
    run_burst(client)
    (error,) = task_records(caplog)
    assert error.levelno == logging.ERROR and error.exc_info is None
    assert "TypeError: task result of type object cannot be stored" in error.getMessage()


def test_successes_are_not_logged_until_turned_on(redis_broker: Any,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)

    @client.task(name="ok", retries=2)
    def ok() -> int:
        return current_task().attempt  # type: ignore[union-attr]

    caplog.set_level(logging.DEBUG, logger="blitzq")  # everything else of blitzq on
    ok.enqueue()
    run_burst(client)
    assert task_records(caplog, "blitzq.task.succeeded") == []
    caplog.set_level(logging.INFO, logger="blitzq.task.succeeded")
    handles = [ok.enqueue(), ok.enqueue()]
    run_burst(client)
    lines = task_records(caplog, "blitzq.task.succeeded")
    assert [r.levelno for r in lines] == [logging.INFO, logging.INFO]
    assert {r.task_id for r in lines} == {h.id for h in handles}  # type: ignore[attr-defined]
    assert_fields(lines[0], task_name="ok", queue="default", attempt=1, max_attempts=3,
                  outcome="succeeded")
    assert "task ok [" in lines[0].getMessage() and "succeeded on attempt 1 of 3" in \
        lines[0].getMessage()


@pytest.mark.asyncio
async def test_async_successes_log_when_on(redis_broker: Any,
                                           caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)

    @client.task(name="aok")
    async def aok() -> None:
        return None

    caplog.set_level(logging.INFO, logger="blitzq.task.succeeded")
    handle = await aok.aenqueue()
    await arun_burst(client)
    (line,) = task_records(caplog, "blitzq.task.succeeded")
    assert line.task_id == handle.id  # type: ignore[attr-defined]


def test_a_task_name_from_redis_cannot_forge_a_log_line(
        redis_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)
    forged = "gone\n2026-01-01 00:00:00,000 CRITICAL blitzq.task: forged"
    client.task(name=forged)(lambda: None).enqueue()
    client.registry._specs.pop(forged)  # the worker does not know it: unknown task
    run_burst(client)
    (error,) = task_records(caplog)
    assert error.reason == "unknown task" and error.task_name == forged  # type: ignore[attr-defined]
    assert "\n" not in error.getMessage() and repr(forged) in error.getMessage()


def test_logging_imports_neither_sentry_nor_the_tracing() -> None:
    """A worker that logs failures, with tracing off, imports neither sentry_sdk (used
    only once the project imported it) nor blitzq's tracing modules. (OpenTelemetry
    itself may be imported by redis-py, when it is installed.)"""
    script = (
        "import asyncio, sys\n"
        "from blitzq_django.engine import Client, MemoryBroker, Worker\n"
        "client = Client(MemoryBroker())\n"
        "@client.task(name='t')\n"
        "def t():\n"
        "    raise ValueError('no')\n"
        "t.enqueue()\n"
        "stats = asyncio.run(Worker(client, burst=True, block_timeout=0.05).run())\n"
        "assert stats.dead_lettered == 1, stats.as_dict()\n"
        "ours = ('blitzq_django.engine.tracing', 'blitzq_django.engine.worker.spans')\n"
        "print(sorted(m for m in sys.modules if m.startswith('sentry_sdk') or m in ours))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "ValueError: no" in done.stderr  # it was logged ...
    assert done.stdout.strip() == "[]"  # ... and nothing optional was imported


@pytest.mark.asyncio
async def test_turning_success_lines_on_reaches_a_running_worker(
        redis_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(redis_broker)

    @client.task(name="aok")
    async def aok() -> None:
        return None

    async with background_worker(client):
        await (await aok.aenqueue()).aresult(timeout=5)
        assert task_records(caplog, "blitzq.task.succeeded") == []
        caplog.set_level(logging.INFO, logger="blitzq.task.succeeded")

        async def a_success_is_logged() -> bool:
            await (await aok.aenqueue()).aresult(timeout=5)
            return bool(task_records(caplog, "blitzq.task.succeeded"))

        # Read once a second (tasklog.SUCCESS_LEVEL_READ_S): within a few, whatever the load.
        await await_until(a_success_is_logged, 5, interval=0.05,
                          message="a success line after the level changed")
