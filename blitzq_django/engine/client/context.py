"""current_task(): what the running attempt is, from inside task code."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.workflow import WORKFLOW_HEADER
from ..progress import USER_HEADER, make


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskContext:
    id: str
    name: str
    queue: str
    attempt: int  # 1-based
    max_attempts: int
    delivery_count: int  # > 1 means the message was recovered after a lost lease
    worker: str
    #: the message's headers; they travel on to every message this attempt enqueues
    headers: dict[str, Any] = field(default_factory=dict)
    #: the idempotency key the message was enqueued with, or None
    idempotency_key: str | None = None
    #: what the worker flags when this attempt is cancelled: any object with a bool
    #: ``cancelled`` attribute (the worker's entry of the attempt), read by ``cancelled``
    _flag: Any = field(default=None, repr=False, compare=False)
    #: the worker's ProgressReporter (engine/progress.py), or None: progress() is a no-op
    _progress: Any = field(default=None, repr=False, compare=False)

    def progress(self, done: float, total: float | None = None,
                 note: str | None = None) -> None:
        """Report how far this attempt is (docs/progress.md): ``done`` of ``total``, with
        an optional note. Never blocks: the worker writes the latest report of each
        message at most 10 times a second (the last one always), and pushes it to the
        message's followers. Works from ``def`` and ``async def`` tasks alike."""
        report = make(done, total, note, self.headers.get(USER_HEADER))
        if self._progress is not None:
            self._progress.report(self.queue, self.id, report)

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` reached this attempt while it runs. A ``def`` task cannot
        be interrupted: a long loop should check this and stop early (whatever it returns
        or raises is recorded as usual). An ``async def`` task gets ``CancelledError`` at
        its next ``await`` instead, and is recorded cancelled."""
        flag = self._flag
        return flag is not None and bool(flag.cancelled)

    @property
    def correlation_id(self) -> str:
        """The id of the message that started this chain of tasks (this one's, at the root).
        Every message enqueued from a task carries it on."""
        value = self.headers.get(CORRELATION_HEADER)
        return value if isinstance(value, str) else self.id

    @property
    def retries(self) -> int:
        """Retries so far: attempt - 1."""
        return self.attempt - 1


#: The header that carries the correlation id from a task to the tasks it enqueues.
CORRELATION_HEADER = "correlation_id"


def inherited_headers(own: dict[str, Any] | None) -> dict[str, Any]:
    """The headers of a message enqueued now: those of the running attempt (if any), its
    correlation id, then ``own`` (which wins)."""
    factory = _current.get()
    if factory is None:
        return own or {}
    parent = factory()
    headers = parent.headers
    if WORKFLOW_HEADER in headers:  # a step's place is its own, not its children's
        headers = {k: v for k, v in headers.items() if k != WORKFLOW_HEADER}
    return {**headers, CORRELATION_HEADER: parent.correlation_id, **(own or {})}


#: Set by the worker around each attempt to a zero-argument factory of its TaskContext:
#: the context is built only when task code asks for it, not for every message.
_current: contextvars.ContextVar[Callable[[], TaskContext] | None] = contextvars.ContextVar(
    "blitzq_current_task", default=None
)


def current_task() -> TaskContext | None:
    """The attempt running in this context, or None outside task code."""
    factory = _current.get()
    return factory() if factory is not None else None
