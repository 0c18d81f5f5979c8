"""current_task(): what the running attempt is, from inside task code."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskContext:
    id: str
    name: str
    queue: str
    attempt: int  # 1-based
    max_attempts: int
    delivery_count: int  # > 1 means the message was recovered after a lost lease
    worker: str

    @property
    def retries(self) -> int:
        """Retries so far: attempt - 1."""
        return self.attempt - 1


#: Set by the worker around each attempt to a zero-argument factory of its TaskContext:
#: the context is built only when task code asks for it, not for every message.
_current: contextvars.ContextVar[Callable[[], TaskContext] | None] = contextvars.ContextVar(
    "blitzq_current_task", default=None
)


def current_task() -> TaskContext | None:
    """The attempt running in this context, or None outside task code."""
    factory = _current.get()
    return factory() if factory is not None else None
