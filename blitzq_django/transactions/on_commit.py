"""Enqueue after the surrounding transaction commits, or through the transactional outbox.

``task.enqueue_on_commit(*args, **kwargs)`` assigns the message id now, returns the
handle at once and enqueues only once the transaction commits; after a rollback
nothing is enqueued. Outside a transaction it enqueues at once (errors raise).

The database is chosen with ``task.options(using="alias")`` (default: the default
database), never with a keyword of ``enqueue_on_commit`` itself, so that every
keyword argument goes to the task. ``task.options(durable=True)`` (or
``durable="name"``: a named outbox) writes the message to the outbox table in the
caller's transaction instead; the relay (``outbox.py``) publishes it.

Windows (docs/django.md):

- Redis down (or any error) when the commit-time enqueue runs: the message is
  written to the outbox in a new transaction (and a WARNING logged), so the relay
  publishes it later; if even that write fails, an ERROR names the task id.
- The process dies between the commit and the enqueue: the message is lost, unless
  it was ``durable``, whose row committed with the caller's data.
- A held idempotency key: the handle's id is the message holding the key, looked up
  at the call (best effort) and corrected by the commit-time enqueue's answer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, TypeVar

from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from ..engine import TaskHandle
from ..engine.brokers.base import Enqueue
from ..engine.client.task import _calls
from ..engine.core.names import name_ok
from ..engine.errors import ConfigurationError
from ..signals import send_enqueued, task_enqueued
from .outbox import held_id, save_items, write

if TYPE_CHECKING:
    from ..tasks.decorators import BlitzqTask

R = TypeVar("R")

log = logging.getLogger("blitzq")

#: The Django-side options ``task.options()`` accepts besides the engine's.
DB_OPTION_NAMES = ("using", "durable")


@dataclass(frozen=True, slots=True)
class DbOptions:
    """``using``: the database alias of enqueue_on_commit and of outbox rows (None: the
    default one). ``durable``: False, True (the "default" outbox) or an outbox name."""

    using: str | None = None
    durable: bool | str = False

    @property
    def outbox(self) -> str | None:
        if self.durable is True:
            return "default"
        return self.durable or None


NO_DB_OPTIONS = DbOptions()


def split_options(db: DbOptions, changes: dict[str, Any], name: str) -> DbOptions:
    """Take ``using`` and ``durable`` out of ``changes`` (in place): the new DbOptions."""
    picked = {k: changes.pop(k) for k in DB_OPTION_NAMES if k in changes}
    if not picked:
        return db
    using = picked.get("using", db.using)
    if using is not None and (not isinstance(using, str) or not using):
        raise ConfigurationError(f"{name}.options(): using must be a database alias, "
                                 f"got {using!r:.60}")
    durable = picked.get("durable", db.durable)
    if not (isinstance(durable, bool) or (isinstance(durable, str) and name_ok(durable))):
        raise ConfigurationError(f"{name}.options(): durable must be True, False or an "
                                 f"outbox name (letters, digits, '-', '_', '.'), got "
                                 f"{durable!r:.60}")
    return DbOptions(using, durable)


class TransactionalEnqueue:
    """What BlitzqTask adds to the engine's Task: ``using=`` and ``durable=`` options,
    and durable enqueues through the outbox (BlitzqTask adds ``enqueue_on_commit``)."""

    db: DbOptions = NO_DB_OPTIONS

    def options(self, **changes: Any) -> Self:
        """A copy whose enqueues use these per-call options: the engine's (queue,
        task_id, delay, eta, priority, idempotency_key ...) and ``using`` (database
        alias) and ``durable`` (True or an outbox name)."""
        db = split_options(self.db, changes, self.spec.name)  # type: ignore[attr-defined]
        task = super().options(**changes)  # type: ignore[misc]
        task.db = db
        return task

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        if self.db.durable:
            return write(self, [(args, kwargs)])[0]  # type: ignore[arg-type]
        return super().enqueue(*args, **kwargs)  # type: ignore[misc, no-any-return]

    async def aenqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        if self.db.durable:
            handles = await sync_to_async(write)(self, [(args, kwargs)])  # type: ignore[arg-type]
            return handles[0]
        return await super().aenqueue(*args, **kwargs)  # type: ignore[misc, no-any-return]

    def enqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle]:
        if self.db.durable:
            return write(self, _calls(calls))  # type: ignore[arg-type]
        return super().enqueue_many(calls)  # type: ignore[misc, no-any-return]

    async def aenqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle]:
        if self.db.durable:
            return await sync_to_async(self.enqueue_many)(calls)
        return await super().aenqueue_many(calls)  # type: ignore[misc, no-any-return]


def enqueue_on_commit(task: BlitzqTask[..., R], args: Sequence[Any] = (),
                      kwargs: dict[str, Any] | None = None, *,
                      using: str | None = None) -> TaskHandle[R]:
    """Enqueue ``task(*args, **kwargs)`` once the transaction on ``using`` commits.

    The handle's id is the pre-assigned message id; with an idempotency key already
    held, the id of the message holding it (the one that runs). Outside a transaction
    (autocommit) it enqueues at once, and enqueue errors are raised to the caller as
    usual. Inside one, errors after the commit never raise (the data is committed and
    the caller's response should not fail): the message goes to the outbox.
    """
    kwargs = dict(kwargs or {})
    db = getattr(task, "db", NO_DB_OPTIONS)
    using = using or db.using or DEFAULT_DB_ALIAS
    if db.durable:
        return write(task, [(args, kwargs)], using=using)[0]
    if not connections[using].in_atomic_block:
        return task.enqueue(*args, **kwargs)
    client = task._client()  # resolved now: a settings error shows at the call site
    # Encode now, so an argument msgpack cannot carry fails here, not after the commit.
    item = client.build(task.spec, args, kwargs, task.call)
    handle: TaskHandle[R] = TaskHandle(item.message_id, item.queue, client)
    if item.idempotency_key is not None:
        held = held_id(client, item.queue, item.idempotency_key)
        if held is not None:
            handle.id = held

    def send() -> None:
        try:
            (message_id,) = client.broker.enqueue([item])
        except Exception as exc:  # noqa: BLE001 - never lost silently: kept in the outbox
            keep_in_outbox(item, exc, using)
            return
        if message_id != handle.id:
            handle.id = message_id  # the key is held by that message: it is the one that runs
        if task_enqueued.receivers:
            send_enqueued(task.spec, [handle], [(args, kwargs)])

    transaction.on_commit(send, using=using, robust=True)
    return handle


def keep_in_outbox(item: Enqueue, error: BaseException, using: str) -> None:
    """The commit-time enqueue of ``item`` failed: write it to the outbox in a new
    transaction (the relay publishes it), or log an ERROR naming it if that fails too."""
    try:
        save_items([item], using=using, outbox="default", error=f"{type(error).__name__}: "
                   f"{error}")
    except Exception:
        log.exception("enqueue after commit failed (%s: %s) and so did writing it to the "
                      "outbox: task %s message %s on queue %r is lost", type(error).__name__,
                      error, item.task, item.message_id, item.queue)
        return
    log.warning("enqueue after commit failed (%s: %s): task %s message %s on queue %r is "
                "kept in the outbox; the relay publishes it", type(error).__name__, error,
                item.task, item.message_id, item.queue)


__all__ = ["DbOptions", "TransactionalEnqueue", "enqueue_on_commit"]
