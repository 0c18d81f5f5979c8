"""blitzq_django: a fast, reliable Redis task queue for Django.

Importing this package loads neither Django models nor settings: the public
names below are resolved on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "blitzq_task": "blitzq_django.decorators",
    "get_client": "blitzq_django.conf",
    "enqueue_on_commit": "blitzq_django.transactions",
    "current_task": "blitzq_django.engine",
    "Retry": "blitzq_django.engine",
    "TaskHandle": "blitzq_django.engine",
    "TaskFailed": "blitzq_django.engine",
    "TaskCancelled": "blitzq_django.engine",
    "TaskExpired": "blitzq_django.engine",
    "Cancellation": "blitzq_django.engine",
    "ResultTimeout": "blitzq_django.engine",
    "TimeLimitExceeded": "blitzq_django.engine",
}

__all__ = [
    "Cancellation", "ResultTimeout", "Retry", "TaskCancelled", "TaskExpired", "TaskFailed",
    "TaskHandle", "TimeLimitExceeded", "__version__", "blitzq_task",
    "current_task", "enqueue_on_commit", "get_client",
]

if TYPE_CHECKING:
    from .conf import get_client
    from .decorators import blitzq_task
    from .engine import (
        Cancellation,
        ResultTimeout,
        Retry,
        TaskCancelled,
        TaskExpired,
        TaskFailed,
        TaskHandle,
        TimeLimitExceeded,
        current_task,
    )
    from .transactions import enqueue_on_commit


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'blitzq_django' has no attribute {name!r}")
    return getattr(import_module(module), name)
