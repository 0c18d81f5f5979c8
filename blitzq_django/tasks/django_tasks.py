"""The ``django.tasks`` backend: Django's ``@task`` functions run on BlitzQ, unchanged.

::

    TASKS = {
        "default": {
            "BACKEND": "blitzq_django.backend.BlitzQBackend",
            "QUEUES": ["default", "emails"],      # optional; [] accepts any queue name
            "OPTIONS": {"retries": 0, "timeout": None, "dead_letter": True},
        },
    }

On Django 6 it is a ``django.tasks`` backend; on Django 5.2 a backend of the
``django-tasks`` backport (``pip install django-tasks``; import ``task`` from
``django_tasks`` there). Without either, importing this module raises
ImproperlyConfigured.

- A task is a BlitzQ task named by its module path (``Task.module_path``), registered
  in the process registry when Django validates it (at decoration, and at each
  ``using()``). A worker finds it because runworker imports every app's tasks.py, or,
  for a task in another module, by importing its module when a message names it
  (only modules of installed apps; ``configured.resolve``).
- ``queue_name`` is the BlitzQ queue (ROUTES do not apply); runworker serves the queues
  of the registered tasks by default.
- ``priority`` (-100..100): above 0 runs in the queue's "high" lane, below 0 in its
  "low" lane, 0 in the normal one. The lanes are strict (high first); order within a
  lane is FIFO, so 1 and 100 are the same priority.
- ``run_after``: the message is scheduled (an ETA); one in the past runs at once.
- ``async def`` tasks run on the worker's event loop, ``def`` tasks on its threads.
- ``takes_context=True``: the task gets a TaskContext whose ``attempt`` is BlitzQ's.
- Arguments and return values must be JSON-compatible, as Django requires (checked at
  enqueue; a return value that is not fails the attempt, like Django's own backends).
- OPTIONS: ``retries`` (default 0: a failure is final, as Django expects),
  ``initial_delay``, ``max_delay``, ``factor``, ``jitter``, ``timeout`` (seconds per
  attempt) and ``dead_letter`` (default True: a final failure is kept in the dead
  letters, where it can be replayed).

Results (``get_result``, ``TaskResult.refresh()``) come from BlitzQ's records, so they
need ``BLITZQ["STORE_RESULTS"]`` (the backend's check() says so). Each enqueue writes
its record (queued or scheduled), so a result is found from the start. Status:

==========================================  =====================================
BlitzQ state                                 TaskResultStatus
==========================================  =====================================
queued, scheduled, retrying                  READY
running (TRACK_STATE's record, else what     RUNNING
  the engine's inspect() knows running now)
succeeded                                    SUCCESSFUL
failed, dead_lettered, cancelled, expired   FAILED
==========================================  =====================================

A FAILED result's ``errors`` hold one TaskError: the task's exception class path when
an attempt raised; ``blitzq_django.engine.client.TaskCancelled`` / ``TaskExpired`` when
cancelled or expired; ``blitzq_django.engine.client.TaskFailed`` when it was
dead-lettered without running (unknown task, too many deliveries). A READY result
after a failed attempt (retrying, with TRACK_STATE) holds that attempt's error.
``worker_ids`` has one entry per attempt that started: the last is the worker's name,
earlier ones are "" (a record keeps only the last worker).

A result fetched by id (``get_result``, ``refresh``) has the Task as it was enqueued
(``using()``'s queue_name, priority, run_after, backend), its ``args`` and ``kwargs``
and the very ``enqueued_at`` that ``enqueue()`` returned: the backend keeps them beside
the record (``calls.py``).

Signals: ``task_enqueued`` is sent by ``enqueue``/``aenqueue`` (``asend``);
``task_started`` and ``task_finished`` by the worker (its listener, ``DjangoTasksListener``), on its
thread pool, with ``sender`` the backend class. A failure's ``task_finished`` is sent
while its exception is being handled, as Django's backends send it: Django's own
receiver logs it with its traceback ("django.tasks" logger; "django_tasks" on the
backport), and so can any receiver reading ``sys.exc_info()``.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import functools
import importlib
import inspect
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from asgiref.sync import sync_to_async
from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

try:  # Django 6+
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:
    try:  # Django 5.2 with the django-tasks backport
        from django_tasks import checks as _registers_check_tasks  # noqa: F401
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    except ImportError:
        raise ImproperlyConfigured(
            "blitzq_django.backend.BlitzQBackend is a django.tasks backend: it needs "
            "Django 6 or later, or on Django 5.2 the django-tasks backport "
            "(pip install django-tasks).") from None

from ..db_connections import close_old_connections_if_opened
from ..engine import CallOptions, Record, TaskRegistry, TaskSpec, current_task
from ..engine.brokers.base import Enqueue
from ..engine.core import record as states
from ..engine.core.ids import now_ms
from ..engine.core.message import peek_created_ms
from ..engine.core.names import name_ok
from ..engine.core.validate import task_id_ok
from ..engine.errors import BlitzqError, TaskCancelled, TaskExpired, TaskFailed
from ..engine.worker.listeners import Listener, Settled, Started
from ..registry import declared_queues, registry
from ..runtime import get_client
from ..settings import get_settings
from . import calls as backend_calls
from .calls import Call

log = logging.getLogger("blitzq")

#: OPTIONS keys: the TaskSpec options every task of the backend gets.
OPTIONS = frozenset({"retries", "initial_delay", "max_delay", "factor", "jitter", "timeout",
                     "dead_letter"})
DEFAULT_OPTIONS: dict[str, Any] = {"retries": 0}

#: The attribute of a registered runner: (its django.tasks Task, the backend class, the
#: backend's spec options).
TASK_ATTR = "__blitzq_django_task__"

_STATUS = {
    states.QUEUED: TaskResultStatus.READY,
    states.SCHEDULED: TaskResultStatus.READY,
    states.RETRYING: TaskResultStatus.READY,
    states.RUNNING: TaskResultStatus.RUNNING,
    states.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    states.FAILED: TaskResultStatus.FAILED,
    states.DEAD_LETTERED: TaskResultStatus.FAILED,
    states.CANCELLED: TaskResultStatus.FAILED,
    states.EXPIRED: TaskResultStatus.FAILED,
}


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def priority_lane(priority: int) -> str | None:
    """A django.tasks priority (-100..100) as a BlitzQ lane: "high", None or "low"."""
    return "high" if priority > 0 else "low" if priority < 0 else None


class BlitzQBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Problems with QUEUES and OPTIONS are reported by check(); the tasks refuse them.
        self.spec_options = {**DEFAULT_OPTIONS, **{k: v for k, v in self.options.items()
                                                   if k in OPTIONS}}

    # -- defining ----------------------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        self._validated(task)

    def _validated(self, task: Task) -> TaskSpec:
        super().validate_task(task)
        if not name_ok(task.queue_name):
            raise InvalidTask(f"Queue {task.queue_name!r} is not a valid BlitzQ queue name "
                              "(letters, digits, '-', '_', '.'; at most 100 characters).")
        return self.register(task)

    def register(self, task: Task) -> TaskSpec:
        """The BlitzQ spec of ``task`` (registered on first use)."""
        name = task.module_path
        spec = TaskRegistry.find(registry, name)  # registered only: no import here
        bound = getattr(spec.func, TASK_ATTR, None) if spec is not None else None
        if (spec is not None and bound is not None and bound[0].func is task.func
                and bound[2] == self.spec_options):
            _declare(task.queue_name)
            return spec
        try:
            spec = TaskSpec.build(_runner(task, type(self), self.spec_options), name=name,
                                  queue=task.queue_name, **self.spec_options)
            spec = registry.add(_without_context(spec))
        except BlitzqError as exc:
            raise InvalidTask(f"{name}: {exc}") from exc
        _declare(task.queue_name)
        return spec

    # -- enqueueing --------------------------------------------------------------------

    def _prepare(self, task: Task, args: Any, kwargs: Any
                 ) -> tuple[Any, Enqueue, TaskResult, Call]:
        spec = self._validated(task)
        client = get_client()
        # As TaskResult does: only JSON-compatible arguments (TypeError/ValueError here).
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        eta = task.run_after
        if eta is not None and eta.utcoffset() is None:  # naive is allowed with USE_TZ off
            eta = timezone.make_aware(eta, timezone.get_default_timezone())
        options = CallOptions(queue=task.queue_name, eta=eta,
                              priority=priority_lane(task.priority))
        try:
            item = client.build(spec, args, kwargs, options)
        except BlitzqError as exc:
            raise InvalidTask(f"{task.module_path}: {exc}") from exc
        # The message's own time: its record, get_result() and the signals all say it.
        created = _created_ms(item)
        if not item.record:  # without TRACK_STATE: a record anyway, so get_result finds it
            state = states.SCHEDULED if item.due_ms else states.QUEUED
            item = replace(item, record=Record(id=item.message_id, task=spec.name,
                                               queue=item.queue, state=state,
                                               created_ms=created).to_bytes())
        result = TaskResult(task=task, id=item.message_id, status=TaskResultStatus.READY,
                            enqueued_at=_when(created), started_at=None, finished_at=None,
                            last_attempted_at=None, args=args, kwargs=kwargs,
                            backend=self.alias, errors=[], worker_ids=[])
        call = Call(self.alias, task.backend, task.queue_name, task.priority, task.run_after,
                    args, kwargs, created)
        return client, item, result, call

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        client, item, result, call = self._prepare(task, args, kwargs)
        backend_calls.write(client.broker, item.queue, item.message_id, call, item.due_ms)
        client.broker.enqueue([item])
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        client, item, result, call = self._prepare(task, args, kwargs)
        await backend_calls.awrite(client.broker, item.queue, item.message_id, call,
                                   item.due_ms)
        await client.broker.aenqueue([item])
        await task_enqueued.asend(type(self), task_result=result)
        return result

    # -- results -----------------------------------------------------------------------

    def _queues(self) -> list[str]:
        """Where a result may be: this backend's queues, else every queue known here."""
        if self.queues:
            return sorted(self.queues)
        return list(dict.fromkeys([*get_settings()["QUEUES"], *sorted(declared_queues)]))

    def get_result(self, result_id: str) -> TaskResult:
        if not task_id_ok(result_id):
            raise TaskResultDoesNotExist(result_id)
        client = get_client()
        queues = self._queues()
        for queue in queues:
            record, call = backend_calls.read_with_record(client.broker, queue, result_id)
            if record is not None:
                return self._result(_live(client, record), call)
        for queue in queues:  # no record (expired, or evicted): scheduled or dead letter?
            record = client.inspect(result_id, queue=queue)
            if record is not None:
                return self._result(record, backend_calls.read(client.broker, queue,
                                                               result_id))
        raise TaskResultDoesNotExist(result_id)

    async def aget_result(self, result_id: str) -> TaskResult:
        if not task_id_ok(result_id):
            raise TaskResultDoesNotExist(result_id)
        client = get_client()
        for queue in self._queues():
            record, call = await backend_calls.aread_with_record(client.broker, queue,
                                                                 result_id)
            if record is not None and not _maybe_running(record):
                return self._result(record, call)
            if record is not None:
                break  # inspect() tells whether it runs: the sync path
        return await sync_to_async(self.get_result, thread_sensitive=False)(result_id)

    def _result(self, record: Record, call: Call | None) -> TaskResult:
        spec = registry.find(record.task)
        bound = getattr(spec.func, TASK_ATTR, None) if spec is not None else None
        if bound is None:
            raise TaskResultDoesNotExist(f"{record.id} is a message of {record.task!r}, "
                                         "not of a django.tasks task")
        task = _as_enqueued(bound[0], call)
        status = _STATUS.get(record.state, TaskResultStatus.READY)
        ran = _attempts(record)
        created = record.created_ms or (call.created_ms if call else None)
        result = TaskResult(task=task, id=record.id, status=status,
                            enqueued_at=_when(created),
                            started_at=_when(record.started_ms),
                            finished_at=_when(record.finished_ms) if record.is_final else None,
                            last_attempted_at=_when(record.started_ms),
                            args=call.args if call is not None else [],
                            kwargs=call.kwargs if call is not None else {},
                            backend=call.alias if call is not None else self.alias,
                            errors=_errors(record),
                            worker_ids=_worker_ids(ran, record.worker))
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", record.result)
        return result

    # -- checks ------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        where = f"TASKS[{self.alias!r}]"

        if not apps.is_installed("blitzq_django"):
            yield checks.Error(
                f"{where} uses BlitzQ, but 'blitzq_django' is not in INSTALLED_APPS: there "
                "is no runworker to run its tasks, and BLITZQ's settings are not checked.",
                hint="Add 'blitzq_django' to INSTALLED_APPS.", id="blitzq.E023")
        unknown = sorted(set(self.options) - OPTIONS)
        if unknown:
            yield checks.Error(f"{where}['OPTIONS'] has unknown key(s) {', '.join(unknown)}.",
                               hint=f"Accepted: {', '.join(sorted(OPTIONS))}.",
                               id="blitzq.E101")
        else:
            try:
                TaskSpec.build(_check_options, **self.spec_options)
            except BlitzqError as exc:
                yield checks.Error(f"{where}['OPTIONS']: {exc}.", id="blitzq.E101")
        bad = sorted(q for q in self.queues if not (isinstance(q, str) and name_ok(q)))
        if bad:
            yield checks.Error(f"{where}['QUEUES'] has invalid queue name(s) "
                               f"{', '.join(map(repr, bad))}.",
                               hint="Letters, digits, '-', '_', '.'; at most 100 characters.",
                               id="blitzq.E102")
        try:
            store = get_settings()["STORE_RESULTS"]
        except ImproperlyConfigured:
            return  # blitzq's own checks report the settings
        if not store:
            yield checks.Warning(f"{where} uses BlitzQ with BLITZQ['STORE_RESULTS'] False: "
                                 "get_result() and TaskResult.refresh() never see a task "
                                 "finish.", hint="Set BLITZQ['STORE_RESULTS'] = True.",
                                 id="blitzq.W101")


