"""The django.tasks backend, used as Django documents its Tasks framework: ``@task``
functions (testproject/shop/dtasks.py) enqueued with ``enqueue``/``aenqueue``, run by a
real worker on a real Redis, their results read with ``refresh()``/``get_result()``.

Runs on Django 6 (``django.tasks``) and on Django 5.2 with the django-tasks backport.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.checks.registry import registry as check_registry
from django.core.exceptions import ImproperlyConfigured

try:
    import blitzq_django.backend  # noqa: F401
except ImproperlyConfigured:  # neither Django 6 nor the django-tasks backport
    pytest.skip("needs django.tasks: Django 6, or the django-tasks backport (in the test "
                "extra for Python < 3.12)", allow_module_level=True)

from blitzq_django import conf  # noqa: E402
from blitzq_django.backend import (  # noqa: E402  # noqa: E402  # noqa: E402  # noqa: E402
    BlitzQBackend,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    priority_lane,
    task_enqueued,
    task_finished,
    task_started,
)
from blitzq_django.decorators import declared_queues  # noqa: E402
from blitzq_django.engine.client import TaskCancelled  # noqa: E402
from blitzq_django.management.commands.runworker import listeners as worker_listeners  # noqa: E402
from blitzq_django.tasks import configured  # noqa: E402
from blitzq_django.tasks.configured import django_tasks_queues  # noqa: E402
from blitzq_django.tasks.configured import worker_listeners as django_tasks_listeners  # noqa: E402
from blitzq_django.tasks.django_tasks import DjangoTasksListener  # noqa: E402
from testproject.shop import dtasks  # noqa: E402
from tests.support.migrated import migrated_sqlite, sqlite_env
from tests.support.waiting import wait_until  # noqa: E402

try:  # the logger of Django's own task_finished receiver (log_task_finished)
    from django.tasks.signals import logger as django_tasks_logger
except ImportError:
    from django_tasks.signals import logger as django_tasks_logger

from .conftest import running_worker  # noqa: E402

BACKEND = "blitzq_django.backend.BlitzQBackend"


@pytest.fixture
def tasks_backend(settings: Any, blitzq_redis: Any) -> Iterator[Any]:
    """TASKS naming the BlitzQ backend, on the test's Redis namespace."""
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "emails"]}}
    yield blitzq_redis


def finished(result: Any, timeout: float = 15.0) -> Any:
    def done() -> bool:
        result.refresh()
        return result.is_finished

    wait_until(done, timeout=timeout, message=f"task result {result.id} to finish")
    return result


def worker() -> Any:
    return running_worker(listeners=worker_listeners())


def test_enqueue_run_refresh_and_get_result(tasks_backend: Any) -> None:
    result = dtasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at is not None and result.args == [2, 3]
    assert result.backend == "default" and result.worker_ids == []
    # Found at once, before any worker ran it (each enqueue writes its record).
    fetched = dtasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY and fetched.task.func is dtasks.add.func
    with pytest.raises(ValueError, match="not finished"):
        fetched.return_value  # noqa: B018
    with worker() as w:
        finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.errors == [] and result.worker_ids == [w.name] and result.attempts == 1
    assert result.started_at is not None and result.finished_at >= result.started_at
    again = dtasks.add.get_result(result.id)
    assert (again.status, again.return_value, again.worker_ids) == (
        TaskResultStatus.SUCCESSFUL, 5, [w.name])
    # The default backend's get_result too; a wrong id is TaskResultDoesNotExist.
    from blitzq_django.backend import BlitzQBackend as Backend

    backend = dtasks.add.get_backend()
    assert isinstance(backend, Backend)
    assert backend.get_result(result.id).return_value == 5
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("0" * 32)
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("not an id")


def test_async_task_aenqueue_and_aget_result(tasks_backend: Any) -> None:
    async def enqueue() -> Any:
        try:
            return await dtasks.multiply.aenqueue(6, 7)
        finally:
            await conf.get_client().broker.aclose()  # this loop's connections

    result = asyncio.run(enqueue())
    assert result.status == TaskResultStatus.READY
    with worker():
        finished(result)

    async def fetch() -> Any:
        try:
            return await dtasks.multiply.aget_result(result.id)
        finally:
            await conf.get_client().broker.aclose()

    fetched = asyncio.run(fetch())
    assert (fetched.status, fetched.return_value) == (TaskResultStatus.SUCCESSFUL, 42)

    async def refresh() -> Any:
        try:
            await result.arefresh()
            return result
        finally:
            await conf.get_client().broker.aclose()

    assert asyncio.run(refresh()).return_value == 42


