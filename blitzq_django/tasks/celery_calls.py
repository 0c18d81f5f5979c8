"""Celery's call style on a task: ``delay()``, ``apply_async()`` and ``handle(id)``.

Thin aliases over ``enqueue`` and ``options()``, so that moving from Celery can be a
search and replace (docs/migrating/celery.md). Each Celery keyword maps to one call
option; a keyword with no equivalent raises a TypeError that says what to use instead,
never silently ignored: a migrated call that meant something must keep meaning it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from ..engine import CallOptions
from ..engine.core.suggest import did_you_mean
from ..transactions.on_commit import DB_OPTION_NAMES

if TYPE_CHECKING:
    from ..engine import TaskHandle

P = ParamSpec("P")
R = TypeVar("R")

#: Celery's apply_async keyword -> the call option of ``task.options()`` it sets.
RENAMED = {
    "countdown": "delay",
    "time_limit": "timeout",
}

#: Celery's keywords that keep their name here (same meaning, same values, except
#: ``priority``: see _priority).
SAME = ("eta", "expires", "queue", "priority", "task_id", "headers")

#: Celery keywords with no equivalent -> what to use instead.
NO_EQUIVALENT = {
    "soft_time_limit": "timeout= is a hard limit per attempt (TimeLimitExceeded); there is "
                       "no soft limit",
    "ignore_result": "store_result=False on @blitzq_task",
    "link": "a chain of tasks (docs/workflows.md), or on_failure=/on_dead_letter= hooks",
    "link_error": "on_failure= or on_dead_letter= on @blitzq_task",
    "routing_key": "queue= (or BLITZQ['ROUTES'])",
    "exchange": "queue= (or BLITZQ['ROUTES'])",
    "serializer": "nothing: messages are always msgpack",
    "compression": "nothing: messages are always msgpack, uncompressed",
    "retry": "nothing: an enqueue is one Redis call; redis-py's retries apply",
    "retry_policy": "nothing: an enqueue is one Redis call; redis-py's retries apply",
    "shadow": "name= on @blitzq_task",
    "producer": "nothing: the client is settings.BLITZQ's",
    "connection": "nothing: the client is settings.BLITZQ's",
    "publisher": "nothing: the client is settings.BLITZQ's",
    "add_to_parent": "nothing: there are no parent/child results",
    "chain": "a chain of tasks (docs/workflows.md)",
    "group_id": "a group of tasks (docs/workflows.md)",
    "reply_to": "nothing: results are records, read with handle.result()",
    "mandatory": "nothing",
    "immediate": "nothing",
    "delivery_mode": "nothing: durability is Redis persistence (docs/delivery-guarantees.md)",
    "ignore_result_on_failure": "store_result=False on @blitzq_task",
}


#: Every keyword apply_async takes besides args and kwargs.
ACCEPTED = frozenset({*RENAMED, *SAME, *CallOptions.__dataclass_fields__, *DB_OPTION_NAMES})


def celery_options(task_name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The ``task.options()`` keywords of Celery's apply_async ``options``; a TypeError
    for a keyword with no equivalent (saying what to use) or an unknown one."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # call option -> the keyword that set it
    for key, value in options.items():
        if key in NO_EQUIVALENT:
            raise TypeError(f"{task_name}.apply_async(): {key}= has no equivalent in blitzq; "
                            f"use {NO_EQUIVALENT[key]} (docs/migrating/celery.md)")
        if key not in ACCEPTED:
            raise TypeError(f"{task_name}.apply_async() got an unexpected keyword {key}=."
                            f"{did_you_mean(key, ACCEPTED)} Accepted: "
                            f"{', '.join(sorted(ACCEPTED))}")
        name = RENAMED.get(key, key)
        if name in out:
            raise TypeError(f"{task_name}.apply_async(): {given[name]}= and {key}= are the "
                            "same option; pass one")
        given[name] = key
        out[name] = _priority(task_name, value) if key == "priority" else value
    return out


def _priority(task_name: str, value: Any) -> Any:
    """Celery's numeric priorities mean opposite things on Redis (0 first) and RabbitMQ
    (9 first): a number is refused rather than guessed."""
    if isinstance(value, int) and not isinstance(value, bool):
        raise TypeError(f"{task_name}.apply_async(): priority={value!r}: blitzq has three "
                        "lanes, priority='high', 'normal' or 'low' (Celery's numbers mean "
                        "opposite orders on Redis and RabbitMQ; choose the lane)")
    return value


def arguments(task_name: str, args: Any, kwargs: Any) -> tuple[Sequence[Any], dict[str, Any]]:
    """Celery's ``args`` (a list or tuple) and ``kwargs`` (a dict), checked."""
    if args is None:
        args = ()
    if kwargs is None:
        kwargs = {}
    if not isinstance(args, list | tuple):
        raise TypeError(f"{task_name}.apply_async(): args must be a list or tuple, got "
                        f"{type(args).__name__} (did you mean args=({args!r},)?)")
    if not isinstance(kwargs, dict):
        raise TypeError(f"{task_name}.apply_async(): kwargs must be a dict, got "
                        f"{type(kwargs).__name__}")
    return args, kwargs


class CeleryCalls(Generic[P, R]):
    """``delay()``, ``apply_async()`` and ``handle(id)`` on a task (BlitzqTask)."""

    if TYPE_CHECKING:  # provided by BlitzqTask, before this class in its bases
        _client: Callable[[], Any]

        @property
        def name(self) -> str: ...
        @property
        def queue(self) -> str: ...
        def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]: ...
        def options(self, **changes: Any) -> Any: ...

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Celery's ``delay()``: the same as ``enqueue(*args, **kwargs)`` (it enqueues
        now; for a delay, ``options(delay=seconds)`` or ``apply_async(countdown=)``)."""
        return self.enqueue(*args, **kwargs)

    def apply_async(self, args: Sequence[Any] | None = None,
                    kwargs: dict[str, Any] | None = None, **options: Any) -> TaskHandle[R]:
        """Celery's ``apply_async()``: ``options(**options).enqueue(*args, **kwargs)``.

        Celery's keywords map to call options: ``countdown`` -> ``delay`` (seconds),
        ``eta`` (an aware datetime), ``expires`` (seconds, a timedelta or an aware
        datetime), ``queue``, ``priority`` (``"high"``, ``"normal"`` or ``"low"``; a
        number raises TypeError), ``task_id``, ``headers``, ``time_limit`` ->
        ``timeout``. Every option of ``task.options()`` is accepted too
        (``idempotency_key``, ``unique``, ``retries``, ``using``, ``durable`` ...).
        A Celery keyword without an equivalent (``link``, ``soft_time_limit``,
        ``ignore_result``, ``routing_key``, ``serializer`` ...) raises TypeError naming
        what to use instead.
        """
        args, kwargs = arguments(self.name, args, kwargs)
        changes = celery_options(self.name, options)
        task = self.options(**changes) if changes else self
        return task.enqueue(*args, **kwargs)  # type: ignore[no-any-return]

    def handle(self, message_id: str) -> TaskHandle[R]:
        """The handle of message ``message_id`` of this task, as ``enqueue`` returned it
        (Celery's ``task.AsyncResult(id)``): on the queue this task's enqueues go to now
        (``options(queue=)``, ``BLITZQ["ROUTES"]``, the decorator's ``queue=``, the
        default queue). Reading from it reaches Redis; building it does not."""
        return self._client().handle(message_id, queue=self.queue)  # type: ignore[no-any-return]


__all__ = ["ACCEPTED", "NO_EQUIVALENT", "RENAMED", "CeleryCalls", "celery_options"]
