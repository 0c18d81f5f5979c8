"""A handle from a bare message id (``Client.handle``): the id of a message saved
somewhere (a model field, a URL) becomes a ``TaskHandle`` again, as Celery's
``AsyncResult(id)`` does.

A handle needs the message's queue: its record, result and cancel are kept per queue.
Given ``queue=``, that is the queue. Without it, the queue is found from what Redis keeps
of the message by id, on each queue Redis has seen, the default queue first: its record
(written at enqueue with TRACK_STATE, at each retry, and at the outcome) or its place in
a schedule (delayed, ETA, retry backoff). A message found on none of them (waiting in a
queue with TRACK_STATE off, or its record expired) is on the default queue when that is
the only queue seen; otherwise the lookup cannot tell, and raises ``LookupError`` asking
for ``queue=`` rather than answer for the wrong queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.validate import check

if TYPE_CHECKING:
    from ..brokers.base import Broker


def candidates(default_queue: str, seen: Sequence[str]) -> list[str]:
    """The queues to look on, in order: the default queue, then the others seen."""
    return [default_queue, *sorted(q for q in seen if q != default_queue)]


def checked_id(message_id: str) -> str:
    return check("task_id", message_id, "message id: ")  # type: ignore[no-any-return]


def unfound(message_id: str, looked: Sequence[str], default_queue: str) -> str:
    """The queue of a message found nowhere: the default one when it is the only queue."""
    if set(looked) <= {default_queue}:
        return default_queue
    raise LookupError(f"message {message_id!r}: no record or schedule of it on any of the "
                      f"{len(looked)} queues ({', '.join(looked[:10])}); it may be waiting "
                      "in its queue (TRACK_STATE off) or its record has expired (RESULT_TTL). "
                      "Pass queue=, or use task.handle(id), which knows its task's queue")


def find_queue(broker: Broker, message_id: str, *, default_queue: str) -> str:
    looked = candidates(default_queue, broker.seen_queues())
    for queue in looked:
        record, due_ms, _body = broker.locate(queue, message_id)
        if record is not None or due_ms is not None:
            return queue
    return unfound(message_id, looked, default_queue)


async def afind_queue(broker: Broker, message_id: str, *, default_queue: str) -> str:
    looked = candidates(default_queue, await broker.aseen_queues())
    for queue in looked:
        record, due_ms, _body = await broker.alocate(queue, message_id)
        if record is not None or due_ms is not None:
            return queue
    return unfound(message_id, looked, default_queue)


__all__ = ["afind_queue", "candidates", "checked_id", "find_queue", "unfound"]