def _check_options() -> None:
    """Stands for a task in check(): the OPTIONS are checked as a TaskSpec's."""


def _declare(queue: str) -> None:
    declared_queues.add(queue)


def _when(ms: int | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC) if ms else None


def _created_ms(item: Enqueue) -> int:
    """When the message was built (its ``created_ms``): a second clock read would differ
    by a millisecond now and then."""
    return peek_created_ms(item.payload)


def _maybe_running(record: Record) -> bool:
    """A record that does not say whether its message runs now: the one written at
    enqueue (or at a retry) stays until the outcome unless TRACK_STATE is on."""
    return record.state in (states.QUEUED, states.SCHEDULED, states.RETRYING)


def _live(client: Any, record: Record) -> Record:
    """``record``, or what the engine knows of its message running now (inspect())."""
    if not _maybe_running(record):
        return record
    live = client.inspect(record.id, queue=record.queue)
    return live if live is not None and live.state == states.RUNNING else record


def _as_enqueued(task: Task, call: Call | None) -> Task:
    """``task`` (as first decorated) with the options it was enqueued with (``using()``).
    Built without Django's validation: a result stays readable when its backend's
    settings have changed since."""
    if call is None:
        return task
    given = {"queue_name": call.queue_name, "priority": call.priority,
             "run_after": call.run_after, "backend": call.task_backend}
    if all(getattr(task, name) == value for name, value in given.items()):
        return task
    enqueued = object.__new__(type(task))
    for field in dataclasses.fields(task):
        object.__setattr__(enqueued, field.name, given.get(field.name,
                                                           getattr(task, field.name)))
    return enqueued


