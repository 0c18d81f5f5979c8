"""Enqueue after the surrounding transaction commits (``transaction.on_commit``).

A task enqueued inside ``transaction.atomic()`` may otherwise run before the rows it
reads are committed, or after they were rolled back. ``enqueue_on_commit`` assigns
the message id now, returns the handle at once, and enqueues only on commit; after
a rollback nothing is enqueued.

Window (documented in docs/): the process can die between the commit and the
enqueue, or Redis can be down at that moment; the message is then lost and the
failure is logged on the ``blitzq`` logger with the task id. The transactional
outbox (a later issue) closes that window.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from .engine import TaskHandle

if TYPE_CHECKING:
    from .decorators import BlitzqTask

log = logging.getLogger("blitzq")


def enqueue_on_commit(task: BlitzqTask[..., Any], args: Sequence[Any] = (),
                      kwargs: dict[str, Any] | None = None, *,
                      using: str | None = None) -> TaskHandle:
    """Enqueue ``task(*args, **kwargs)`` once the transaction on ``using`` commits.

    The handle's id is the pre-assigned message id (with an idempotency key that was
    already used, the message enqueued earlier is the one that runs).
    Outside a transaction (autocommit) it enqueues at once, and enqueue errors are
    raised to the caller as usual. Inside one, errors after the commit are logged,
    never raised: the data is committed and the caller's response should not fail.
    """
    kwargs = dict(kwargs or {})
    using = using or DEFAULT_DB_ALIAS
    bound = task if task.call.task_id else task.options(task_id=uuid.uuid4().hex)
    if not connections[using].in_atomic_block:
        return bound.enqueue(*args, **kwargs)
    client = bound._client()  # resolved now: a settings error shows at the call site
    # Encode now, so an argument msgpack cannot carry fails here, not after the commit.
    item = client.build(bound.spec, args, kwargs, bound.call)
    handle = TaskHandle(item.message_id, item.queue, client)

    def send() -> None:
        try:
            client.broker.enqueue([item])
        except Exception:
            log.exception("enqueue after commit failed: task %s message %s on queue %r is "
                          "lost", task.spec.name, handle.id, handle.queue)

    transaction.on_commit(send, using=using, robust=True)
    return handle


__all__ = ["enqueue_on_commit"]
