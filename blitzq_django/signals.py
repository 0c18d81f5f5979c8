"""Django signals of a task's life.

::

    from django.dispatch import receiver
    from blitzq_django import task_failed

    @receiver(task_failed, sender=charge_card)     # or without sender: every task
    def alert(sender, task_name, message_id, exception, **kwargs): ...

``sender`` is the task object (the ``@blitzq_task`` one, or the ``django.tasks`` Task
run by the BlitzQ backend). Every signal has the keyword arguments ``task_name``,
``message_id``, ``queue``, ``task_args`` and ``task_kwargs``; the worker's also
``attempt`` (1-based) and ``worker`` (its name).

- ``task_enqueued`` (the enqueuing process, once per message; ``handle``): after
  ``enqueue``, ``aenqueue`` (sent with ``asend_robust``), ``enqueue_many`` and
  ``aenqueue_many``. Nothing is sent, and nothing is paid, while it has no receiver.
- ``task_started`` (worker): an attempt begins.
- ``task_succeeded`` (worker; ``result``, ``duration`` in seconds).
- ``task_retried`` (worker; ``exception``, ``error_type``, ``error_message``,
  ``traceback``, ``retry_at``: an aware datetime): an attempt failed, another is due.
- ``task_failed`` (worker; ``exception``, ``error_type``, ``error_message``,
  ``traceback``, ``dead_lettered``, ``duration``): the last attempt failed, no retry
  follows, whether the message is then recorded failed (``dead_letter=False``) or
  dead-lettered (``dead_lettered=True``, and ``task_dead_lettered`` follows).
- ``task_dead_lettered`` (worker; ``reason``, ``exception``, ``error_type``,
  ``error_message``): the message went to the dead letters, after its last attempt
  failed (reason "retries exhausted" or "not retryable") or without running ("unknown
  task", "max deliveries exceeded", "malformed message"; ``sender`` is then None when
  the task is not known).
- ``task_cancelled`` (worker; ``interrupted``: it was running): ``cancel()`` reached it.

Workflows (chains, groups, chords: docs/workflows.md) have two, sent with ``sender=None``
and the keyword arguments ``workflow_id``, ``kind`` (the root's: chain, group, chord,
task), ``queue`` (the queue of its first step, where its events go), ``state``,
``started_at`` (an aware datetime):

- ``workflow_started``: a workflow was enqueued;
- ``workflow_finished`` (also ``finished_at``, ``duration`` in seconds, and
  ``error_type``: the failed step's, or ""): it ended ``succeeded``, ``failed`` or
  ``cancelled``, whoever ended it (the worker whose step completed it, or a cancel).

They are sent by the task history's writer (``runworker``'s companion, or
``runhistory``) once it has written the workflow's event to the database: once per
workflow each (the events are written at least once; a repeat sends nothing), with
``HISTORY`` on ("all"; with "failures", failed workflows only: both signals once the
failure is read). A receiver that raises is logged and changes nothing.

``exception`` is the exception object the attempt raised (None when the failure was
not an exception of the task: its result could not be stored, say).

Where worker receivers run: on the worker's thread pool (never on its event loop),
after the transition is written to Redis, one transition at a time in the order they
happened (``task_started`` before its outcome's signal): a slow receiver delays the
signals behind it, never the tasks. Database connections are closed around them as
around ``def`` tasks. A receiver that raises is logged (``send_robust``) and changes nothing
for the message. ``runworker`` listens only when one of these signals has a receiver
when it starts: connect
receivers in ``AppConfig.ready()`` or in a module it imports.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from django.dispatch import Signal

from .db_connections import close_old_connections_if_opened
from .engine import TaskHandle, TaskSpec
from .engine.worker.listeners import Listener, Settled, Started
from .registry import registry

task_enqueued = Signal()
"""Sent by the enqueuing process after each message is enqueued (``enqueue``,
``aenqueue``, ``enqueue_many``, ``aenqueue_many``). Extra keyword: ``handle``."""
task_started = Signal()
"""Sent by the worker when an attempt begins."""
task_succeeded = Signal()
"""Sent by the worker when the task returned. Extra keywords: ``result``, ``duration``
(seconds)."""
task_failed = Signal()
"""Sent by the worker when the last attempt raised and no retry follows. Extra
keywords: ``exception``, ``error_type``, ``error_message``, ``traceback``,
``dead_lettered``, ``duration``."""
task_retried = Signal()
"""Sent by the worker when an attempt raised and another is due. Extra keywords:
``exception``, ``error_type``, ``error_message``, ``traceback``, ``retry_at`` (an
aware datetime), ``duration``."""
task_dead_lettered = Signal()
"""Sent by the worker when the message went to the dead letters. Extra keywords:
``reason``, ``exception``, ``error_type``, ``error_message``."""
task_cancelled = Signal()
"""Sent by the worker when ``cancel()`` reached the message. Extra keyword:
``interrupted`` (it was running)."""
workflow_started = Signal()
"""Sent by the history writer, once per workflow, when it wrote that the workflow was
enqueued. Keywords: ``workflow_id``, ``kind``, ``queue``, ``state``, ``started_at``."""
workflow_finished = Signal()
"""Sent by the history writer, once per workflow, when it wrote that the workflow ended
(``succeeded``, ``failed``, ``cancelled``). Keywords: those of ``workflow_started``, and
``finished_at``, ``duration`` (seconds), ``error_type``."""

#: The signals sent by the worker.
WORKER_SIGNALS = (task_started, task_succeeded, task_failed, task_retried,
                  task_dead_lettered, task_cancelled)

#: task name -> (its spec, the object its module binds the task to)
_senders: dict[str, tuple[TaskSpec, Any]] = {}


def sender_of(spec: TaskSpec | None) -> Any:
    """The task object of ``spec``: what its module binds at the function's name (the
    ``@blitzq_task`` task, or the ``django.tasks`` Task); else the spec itself."""
    if spec is None:
        return None
    cached = _senders.get(spec.name)
    if cached is not None and cached[0] is spec:
        return cached[1]
    func = spec.func
    raw = getattr(func, "__wrapped__", func)
    module = sys.modules.get(getattr(func, "__module__", "") or "")
    found = getattr(module, getattr(func, "__qualname__", ""), None) if module else None
    sender = found if (getattr(found, "spec", None) is spec
                       or getattr(found, "func", None) is raw) else spec
    _senders[spec.name] = (spec, sender)
    return sender


# -- the enqueuing process ------------------------------------------------------------


def _enqueued_kwargs(spec: TaskSpec, handle: TaskHandle, args: Sequence[Any],
                     kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"task_name": spec.name, "message_id": handle.id, "queue": handle.queue,
            "task_args": tuple(args), "task_kwargs": dict(kwargs), "handle": handle}


def send_enqueued(spec: TaskSpec, handles: Iterable[TaskHandle],
                  calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> None:
    """Send ``task_enqueued`` for each message (callers check ``task_enqueued.receivers``
    first, so that nothing is built while there is no receiver)."""
    sender = sender_of(spec)
    for handle, (args, kwargs) in zip(handles, calls, strict=True):
        _robust(task_enqueued, sender, _enqueued_kwargs(spec, handle, args, kwargs))


async def asend_enqueued(spec: TaskSpec, handles: Iterable[TaskHandle],
                         calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> None:
    sender = sender_of(spec)
    for handle, (args, kwargs) in zip(handles, calls, strict=True):
        await task_enqueued.asend_robust(sender, **_enqueued_kwargs(spec, handle, args, kwargs))


def _robust(signal: Signal, sender: Any, kwargs: dict[str, Any]) -> None:
    # A receiver that raises is logged by Django (logger "django.dispatch", with its
    # traceback) and skipped; the others are still called.
    signal.send_robust(sender, **kwargs)


# -- the worker -------------------------------------------------------------------------


def _when(ms: int | None) -> dt.datetime | None:
    return None if not ms else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


class SignalListener(Listener):
    """The worker listener that sends these signals. It runs on the worker's thread pool
    (engine/worker/listeners.py). The ``django.tasks`` signals of tasks run by the BlitzQ
    backend have a listener of their own (tasks/django_tasks.py)."""

    def __init__(self) -> None:
        self._registry = registry

    def started(self, event: Started) -> None:
        if not task_started.receivers:
            return
        message = event.message
        spec = self._registry.find(message.task)
        close_old_connections_if_opened()
        try:
            _robust(task_started, sender_of(spec), {
                "task_name": message.task, "message_id": message.id,
                "queue": message.queue, "attempt": message.attempt,
                "worker": event.worker, "task_args": tuple(message.args),
                "task_kwargs": dict(message.kwargs)})
        finally:
            close_old_connections_if_opened()

    def settled(self, event: Settled) -> None:
        signals = _SIGNALS_OF.get(event.state, ())
        if not any(s.receivers for s in signals):
            return
        spec = self._registry.find(event.task) if event.task else None
        close_old_connections_if_opened()
        try:
            self._send(event, spec, signals)
        finally:
            close_old_connections_if_opened()

    @staticmethod
    def _send(event: Settled, spec: TaskSpec | None, signals: tuple[Signal, ...]) -> None:
        message = event.message
        base = {"task_name": event.task, "message_id": event.message_id,
                "queue": event.queue, "attempt": event.attempt, "worker": event.worker,
                "task_args": tuple(message.args) if message is not None else (),
                "task_kwargs": dict(message.kwargs) if message is not None else {}}
        failure, letter = event.failure, event.letter
        error = {"exception": event.error,
                 "error_type": failure.error_type if failure is not None else (
                     letter.error_type if letter is not None else None),
                 "error_message": failure.error_message if failure is not None else (
                     letter.error_message if letter is not None else None),
                 "traceback": failure.traceback if failure is not None else None}
        sender = sender_of(spec)
        state = event.state
        for signal in signals:
            if not signal.receivers:
                continue
            if signal is task_succeeded:
                extra = {"result": event.result, "duration": _seconds(event.duration_ms)}
            elif signal is task_retried:
                extra = {**error, "retry_at": _when(event.due_ms),
                         "duration": _seconds(event.duration_ms)}
            elif signal is task_failed:
                if failure is None:  # dead-lettered without running: no attempt failed
                    continue
                extra = {**error, "dead_lettered": state == "dead_lettered",
                         "duration": _seconds(event.duration_ms)}
            elif signal is task_dead_lettered:
                extra = {**error, "reason": letter.reason if letter is not None else None}
            else:  # task_cancelled
                extra = {"interrupted": event.duration_ms is not None}
            _robust(signal, sender, {**base, **extra})


#: record state -> the signals it sends (task_failed for a dead letter only after an
#: attempt failed: see SignalListener.settled)
_SIGNALS_OF: dict[str, tuple[Signal, ...]] = {
    "succeeded": (task_succeeded,),
    "failed": (task_failed,),
    "retrying": (task_retried,),
    "dead_lettered": (task_failed, task_dead_lettered),
    "cancelled": (task_cancelled,),
}


# -- workflows (sent by the history writer: history/writer.py) ----------------------------


def send_workflow_started(*, workflow_id: str, kind: str, queue: str, state: str,
                          started_at: dt.datetime | None) -> None:
    if workflow_started.receivers:
        _robust(workflow_started, None, {"workflow_id": workflow_id, "kind": kind,
                                         "queue": queue, "state": state,
                                         "started_at": started_at})


def send_workflow_finished(*, workflow_id: str, kind: str, queue: str, state: str,
                           started_at: dt.datetime | None, finished_at: dt.datetime | None,
                           error_type: str) -> None:
    if not workflow_finished.receivers:
        return
    took = ((finished_at - started_at).total_seconds()
            if started_at is not None and finished_at is not None else None)
    _robust(workflow_finished, None, {"workflow_id": workflow_id, "kind": kind,
                                      "queue": queue, "state": state,
                                      "started_at": started_at, "finished_at": finished_at,
                                      "duration": took, "error_type": error_type})


def has_receivers() -> bool:
    """Whether any worker signal has a receiver (of any sender) now."""
    return any(signal.receivers for signal in WORKER_SIGNALS)


def worker_listeners() -> list[Listener]:
    """A SignalListener when a worker signal has a receiver; else nothing (the worker
    then pays nothing per message). runworker adds the django.tasks backend's own."""
    return [SignalListener()] if has_receivers() else []


__all__ = [
    "WORKER_SIGNALS",
    "SignalListener",
    "sender_of",
    "task_cancelled",
    "task_dead_lettered",
    "task_enqueued",
    "task_failed",
    "task_retried",
    "task_started",
    "task_succeeded",
    "worker_listeners",
    "workflow_finished",
    "workflow_started",
]