def _attempts(record: Record) -> int:
    """Attempts that started, as far as the record tells."""
    if record.state in (states.QUEUED, states.SCHEDULED):
        return record.attempt - 1
    if record.state in (states.CANCELLED, states.EXPIRED, states.DEAD_LETTERED) \
            and not record.started_ms:
        return record.attempt - 1  # settled without running
    return record.attempt


def _worker_ids(attempts: int, worker: str | None) -> list[str]:
    if attempts <= 0:
        return []
    return [""] * (attempts - 1) + [worker or ""]


def _exception_path(error_type: str | None, traceback: str | None) -> str | None:
    """The class path of a recorded exception: its traceback's last line names it
    (module.Class, or Class for builtins)."""
    if not error_type:
        return None
    for line in reversed((traceback or "").splitlines()):
        if not line or line[0].isspace():
            continue
        head = line.split(":", 1)[0].strip()
        if head == error_type or head.endswith("." + error_type):
            return head if "." in head else f"builtins.{head}"
    return f"builtins.{error_type}" if _builtin_exception(error_type) else None


def _builtin_exception(name: str) -> bool:
    found = getattr(builtins, name, None)
    return inspect.isclass(found) and issubclass(found, BaseException)


def _errors(record: Record, error: BaseException | None = None) -> list[TaskError]:
    """The TaskError of a failed (or retrying) record; [] otherwise."""
    if record.state in (states.SUCCEEDED, states.QUEUED, states.SCHEDULED, states.RUNNING):
        return []
    if record.state == states.CANCELLED:
        return [TaskError(exception_class_path=_path(TaskCancelled),
                          traceback=f"{_path(TaskCancelled)}: cancelled")]
    if record.state == states.EXPIRED:
        return [TaskError(exception_class_path=_path(TaskExpired),
                          traceback=f"{_path(TaskExpired)}: {record.error_message or ''}")]
    path = _path(type(error)) if error is not None else _exception_path(record.error_type,
                                                                       record.traceback)
    if path is None:
        path = _path(TaskFailed)
        text = record.traceback or f"{path}: {record.error_type or ''} " \
                                   f"{record.error_message or record.reason or record.state}"
    else:
        text = record.traceback or f"{path}: {record.error_message or ''}"
    return [TaskError(exception_class_path=path, traceback=text)]


