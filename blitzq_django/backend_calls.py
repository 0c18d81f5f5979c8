"""The django.tasks call of a message: what ``get_result()`` returns and a record lacks.

A BlitzQ record keeps a message's state and outcome, not how it was called. Django's
contract wants more of a result: the Task as it was enqueued (``using()``'s queue_name,
priority, run_after and backend), its ``args`` and ``kwargs``, and the ``enqueued_at``
that ``enqueue()`` returned. The BlitzQ backend (blitzq_django.backend) writes them here
before it enqueues the message, one key per message beside its record (same queue, same
hash tag: one MGET reads both), and reads them for ``get_result()`` and the
``task_started`` / ``task_finished`` signals.

The key lives for the message's delay plus twice RESULT_TTL: longer than its final
record (RESULT_TTL from the end) unless the message waited in its queue longer than
RESULT_TTL. A result whose call is gone says so the only way Django allows: its Task is
the one decorated, its ``args`` and ``kwargs`` are empty (docs/django.md).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from .engine import Record
from .engine.brokers.redis import RedisBroker, ops
from .engine.core.message import pack, unpack

_VERSION = 1


@dataclass(frozen=True, slots=True)
class Call:
    """One django.tasks enqueue, as the backend kept it."""

    alias: str  # of the backend that enqueued it: the result's ``backend``
    task_backend: str  # the Task's ``backend``
    queue_name: str
    priority: int
    run_after: dt.datetime | None
    args: list[Any]
    kwargs: dict[str, Any]
    created_ms: int  # the message's: the result's enqueued_at

    def to_bytes(self) -> bytes:
        return pack([_VERSION, self.alias, self.task_backend, self.queue_name, self.priority,
                     self.run_after, self.args, self.kwargs, self.created_ms])

    @classmethod
    def from_bytes(cls, data: bytes) -> Call | None:
        """The call, or None for what this version cannot read (never an exception: a
        result is still answered without it)."""
        try:
            fields = unpack(data)
            if fields[0] != _VERSION:
                return None
            (_v, alias, task_backend, queue_name, priority, run_after, args, kwargs,
             created) = fields[:9]
        except Exception:  # noqa: BLE001 - not a call of this version
            return None
        return cls(alias, task_backend, queue_name, priority, run_after, list(args),
                   dict(kwargs), created)


def _is_redis(broker: Any) -> bool:
    return isinstance(broker, RedisBroker)


def _memory(broker: Any) -> dict[tuple[str, str], bytes]:
    store: dict[tuple[str, str], bytes] | None = getattr(broker, "_blitzq_django_calls", None)
    if store is None:
        store = broker._blitzq_django_calls = {}
    return store


def _set(broker: Any, queue: str, message_id: str, call: Call, due_ms: int,
         now_ms: int) -> ops.Op:
    ttl_ms = max(due_ms - now_ms, 0) + 2 * broker.record_ttl * 1000
    return ops.Op(command=("SET", broker.keys.queue(queue).django_call(message_id),
                           call.to_bytes(), "PX", ttl_ms))


def write(broker: Any, queue: str, message_id: str, call: Call, due_ms: int = 0) -> None:
    """Keep ``call`` for the message (before it is enqueued: a worker may end it at once)."""
    if _is_redis(broker):
        broker.sync.run(_set(broker, queue, message_id, call, due_ms, call.created_ms))
    else:
        _memory(broker)[(queue, message_id)] = call.to_bytes()


async def awrite(broker: Any, queue: str, message_id: str, call: Call,
                 due_ms: int = 0) -> None:
    if _is_redis(broker):
        await broker.aio.run(_set(broker, queue, message_id, call, due_ms, call.created_ms))
    else:
        _memory(broker)[(queue, message_id)] = call.to_bytes()


def read(broker: Any, queue: str, message_id: str) -> Call | None:
    """The call of a message, or None."""
    if _is_redis(broker):
        data = broker.sync.run(ops.get(broker.keys.queue(queue).django_call(message_id)))
    else:
        data = _memory(broker).get((queue, message_id))
    return Call.from_bytes(data) if data else None


def read_with_record(broker: Any, queue: str, message_id: str
                     ) -> tuple[Record | None, Call | None]:
    """The record and the call of a message (one round trip on Redis)."""
    if not _is_redis(broker):
        return broker.get_record(queue, message_id), read(broker, queue, message_id)
    keys = broker.keys.queue(queue)
    record, call = broker.sync.run(ops.mget([keys.record(message_id),
                                             keys.django_call(message_id)]))
    return _decoded(record, call)


async def aread_with_record(broker: Any, queue: str, message_id: str
                            ) -> tuple[Record | None, Call | None]:
    if not _is_redis(broker):
        return await broker.aget_record(queue, message_id), read(broker, queue, message_id)
    keys = broker.keys.queue(queue)
    record, call = await broker.aio.run(ops.mget([keys.record(message_id),
                                                  keys.django_call(message_id)]))
    return _decoded(record, call)


def _decoded(record: bytes | None, call: bytes | None) -> tuple[Record | None, Call | None]:
    return (Record.from_bytes(record) if record else None,
            Call.from_bytes(call) if call else None)


__all__ = ["Call", "aread_with_record", "awrite", "read", "read_with_record", "write"]
