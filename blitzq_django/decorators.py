"""``@blitzq_task``: define a task in any ``tasks.py``.

::

    from blitzq_django.decorators import blitzq_task

    @blitzq_task(queue="emails", retries=3, timeout=30)
    def send_welcome(user_id: int) -> None: ...

    send_welcome.enqueue(42)                   # one Redis round trip, returns a TaskHandle
    await send_welcome.aenqueue(42)            # from async views
    send_welcome.enqueue_on_commit(42)         # only once the current transaction commits
    send_welcome.options(delay=60).enqueue(42)

The task is registered in the process-wide registry (``blitzq_django.conf.registry``)
when its module is imported; the client is looked up on each enqueue, so decorating
works at import time, before settings are read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from django.core.exceptions import ImproperlyConfigured

from . import conf
from .engine import CallOptions, Task, TaskHandle, TaskSpec
from .engine.core.task import DEFAULT_QUEUE
from .engine.errors import ConfigurationError

P = ParamSpec("P")
R = TypeVar("R")

#: Options @blitzq_task accepts (the engine's TaskSpec options).
TASK_OPTIONS = frozenset({
    "name", "queue", "retries", "initial_delay", "max_delay", "factor", "jitter", "retry_on",
    "dont_retry_on", "retry", "timeout", "store_result", "dead_letter", "on_failure",
    "on_dead_letter", "expires", "priority", "unique", "rate_limit", "rate_key",
})

#: Queues named by a task's ``queue=`` option (runworker serves them by default).
declared_queues: set[str] = set()


class BlitzqTask(Task[P, R]):
    """An engine Task whose client is settings.BLITZQ's, with Django helpers."""

    def __init__(self, spec: TaskSpec, client: Callable[[], Any] = conf.get_client,
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
        client = conf.get_client()
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
        return self.call.queue or conf.get_client().route(self.spec.name) or self.spec.queue

    def enqueue_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """Enqueue once the current transaction on the default database commits.

        Returns the handle at once (its id is assigned now). Nothing is enqueued if the
        transaction rolls back. For another database use
        ``blitzq_django.transactions.enqueue_on_commit(task, args, kwargs, using=...)``.
        """
        from .transactions import enqueue_on_commit

        return enqueue_on_commit(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<BlitzqTask {self.spec.name}>"


@overload
def blitzq_task(func: Callable[P, R], /) -> BlitzqTask[P, R]: ...
@overload
def blitzq_task(func: None = None, /, **options: Any
                ) -> Callable[[Callable[P, R]], BlitzqTask[P, R]]: ...


def blitzq_task(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Register ``func`` as a task. Bare (``@blitzq_task``) or with options:

    name (default module.qualname), queue (default BLITZQ["DEFAULT_QUEUE"]), retries,
    initial_delay, max_delay, factor, jitter, retry_on, dont_retry_on, retry (a
    RetryPolicy), timeout (seconds per attempt), store_result, dead_letter, rate_limit
    ("10/s", "100/m", "1000/h") and rate_key (a bucket of BLITZQ["RATE_LIMITS"], or a
    callable of the task's arguments naming one; see docs/rate-limits.md).
    ``async def`` tasks run on the worker's event loop; ``def`` tasks on its thread pool.
    """
    unknown = set(options) - TASK_OPTIONS
    if unknown:
        raise TypeError(f"@blitzq_task got unknown option(s) {', '.join(sorted(unknown))}; "
                        f"accepted: {', '.join(sorted(TASK_OPTIONS))}")

    def wrap(f: Callable[P, R]) -> BlitzqTask[P, R]:
        declared = options.get("queue") is not None
        spec_options = {**options, "queue": options.get("queue") or DEFAULT_QUEUE}
        where = f"@blitzq_task on {f.__module__}.{f.__qualname__}"
        try:
            spec = TaskSpec.build(f, **spec_options)
            _check_rate_bucket(spec)
            spec = conf.registry.add(spec)
        except ConfigurationError as exc:
            raise ImproperlyConfigured(f"{where}: {exc}") from exc
        if declared:
            declared_queues.add(spec.queue)
        task: BlitzqTask[P, R] = BlitzqTask(spec, conf.get_client, queue_declared=declared)
        functools.update_wrapper(task, f, updated=())
        return task

    return wrap(func) if func is not None else wrap


def _check_rate_bucket(spec: TaskSpec) -> None:
    """A rate_key naming a bucket that BLITZQ["RATE_LIMITS"] lacks fails at decoration
    (when the settings can be read then; the worker fails such messages otherwise)."""
    key = spec.rate_key
    if not isinstance(key, str) or spec.rate_limit is not None:
        return
    try:
        user = conf.user_settings()
    except ImproperlyConfigured:  # settings not configured yet (a script importing tasks)
        return
    buckets = user.get("RATE_LIMITS", {}) if isinstance(user, dict) else {}
    if isinstance(buckets, dict) and key not in buckets:
        known = ", ".join(sorted(map(repr, buckets))[:20]) or "none"
        raise ConfigurationError(f"task {spec.name!r}: rate_key {key!r} names no bucket of "
                                 f"BLITZQ['RATE_LIMITS'] (known: {known}); add it there, or "
                                 "give the task a rate_limit")


__all__ = ["BlitzqTask", "blitzq_task"]