# -- the worker side ----------------------------------------------------------------------


def _runner(task: Task, backend: type, options: dict[str, Any]) -> Callable[..., Any]:
    """What the worker calls for ``task``: its function (given a TaskContext when it takes
    one), its return value checked as Django does (JSON-compatible)."""
    func = task.func
    takes_context = task.takes_context
    if inspect.iscoroutinefunction(func):
        async def run(*args: Any, **kwargs: Any) -> Any:
            if takes_context:
                return normalize_json(await func(_context(task), *args, **kwargs))
            return normalize_json(await func(*args, **kwargs))
    else:
        def run(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            if takes_context:
                return normalize_json(func(_context(task), *args, **kwargs))
            return normalize_json(func(*args, **kwargs))
    functools.update_wrapper(run, func)
    if takes_context:  # what a caller passes: the function's parameters after `context`
        signature = inspect.signature(func)
        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=list(signature.parameters.values())[1:])
    setattr(run, TASK_ATTR, (task, backend, options))
    return run


def _context(task: Task) -> TaskContext:
    now = dt.datetime.now(tz=dt.UTC)
    running = current_task()
    attempt = running.attempt if running is not None else 1
    result = TaskResult(task=task, id=running.id if running is not None else "",
                        status=TaskResultStatus.RUNNING, enqueued_at=None, started_at=now,
                        finished_at=None, last_attempted_at=now, args=[], kwargs={},
                        backend=task.backend, errors=[],
                        worker_ids=_worker_ids(attempt,
                                               running.worker if running is not None else ""))
    return TaskContext(task_result=result)


