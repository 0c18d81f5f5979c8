"""``@blitzq_task``: define a task in any ``tasks.py``.

::

    from blitzq_django import blitzq_task

    @blitzq_task(queue="emails", retries=3, timeout=30)
    def send_welcome(user_id: int) -> None: ...

    send_welcome.enqueue(42)                   # one Redis round trip, returns a TaskHandle
    await send_welcome.aenqueue(42)            # from async views
    send_welcome.enqueue_on_commit(42)         # only once the current transaction commits
    send_welcome.options(delay=60).enqueue(42)

The task is registered in the process-wide registry (``blitzq_django.registry``)
when its module is imported; the client is looked up on each enqueue, so decorating
works at import time, before settings are read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, overload

from django.core.exceptions import ImproperlyConfigured

from ..engine import CallOptions, Task, TaskHandle, TaskSpec
from ..engine.client.task import _calls
from ..engine.core.suggest import did_you_mean
from ..engine.core.task import DEFAULT_QUEUE
from ..engine.errors import ConfigurationError
from ..registry import declare_schedule, declared_queues, duplicate_tasks, registry
from ..runtime import get_client
from ..settings import user_settings
from ..signals import asend_enqueued, send_enqueued, task_enqueued
from ..transactions.effects import wrap as effectively_once
from ..transactions.on_commit import TransactionalEnqueue, enqueue_on_commit
from .celery_calls import CeleryCalls

P = ParamSpec("P")
R = TypeVar("R")

#: Options @blitzq_task accepts (the engine's TaskSpec options).
TASK_OPTIONS = frozenset({
    "name", "queue", "retries", "initial_delay", "max_delay", "factor", "jitter", "retry_on",
    "dont_retry_on", "retry", "timeout", "store_result", "dead_letter", "on_failure",
    "on_dead_letter", "expires", "priority", "unique", "rate_limit", "rate_key",
    "effectively_once", "schedule", "executor",
})


class BlitzqTask(TransactionalEnqueue, Task[P, R], CeleryCalls[P, R]):
    """An engine Task whose client is settings.BLITZQ's, with Django helpers: the
    ``using=`` and ``durable=`` options and ``enqueue_on_commit`` (transactions/on_commit.py),
    and Celery's call style: ``delay()``, ``apply_async()``, ``handle(id)``
    (celery_calls.py)."""

    def __init__(self, spec: TaskSpec, client: Callable[[], Any] = get_client,
                 call: CallOptions | None = None, *, queue_declared: bool = True) -> None:
        super().__init__(spec, client, call)
        # Without queue=, a task goes to BLITZQ["DEFAULT_QUEUE"] as it is at enqueue time.
        self.queue_declared = queue_declared
        # (client, resolved call options): resolved once per client, and the client is
        # rebuilt when BLITZQ changes, so a settings change is seen and nothing is
        # re-read per enqueue.
        self._resolved: tuple[Any, CallOptions] | None = None

    def _with_call(self, call: CallOptions) -> BlitzqTask[P, R]:
        return BlitzqTask(self.spec, self._client, call, queue_declared=self.queue_declared)

    @property
    def call(self) -> CallOptions:
        """The per-call options of the next enqueue, with the queue resolved."""
        client = get_client()
        resolved = self._resolved
        if resolved is not None and resolved[0] is client:
            return resolved[1]
        call = self._call
        if not (self.queue_declared or call.queue or client.route(self.spec.name)):
            # Neither named nor routed (ROUTES): the default queue of these settings.
            call = call.merged(queue=client.default_queue)
        self._resolved = (client, call)
        return call

    @property
    def queue(self) -> str:
        """The queue the next enqueue goes to (see ROUTES for the precedence)."""
        return self.call.queue or get_client().route(self.spec.name) or self.spec.queue

    # task_enqueued (signals.py): sent after each message is enqueued, only while the
    # signal has a receiver.

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        handle = super().enqueue(*args, **kwargs)
        if task_enqueued.receivers:
            send_enqueued(self.spec, [handle], [(args, kwargs)])
        return handle

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        handle = await super().aenqueue(*args, **kwargs)
        if task_enqueued.receivers:
            await asend_enqueued(self.spec, [handle], [(args, kwargs)])
        return handle

    def enqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle[R]]:
        if not task_enqueued.receivers:
            return super().enqueue_many(calls)
        pairs = _calls(calls)
        handles = super().enqueue_many(pairs)
        send_enqueued(self.spec, handles, pairs)
        return handles

    async def aenqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle[R]]:
        if not task_enqueued.receivers:
            return await super().aenqueue_many(calls)
        pairs = _calls(calls)
        handles = await super().aenqueue_many(pairs)
        await asend_enqueued(self.spec, handles, pairs)
        return handles

    def enqueue_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Enqueue once the current transaction commits: on the default database, or
        ``options(using="alias")``'s. Every keyword argument goes to the task.

        Returns the handle at once (its id is assigned now; with an idempotency key
        already held, the id of the message holding it). Nothing is enqueued if the
        transaction rolls back; outside a transaction it enqueues now. With
        ``options(durable=True)`` the message goes to the outbox in the transaction.
        """
        return enqueue_on_commit(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<BlitzqTask {self.spec.name}>"


if TYPE_CHECKING:
    class AsyncBlitzqTask(BlitzqTask[P, R]):
        """The type of an ``async def`` task, for type checkers: its handles give ``R``
        (what the coroutine returns), and calling it gives the coroutine."""

        def __call__(  # type: ignore[override]
                self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]: ...


class TaskDecorator(Protocol):
    """What ``@blitzq_task(**options)`` and ``@periodic(...)`` return."""

    @overload
    def __call__(self, func: Callable[P, Coroutine[Any, Any, R]], /
                 ) -> AsyncBlitzqTask[P, R]: ...
    @overload
    def __call__(self, func: Callable[P, R], /) -> BlitzqTask[P, R]: ...


@overload
def blitzq_task(func: Callable[P, Coroutine[Any, Any, R]], /) -> AsyncBlitzqTask[P, R]: ...
@overload
def blitzq_task(func: Callable[P, R], /) -> BlitzqTask[P, R]: ...
@overload
def blitzq_task(func: None = None, /, **options: Any) -> TaskDecorator: ...


def blitzq_task(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Register ``func`` as a task: bare (``@blitzq_task``) or with options
    (``@blitzq_task(queue="emails", retries=3)``).

    ``async def`` tasks run on the worker's event loop; ``def`` tasks on its thread pool,
    or in a pool of child processes with ``executor="process"``. The options are checked
    here, at decoration: an unknown one raises TypeError naming the closest, a bad value
    ImproperlyConfigured naming the task.

    Keyword Args:
        name (str): The task's name in messages. Default: ``module.qualname`` of the
            function.
        queue (str): Its queue. Default: ``BLITZQ["DEFAULT_QUEUE"]`` at enqueue time; a
            call's ``options(queue=)`` and ``BLITZQ["ROUTES"]`` come first.
        retries (int): Retries after a failed attempt (N retries = N + 1 attempts).
            Default: ``0``.
        initial_delay (float): Seconds before the first retry. Default: ``1.0``.
        max_delay (float): The longest wait between retries, in seconds. Default:
            ``300.0``.
        factor (float): Each retry waits ``factor`` times the previous wait. Default:
            ``2.0``.
        jitter (bool): Wait a random time up to the backoff ("full jitter"), so that
            failures do not retry in lockstep. Default: ``True``.
        retry_on (type | tuple[type, ...]): Only these exceptions are retried. Default:
            ``(Exception,)``.
        dont_retry_on (type | tuple[type, ...]): These exceptions fail at once, never
            retried. Default: ``()``.
        retry (RetryPolicy): The five options above as one object (instead of them).
            Default: ``None``.
        timeout (float | None): Seconds an attempt may run; then it fails with
            TimeLimitExceeded (and may be retried). Default: ``None`` (no limit).
        store_result (bool | None): Keep the final record (result or error) for
            ``RESULT_TTL``. Default: ``None``, meaning ``BLITZQ["STORE_RESULTS"]``.
        dead_letter (bool): A final failure goes to the dead letters (replayable);
            ``False`` records it as failed only. Default: ``True``.
        on_failure (Callable[[Record], Any] | None): Called with the record of each
            failed attempt. Default: ``None``.
        on_dead_letter (Callable[[DeadLetter], Any] | None): Called with the dead letter
            of a final failure. Default: ``None``.
        expires (float | timedelta | datetime | None): A message not started by then
            (seconds from enqueue, a timedelta, or an aware datetime) is dropped as
            expired. Default: ``None``.
        priority (str | None): The lane of its messages: ``"high"``, ``"normal"`` or
            ``"low"``. Default: ``None`` (normal).
        unique (bool): While a message with the same arguments is unfinished, another
            enqueue adds nothing and returns its handle. Default: ``False``.
        rate_limit (str | None): At most this many runs across all workers: ``"10/s"``,
            ``"100/m"``, ``"1000/h"``. Default: ``None``.
        rate_key (str | Callable[..., str] | None): The bucket the rate applies to: a
            name of ``BLITZQ["RATE_LIMITS"]``, or a callable of the task's arguments
            returning one. Default: ``None`` (the task's own bucket).
        effectively_once (bool | str): The body's database writes commit at most once
            per message (``True``: the default database; or an alias). ``def`` tasks
            only. Default: ``False``.
        schedule (str | float | timedelta | dict | None): Also run the task
            periodically: a cron expression, seconds, a timedelta, or a dict of
            ``cron``/``every``, ``tz``, ``args``, ``kwargs``, ``missed``. Default: ``None``.
        executor (str): Where a ``def`` task runs: ``"thread"`` (the worker's threads) or
            ``"process"`` (child processes, for CPU-bound code; a function at the top
            level of its module). Default: ``"thread"``.

    Returns:
        The task (a BlitzqTask): call it to run the function here, or ``enqueue()``,
        ``aenqueue()``, ``enqueue_many()``, ``enqueue_on_commit()``, ``delay()``,
        ``apply_async()``, ``options(...)`` to send it to a worker.
    """
    unknown = set(options) - TASK_OPTIONS
    if unknown:
        raise TypeError(f"@blitzq_task got unknown option(s) {', '.join(sorted(unknown))}."
                        f"{did_you_mean(min(unknown), TASK_OPTIONS)} Accepted: "
                        f"{', '.join(sorted(TASK_OPTIONS))}")

    def wrap(f: Callable[P, R]) -> BlitzqTask[P, R]:
        declared = options.get("queue") is not None
        spec_options = {**options, "queue": options.get("queue") or DEFAULT_QUEUE}
        once = spec_options.pop("effectively_once", False)
        schedule = spec_options.pop("schedule", None)  # registry.code_schedules, docs/scheduling.md
        where = f"@blitzq_task on {f.__module__}.{f.__qualname__}"
        body: Callable[..., Any] = f
        if once and options.get("executor") == "process":
            raise ImproperlyConfigured(f"{where}: effectively_once runs the body in a "
                                       "transaction of the worker; it cannot be combined "
                                       "with executor='process'")
        if once:
            body = effectively_once(f, once, where)
        try:
            spec = TaskSpec.build(body, **spec_options)
            _check_rate_bucket(spec)
        except ConfigurationError as exc:
            raise ImproperlyConfigured(f"{where}: {exc}") from exc
        try:
            spec = registry.add(spec)
        except ConfigurationError:
            # Another function holds the name: check blitzq.E020 reports it (raising here
            # would stop Django loading, so `manage.py check` could not say so).
            return _refused(spec, f, where, declared)
        if declared:
            declared_queues.add(spec.queue)
        if schedule is not None:
            declare_schedule(spec.name, schedule, where=where)
        task: BlitzqTask[P, R] = BlitzqTask(spec, get_client, queue_declared=declared)
        functools.update_wrapper(task, f, updated=())
        return task

    return wrap(func) if func is not None else wrap


def _refused(spec: TaskSpec, f: Callable[..., Any], where: str,
             declared: bool) -> BlitzqTask[Any, Any]:
    """The task of a function whose name another one holds: kept out of the registry
    (a worker runs the holder), listed for check blitzq.E020, and refusing to enqueue."""
    holder = registry.get(spec.name).func
    entry = (spec.name, f"{getattr(holder, '__module__', '?')}."
             f"{getattr(holder, '__qualname__', repr(holder))}", f"{f.__module__}.{f.__qualname__}")
    if entry not in duplicate_tasks:
        duplicate_tasks.append(entry)
    message = (f"{where}: task name {spec.name!r} is already registered by {entry[1]} "
               "(blitzq.E020); give one of them another name=")

    def refuse() -> Any:
        raise ImproperlyConfigured(message)

    task: BlitzqTask[Any, Any] = BlitzqTask(spec, refuse, queue_declared=declared)
    functools.update_wrapper(task, f, updated=())
    return task


def _check_rate_bucket(spec: TaskSpec) -> None:
    """A rate_key naming a bucket that BLITZQ["RATE_LIMITS"] lacks fails at decoration
    (when the settings can be read then; the worker fails such messages otherwise)."""
    key = spec.rate_key
    if not isinstance(key, str) or spec.rate_limit is not None:
        return
    try:
        user = user_settings()
    except ImproperlyConfigured:  # settings not configured yet (a script importing tasks)
        return
    buckets = user.get("RATE_LIMITS", {}) if isinstance(user, dict) else {}
    if isinstance(buckets, dict) and key not in buckets:
        known = ", ".join(sorted(map(repr, buckets))[:20]) or "none"
        raise ConfigurationError(f"task {spec.name!r}: rate_key {key!r} names no bucket of "
                                 f"BLITZQ['RATE_LIMITS'] (known: {known}); add it there, or "
                                 "give the task a rate_limit")


__all__ = ["BlitzqTask", "blitzq_task"]