def test_failure_maps_to_failed_with_the_exception_path(tasks_backend: Any) -> None:
    failing = dtasks.fail.enqueue("card declined")
    unstorable = dtasks.returns_a_set.enqueue()
    with worker():
        finished(failing)
        finished(unstorable)
    assert failing.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        failing.return_value  # noqa: B018
    (error,) = failing.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "card declined" in error.traceback
    # Retries default to 0 (Django's semantics): one attempt.
    assert failing.attempts == 1
    # A return value Django could not store as JSON fails the attempt, as in Django.
    assert unstorable.status == TaskResultStatus.FAILED
    assert unstorable.errors[0].exception_class is TypeError


def test_takes_context_gets_the_attempt(tasks_backend: Any) -> None:
    result = dtasks.describe_attempt.enqueue("ctx")
    with worker():
        finished(result)
    assert result.return_value == {"tag": "ctx", "attempt": 1, "id": result.id,
                                   "status": "RUNNING"}


def test_priority_goes_to_the_lanes(tasks_backend: Any, redis_client: Any) -> None:
    assert [priority_lane(p) for p in (-100, -1, 0, 1, 100)] == [
        "low", "low", None, "high", "high"]
    low = [dtasks.record_order.using(priority=-10).enqueue(f"low{i}") for i in range(2)]
    normal = [dtasks.record_order.enqueue(f"normal{i}") for i in range(3)]
    high = [dtasks.record_order.using(priority=100).enqueue(f"high{i}") for i in range(4)]
    keys = tasks_backend.broker.keys.queue("default")
    lengths = [redis_client.xlen(keys.lane(lane).stream) for lane in ("high", None, "low")]
    assert lengths == [4, 3, 2]  # the worker reads the high lane first, the low one last
    with worker():
        for result in (*low, *normal, *high):
            finished(result)
    assert [r.return_value for r in high] == [f"high{i}" for i in range(4)]


def test_run_after_defers(tasks_backend: Any) -> None:
    run_after = dt.datetime.now(tz=dt.UTC) + dt.timedelta(seconds=1.5)
    result = dtasks.add.using(run_after=run_after).enqueue(1, 1)
    assert result.task.run_after == run_after
    with worker():
        result.refresh()
        assert result.status == TaskResultStatus.READY  # scheduled
        finished(result)
    assert result.return_value == 2
    assert result.started_at >= run_after - dt.timedelta(milliseconds=50)


def test_queue_name_is_the_blitzq_queue(tasks_backend: Any) -> None:
    result = dtasks.add.using(queue_name="emails").enqueue(4, 4)
    assert "emails" in declared_queues
    assert conf.get_client().inspect(result.id, queue="emails").state == "queued"
    with running_worker(queues=("emails",)):
        finished(result)
    assert result.return_value == 8
    with pytest.raises(InvalidTask, match="not valid"):
        dtasks.add.using(queue_name="reports")