def _bound(spec: TaskSpec) -> tuple[Task, type]:
    task, backend, _options = getattr(spec.func, TASK_ATTR)
    return task, backend


#: The calls read for the task_started of a message, kept for its task_finished: one
#: read per message, not two. Bounded: a message that ends elsewhere (a lost lease) is
#: forgotten once this many others started.
_KEPT_CALLS_MAX = 10_000
_kept_calls: OrderedDict[str, Call | None] = OrderedDict()
_kept_lock = threading.Lock()


def _call_of(message: Any, *, finished: bool) -> Call | None:
    """The django.tasks call of ``message`` for a signal (None if it cannot be had)."""
    if message is None:
        return None
    with _kept_lock:
        if message.id in _kept_calls:
            return _kept_calls.pop(message.id) if finished else _kept_calls[message.id]
    try:
        call = backend_calls.read(get_client().broker, message.queue, message.id)
    except Exception:  # noqa: BLE001 - the signal goes out all the same, from the message
        log.warning("the django.tasks call of message %s could not be read", message.id,
                    exc_info=True)
        return None
    if not finished:
        with _kept_lock:
            _kept_calls[message.id] = call
            while len(_kept_calls) > _KEPT_CALLS_MAX:
                _kept_calls.popitem(last=False)
    return call


