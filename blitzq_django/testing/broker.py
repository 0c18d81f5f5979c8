"""The test broker: a MemoryBroker that logs every enqueue (``EnqueuedTask``) and, in
eager mode, runs each one at once in the caller (eager.py)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from ..engine import MemoryBroker, Record, TaskHandle
from ..engine.brokers.base import Enqueue
from ..engine.core.message import Message, decode, pack, unpack
from ..engine.errors import TaskNotRegistered
from ..registry import registry
from ..runtime import get_client
from . import eager

__all__ = ["EnqueuedTask", "TestBroker", "task_name"]

_FAR_FUTURE_MS = 1 << 62  # "now" for promotion while draining: every scheduled message is due


# -- what was enqueued -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnqueuedTask:
    """One enqueued message, decoded: what a worker would receive."""

    id: str
    task: str
    queue: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: everything else: eta_ms, expires_ms, timeout, headers, idempotency_key, priority,
    #: policy (per-call retry overrides), unique_key
    message: Message = field(repr=False)

    @property
    def eta(self) -> dt.datetime | None:
        """When it may run first (delay= / eta=), as an aware UTC datetime, or None."""
        ms = self.message.eta_ms
        return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)

    @property
    def options(self) -> dict[str, Any]:
        """The per-call options that differ from the defaults (queue aside)."""
        m = self.message
        found = {"eta": self.eta, "timeout": m.timeout, "idempotency_key": m.idempotency_key,
                 "priority": m.priority, "expires_ms": m.expires_ms,
                 "unique": m.unique_key is not None and m.unique_key.startswith("args:"),
                 "headers": m.headers, **(m.policy or {})}
        return {k: v for k, v in found.items() if v not in (None, False, {})}

    @property
    def handle(self) -> TaskHandle:
        """A handle on this message (its ``result()`` once it ran)."""
        return TaskHandle(self.id, self.queue, get_client())

    def matches(self, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
        """Whether it was enqueued with these arguments (compared as they travel: a
        tuple equals a list)."""
        return (list(self.args) == _as_sent(list(args))
                and self.kwargs == _as_sent(dict(kwargs)))


def _as_sent(value: Any) -> Any:
    """``value`` as a worker receives it (through msgpack: tuples become lists)."""
    return unpack(pack(value))


def task_name(task: Any) -> str:
    """The registered name of a task object, or the name itself."""
    if isinstance(task, str):
        return task
    name = getattr(task, "name", None)
    if isinstance(name, str):
        return name
    raise TypeError(f"expected a task (or a task name), got {task!r:.80}")


# -- the broker --------------------------------------------------------------------------


class TestBroker(MemoryBroker):
    """A MemoryBroker that logs every enqueue and can run each one at once (eager).

    ``fast_forward`` (set while draining) promotes every scheduled message as if it
    were due: retries and delayed messages run without waiting.
    """

    __test__ = False  # not a pytest test class despite its name

    def __init__(self, *, eager: bool = False, propagate: bool = True, **options: Any) -> None:
        super().__init__(**options)
        self.eager = eager
        self.propagate = propagate
        self.fast_forward = False
        self.sent: list[EnqueuedTask] = []
        self.queues_used: set[str] = set()
        self._eager_records: dict[tuple[str, str], Record] = {}
        self._eager_keys: dict[tuple[str, str], str] = {}
        self.log_lock = threading.Lock()

    # -- producing --

    def enqueue(self, items: Sequence[Enqueue]) -> list[str]:
        with self.log_lock:
            for item in items:
                message = decode(item.payload, max(len(item.payload), 1))
                self.sent.append(EnqueuedTask(message.id, message.task, message.queue,
                                              tuple(message.args), dict(message.kwargs),
                                              message))
                self.queues_used.add(item.queue)
        if not self.eager:
            return super().enqueue(items)
        self.see_queues([item.queue for item in items])
        return [self._run_eagerly(item) for item in items]

    async def aenqueue(self, items: Sequence[Enqueue]) -> list[str]:
        if not self.eager:
            return self.enqueue(items)
        # Off the event loop: a `def` task may use the ORM, which refuses async contexts.
        return await sync_to_async(self.enqueue, thread_sensitive=True)(items)

    # -- eager runs --

    def _run_eagerly(self, item: Enqueue) -> str:
        if item.idempotency_key:
            key = (item.queue, item.idempotency_key)
            with self.log_lock:
                first = self._eager_keys.setdefault(key, item.message_id)
            if first != item.message_id:
                return first  # the same key again: the first message is the one that ran
        message = decode(item.payload, max(len(item.payload), 1))
        spec = registry.find(message.task)
        if spec is None:
            raise TaskNotRegistered(f"unknown task {message.task!r} (eager run)")
        client = get_client()
        error = eager.run(message, spec, eager.settle_options(
            client.max_result_size, client.max_message_size), self._keep)
        if error is not None and self.propagate:
            raise error
        return message.id

    def _keep(self, record: Record) -> None:
        with self._lock:
            self._eager_records[(record.queue, record.id)] = record
            self._changed.notify_all()

    def _eager_record(self, queue: str, message_id: str) -> Record | None:
        return self._eager_records.get((queue, message_id))

    def get_record(self, queue: str, message_id: str) -> Record | None:
        return self._eager_record(queue, message_id) or super().get_record(queue, message_id)

    async def aget_record(self, queue: str, message_id: str) -> Record | None:
        return self.get_record(queue, message_id)

    def wait_record(self, queue: str, message_id: str, timeout: float) -> Record | None:
        return (self._eager_record(queue, message_id)
                or super().wait_record(queue, message_id, timeout))

    async def await_record(self, queue: str, message_id: str, timeout: float) -> Record | None:
        return (self._eager_record(queue, message_id)
                or await super().await_record(queue, message_id, timeout))

    # -- draining --

    async def promote(self, queue: str, now_ms: int, limit: int) -> tuple[int, int]:
        return await super().promote(queue, _FAR_FUTURE_MS if self.fast_forward else now_ms,
                                     limit)

    def remaining(self, queues: Sequence[str], *, scheduled: bool = True) -> int:
        """Messages still ready (and scheduled, when asked) on these queues."""
        total = 0
        for queue in queues:
            stats = self.queue_stats(queue)
            total += int(stats["ready"] or 0) + int(stats["in_flight"] or 0)
            if scheduled:
                total += int(stats["scheduled"] or 0)
        return total