def test_cancelled_maps_to_failed_with_blitzq_exception(tasks_backend: Any) -> None:
    run_after = dt.datetime.now(tz=dt.UTC) + dt.timedelta(hours=1)
    result = dtasks.add.using(run_after=run_after).enqueue(1, 2)
    assert conf.get_client().cancel(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TaskCancelled
    assert result.worker_ids == []


def test_registered_by_module_path_and_found_by_import(tasks_backend: Any) -> None:
    name = "testproject.shop.dtasks.add"
    assert dtasks.add.module_path == name
    result = dtasks.add.enqueue(10, 5)
    assert conf.registry.get(name).name == name
    # A worker that never imported the module finds it by its module path.
    conf.registry._specs.pop(name)
    configured._unresolved.discard(name)  # the resolver's memory of names it missed
    module = sys.modules.pop("testproject.shop.dtasks")
    try:
        with worker():
            finished(result)
        assert result.return_value == 15
        assert "testproject.shop.dtasks" in sys.modules
    finally:
        # Back to this module's tasks (the import made new Task objects).
        sys.modules["testproject.shop.dtasks"] = module
        backend = dtasks.add.get_backend()
        for value in vars(module).values():
            if hasattr(value, "module_path") and hasattr(value, "func"):
                conf.registry._specs.pop(value.module_path, None)
                backend.register(value)
    # Only modules of installed apps are imported for a name.
    assert conf.registry.find("os.system") is None
    assert conf.registry.find("tests.django.nothing.here") is None


def test_django_task_signals(tasks_backend: Any) -> None:
    seen: list[tuple[str, Any, str, str]] = []

    def receiver(signal_name: str) -> Any:
        def on(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((signal_name, sender, task_result.id, str(task_result.status)))
        return on

    receivers = {task_enqueued: receiver("enqueued"), task_started: receiver("started"),
                 task_finished: receiver("finished")}
    for signal, on in receivers.items():
        signal.connect(on)
    try:
        ok = dtasks.add.enqueue(1, 2)
        bad = dtasks.fail.enqueue("no")
        with worker():
            finished(ok)
            finished(bad)
            wait_until(lambda: len(seen) == 6, message="six signals")
    finally:
        for signal, on in receivers.items():
            signal.disconnect(on)
    by_id = {(name, rid): status for name, _s, rid, status in seen}
    assert all(sender is BlitzQBackend for _n, sender, _i, _s in seen)
    assert by_id == {("enqueued", ok.id): "READY", ("enqueued", bad.id): "READY",
                     ("started", ok.id): "RUNNING", ("started", bad.id): "RUNNING",
                     ("finished", ok.id): "SUCCESSFUL", ("finished", bad.id): "FAILED"}
    # task_started before task_finished for each.
    for rid in (ok.id, bad.id):
        order = [name for name, _s, i, _st in seen if i == rid]
        assert order == ["enqueued", "started", "finished"]


def test_checks(settings: Any, blitzq_redis: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["bad queue"],
                                  "OPTIONS": {"retriez": 1}}}
    from blitzq_django.backend import BlitzQBackend as Backend

    backend = Backend("default", settings.TASKS["default"])
    ids = {m.id for m in backend.check()}
    assert ids == {"blitzq.E101", "blitzq.E102"}
    settings.BLITZQ = {**settings.BLITZQ, "STORE_RESULTS": False}
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"retries": 2}}}
    backend = Backend("default", settings.TASKS["default"])
    assert [m.id for m in backend.check()] == ["blitzq.W101"]
    # Run by Django's own check of the task backends.
    try:
        from django.tasks.checks import check_tasks
    except ImportError:
        from django_tasks.checks import check_tasks
    assert check_tasks in check_registry.registered_checks
    assert [m.id for m in check_tasks()] == ["blitzq.W101"]


def test_runworker_serves_the_backend_queues_and_listens(tasks_backend: Any) -> None:
    from blitzq_django.management.commands.runworker import Command

    assert {"default", "emails"} <= set(Command()._queues([], conf.get_settings(),
                                                          conf.get_client()))
    (listener,) = django_tasks_listeners()  # task_started/task_finished need the worker's
    assert isinstance(listener, DjangoTasksListener)


def test_options_retries_give_one_worker_id_per_attempt(settings: Any,
                                                        blitzq_redis: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {
        "retries": 1, "initial_delay": 0, "jitter": False}}}
    result = dtasks.fail.enqueue("twice")
    assert conf.registry.get(dtasks.fail.module_path).retry.retries == 1
    with worker() as w:
        finished(result)
    assert result.status == TaskResultStatus.FAILED and result.attempts == 2
    assert result.worker_ids == ["", w.name]  # a record keeps only the last worker
    assert result.errors[0].exception_class is ValueError