def _signal_result(task: Task, message: Any, status: Any, started_ms: int | None,
                   worker: str, attempt: int, *, finished: bool) -> TaskResult:
    call = _call_of(message, finished=finished)
    task = _as_enqueued(task, call)
    if call is not None:
        args, kwargs = call.args, call.kwargs
    else:
        args = list(message.args) if message is not None else []
        kwargs = dict(message.kwargs) if message is not None else {}
    return TaskResult(task=task, id=message.id if message is not None else "",
                      status=status, enqueued_at=_when(message.created_ms if message else None),
                      started_at=_when(started_ms), finished_at=None,
                      last_attempted_at=_when(started_ms), args=args, kwargs=kwargs,
                      backend=call.alias if call is not None else task.backend, errors=[],
                      worker_ids=_worker_ids(attempt, worker))


def send_started(spec: TaskSpec, event: Started) -> None:
    """django.tasks ``task_started`` of an attempt (called by the worker's listener)."""
    task, backend = _bound(spec)
    result = _signal_result(task, event.message, TaskResultStatus.RUNNING, event.started_ms,
                            event.worker, event.message.attempt, finished=False)
    task_started.send_robust(backend, task_result=result)


def send_finished(spec: TaskSpec, event: Settled) -> None:
    """django.tasks ``task_finished`` of a final settlement (called by the listener)."""
    task, backend = _bound(spec)
    status = _STATUS[event.state]
    record = event.failure or Record(id=event.message_id, task=event.task, queue=event.queue,
                                     state=event.state, attempt=event.attempt,
                                     error_type=getattr(event.letter, "error_type", None),
                                     error_message=getattr(event.letter, "error_message", None),
                                     reason=getattr(event.letter, "reason", None))
    ran = event.duration_ms is not None or event.failure is not None
    finished = event.failure.finished_ms if event.failure is not None else now_ms()
    if event.failure is not None:
        started = record.started_ms
    else:  # how long it ran, back from now: close enough for a signal
        started = finished - event.duration_ms if event.duration_ms is not None else None
    result = _signal_result(task, event.message, status, started, event.worker,
                            event.attempt if ran else event.attempt - 1, finished=True)
    object.__setattr__(result, "finished_at", _when(finished))
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", event.result)
        task_finished.send_robust(backend, task_result=result)
        return
    record = replace(record, state=event.state)
    result.errors.extend(_errors(record, event.error))
    _send_failed(backend, result, event.error or _failure(record))


def _failure(record: Record) -> BaseException:
    """The exception of a failure that raised none in this worker (cancelled, expired,
    dead-lettered without running, a result that could not be stored)."""
    error = {states.CANCELLED: TaskCancelled, states.EXPIRED: TaskExpired}.get(
        record.state, TaskFailed)(record)
    if record.traceback:
        error.add_note(record.traceback.rstrip())
    return error


def _send_failed(backend: type, result: TaskResult, error: BaseException) -> None:
    """``task_finished`` of a failure, sent while ``error`` is being handled, as Django's
    own backends send it: receivers read it from ``sys.exc_info()`` (Django's
    ``log_task_finished`` logs it with its traceback on the "django.tasks" logger, the
    backport's with ``logger.exception`` on "django_tasks")."""
    traceback = error.__traceback__
    try:
        raise error
    except BaseException:  # noqa: BLE001 - raised to be handled here, for the receivers
        task_finished.send_robust(backend, task_result=result)
    finally:
        # Raising it here added this frame to its traceback: the task's frames only.
        error.__traceback__ = traceback


# -- the worker's listener -------------------------------------------------------------

#: Record states after which a django.tasks task_finished is sent.
_FINISHED = frozenset({states.SUCCEEDED, states.FAILED, states.DEAD_LETTERED,
                       states.CANCELLED, states.EXPIRED})


def _django_task(spec: TaskSpec | None) -> bool:
    return spec is not None and hasattr(spec.func, TASK_ATTR)


class DjangoTasksListener(Listener):
    """The worker listener that sends the ``django.tasks`` signals (``task_started``,
    ``task_finished``) of the tasks this backend runs; runworker adds it beside the
    BlitzQ signals' listener (signals.py) when settings.TASKS names the backend. It runs
    on the worker's thread pool (engine/worker/listeners.py)."""

    def __init__(self) -> None:
        self._registry = registry

    def started(self, event: Started) -> None:
        spec = self._registry.find(event.message.task)
        if not _django_task(spec):
            return
        close_old_connections_if_opened()
        try:
            send_started(spec, event)  # type: ignore[arg-type]
        finally:
            close_old_connections_if_opened()

    def settled(self, event: Settled) -> None:
        if event.state not in _FINISHED:
            return
        spec = self._registry.find(event.task) if event.task else None
        if not _django_task(spec):
            return
        close_old_connections_if_opened()
        try:
            send_finished(spec, event)  # type: ignore[arg-type]
        finally:
            close_old_connections_if_opened()


# -- finding a task by name (registry.DjangoRegistry) -------------------------------------


def _without_context(spec: TaskSpec) -> TaskSpec:
    """A task registered by this backend (a runner wrapping its function, marked
    TASK_ATTR) that ``takes_context``: its runner passes the context first, so enqueue
    binds the arguments to the function's other parameters."""
    bound = getattr(spec.func, TASK_ATTR, None)
    if bound is None or spec.signature is not None or not bound[0].takes_context:
        return spec
    try:
        signature = inspect.signature(bound[0].func)
    except (TypeError, ValueError):
        return spec
    return replace(spec, signature=signature.replace(
        parameters=list(signature.parameters.values())[1:]))


def import_task(name: str) -> TaskSpec | None:
    """Import the module of task ``name`` (a django.tasks module path) when it belongs to
    an installed app; its tasks register as Django validates them. None if not found."""
    module_name, _, attr = name.rpartition(".")
    if not (module_name and attr.isidentifier()):
        return None
    if not any(module_name == app.name or module_name.startswith(app.name + ".")
               for app in apps.get_app_configs()):
        return None
    try:
        importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a module that fails to import: an unknown task
        log.warning("task %r: importing %r failed: %r", name, module_name, exc)
        return None
    return TaskRegistry.find(registry, name)


__all__ = ["BlitzQBackend", "DjangoTasksListener", "import_task", "priority_lane"]