def test_runworker_imports_their_module_and_runs_them(tasks_backend: Any, tmp_path: Any,
                                                      redis_url: str, namespace: str) -> None:
    # testproject/shop/dtasks.py is not a tasks.py: the worker imports it by module path.
    results = [dtasks.add.enqueue(20, 22), dtasks.multiply.enqueue(3, 3),
               dtasks.describe_attempt.enqueue("sub")]
    root = Path(__file__).resolve().parents[2]
    env = sqlite_env({**os.environ, "DJANGO_SETTINGS_MODULE": "tests.django.tasks_settings",
                      "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                      "BLITZQ_SQLITE": str(migrated_sqlite(tmp_path / "db.sqlite3")),
                      "PYTHONPATH": str(root)})
    proc = subprocess.run([sys.executable, str(root / "manage.py"), "runworker", "--burst",
                           "--queues", "default"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "succeeded 3" in proc.stdout, proc.stdout
    for result in results:
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert [r.return_value for r in results[:2]] == [42, 9]
    assert results[2].return_value["attempt"] == 1


class _Kept(logging.Handler):
    """Keeps the real records a logger emits."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_failure_reaches_djangos_logger_with_its_traceback(tasks_backend: Any) -> None:
    # Django's log_task_finished logs a FAILED result with sys.exc_info(): the signal must
    # be sent while the task's exception is handled, as Django's own backends send it.
    kept = _Kept()
    django_tasks_logger.addHandler(kept)
    try:
        failing = dtasks.fail.enqueue("card declined")
        with worker():
            finished(failing)
            wait_until(lambda: any(r.levelno >= logging.ERROR for r in kept.records),
                       message="Django's task_finished log line")
    finally:
        django_tasks_logger.removeHandler(kept)
    (line,) = [r for r in kept.records if r.levelno >= logging.ERROR]
    assert failing.id in line.getMessage() and "FAILED" in line.getMessage()
    assert line.exc_info is not None and line.exc_info[0] is ValueError
    assert str(line.exc_info[1]) == "card declined"
    text = logging.Formatter().format(line)
    # The task's own frame, as Django's ImmediateBackend logs it.
    assert "raise ValueError(message)" in text and ", in fail" in text, text
    assert "NoneType: None" not in text
    # The exception keeps its own traceback (nothing of the listener added to it).
    assert line.exc_info[1].__traceback__.tb_frame.f_code.co_name != "_send_failed"


def test_a_failure_without_an_exception_reaches_djangos_logger(tasks_backend: Any) -> None:
    # Cancelled before it ran: no exception was raised, the log line still has one.
    kept = _Kept()
    django_tasks_logger.addHandler(kept)
    try:
        result = dtasks.add.enqueue(1, 1)
        assert conf.get_client().cancel(result.id).outcome == "revoked"
        with worker():
            finished(result)
            wait_until(lambda: any(r.levelno >= logging.ERROR for r in kept.records),
                       message="Django's task_finished log line")
    finally:
        django_tasks_logger.removeHandler(kept)
    (line,) = [r for r in kept.records if r.levelno >= logging.ERROR]
    assert result.id in line.getMessage()
    assert line.exc_info is not None and line.exc_info[0] is TaskCancelled


def test_get_result_returns_the_task_as_enqueued(settings: Any, blitzq_redis: Any) -> None:
    both = {"BACKEND": BACKEND, "QUEUES": ["default", "emails"]}
    settings.TASKS = {"default": both, "other": both}
    run_after = dt.datetime.now(tz=dt.UTC) + dt.timedelta(hours=1, microseconds=7)
    task = dtasks.add.using(queue_name="emails", priority=7, run_after=run_after,
                            backend="other")
    result = task.enqueue(2, b=3)
    assert (result.task, result.backend) == (task, "other")
    fetched = dtasks.add.get_result(result.id)  # through the "default" alias
    assert fetched.task == task  # queue_name, priority, run_after, backend
    assert (fetched.task.queue_name, fetched.task.priority, fetched.task.run_after,
            fetched.task.backend) == ("emails", 7, run_after, "other")
    assert (fetched.args, fetched.kwargs) == ([2], {"b": 3})
    assert fetched == result  # every field Django compares, enqueued_at included
    # Cancelling where the result says it is finds it.
    assert conf.get_client().cancel(fetched.id, queue=fetched.task.queue_name)
    fetched.refresh()
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.errors[0].exception_class is TaskCancelled

    # Run by a worker: the signals and the result carry the Task as enqueued too.
    seen: list[Any] = []

    def on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(task_result)

    low = dtasks.add.using(queue_name="emails", priority=-5)
    ran = low.enqueue(b=4, a=1)
    task_finished.connect(on_finished)
    try:
        with running_worker(queues=("emails",), listeners=worker_listeners()):
            finished(ran)
            wait_until(lambda: seen, message="task_finished")
    finally:
        task_finished.disconnect(on_finished)
    again = dtasks.add.get_result(ran.id)
    for found in (ran, again, seen[0]):
        assert found.task == low and (found.args, found.kwargs) == ([], {"b": 4, "a": 1})
        assert found.enqueued_at == ran.enqueued_at
    assert again.return_value == 5
    assert seen[0].backend == "default" and seen[0].finished_at >= seen[0].started_at


def test_enqueued_at_is_the_one_stored(settings: Any, blitzq_redis: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # With TRACK_STATE the record is written at enqueue; enqueue() must return its
    # time, not a time of its own. A clock that moves 1 ms per read shows any second read.
    settings.BLITZQ = {**settings.BLITZQ, "TRACK_STATE": True}
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    assert conf.get_client().track_state
    real, reads = time.time, itertools.count()
    monkeypatch.setattr(time, "time", lambda: real() + next(reads) / 1000)
    results = [dtasks.add.enqueue(n, n) for n in range(5)]
    monkeypatch.undo()
    for result in results:
        assert dtasks.add.get_result(result.id).enqueued_at == result.enqueued_at


@pytest.mark.parametrize("track_state", [True, False], ids=["TRACK_STATE", "default"])
def test_get_result_says_running_while_it_runs(settings: Any, blitzq_redis: Any,
                                               track_state: bool) -> None:
    # The default (TRACK_STATE off) relies on the engine's inspect() reporting running
    # messages (issue 19, item 5).
    settings.BLITZQ = {**settings.BLITZQ, "TRACK_STATE": track_state}
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    dtasks.RELEASE.clear()
    result = dtasks.wait_for_release.enqueue(30)
    try:
        with worker():
            def running() -> bool:
                result.refresh()
                return result.status == TaskResultStatus.RUNNING

            wait_until(running, timeout=15, message="get_result() saying RUNNING")
            assert not result.is_finished and result.started_at is not None
            dtasks.RELEASE.set()
            finished(result)
    finally:
        dtasks.RELEASE.set()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, True)


def test_check_error_without_the_app(settings: Any, blitzq_redis: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    backend = BlitzQBackend("default", settings.TASKS["default"])
    assert "blitzq.E023" not in {m.id for m in backend.check()}
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS
                               if app != "blitzq_django"]
    (error,) = [m for m in backend.check() if m.id == "blitzq.E023"]
    assert error.level == checks_error_level()
    assert "INSTALLED_APPS" in error.msg and "'blitzq_django'" in (error.hint or "")


def checks_error_level() -> int:
    from django.core import checks

    return checks.ERROR


def test_a_subclass_of_the_backend_is_served_and_heard(settings: Any, blitzq_redis: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "tests.django.contract_backends.QueuedBackend",
                                  "QUEUES": ["default", "emails"]}}
    (listener,) = django_tasks_listeners()  # its task_started / task_finished
    assert isinstance(listener, DjangoTasksListener)
    assert django_tasks_queues() == ["default", "emails"]  # runworker serves them
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
    assert django_tasks_listeners() == [] and django_tasks_queues() == []


def test_get_result_on_the_memory_broker(settings: Any, blitzq_memory: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    task = dtasks.add.using(priority=-3)
    result = task.enqueue(1, b=2)
    fetched = dtasks.add.get_result(result.id)
    assert fetched == result and fetched.task == task and fetched.kwargs == {"b": 2}


def test_what_the_worker_calls_has_the_callers_signature(tasks_backend: Any) -> None:
    # Arguments are checked against it at enqueue (issue 19, item 4): a takes_context
    # task is called with its arguments after `context`.
    import inspect

    for task, params in ((dtasks.add, ["a", "b"]), (dtasks.describe_attempt, ["tag"])):
        task.get_backend().validate_task(task)
        runner = conf.registry.get(task.module_path).func
        assert list(inspect.signature(runner).parameters) == params
