"""blitzq_django: a fast, reliable Redis task queue for Django.

What an application imports is here, one spelling each::

    from blitzq_django import blitzq_task, get_client, get_handle, task_failed
    from blitzq_django.periodic import periodic

(``periodic`` stays in its package's name: ``blitzq_django.periodic`` is the package of
periodic tasks, and Python binds a subpackage on its parent once it is imported, so a
``periodic`` function here would be replaced by the package.)

Importing this package loads neither Django, Redis nor any other module of the
package: the public names below are resolved on first use (tests/test_public_api.py
pins both the names and that cost).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_ENGINE = "blitzq_django.engine"
_SIGNALS = "blitzq_django.signals"
_TESTING = "blitzq_django.testing"

#: public name -> the module defining it
_EXPORTS = {
    "blitzq_task": "blitzq_django.tasks.decorators",
    "get_client": "blitzq_django.runtime",
    "get_handle": "blitzq_django.runtime",
    "enqueue_on_commit": "blitzq_django.transactions",
    "DEFAULT_REDACT": "blitzq_django.engine.core.redact",
    **dict.fromkeys([
        "current_task", "TaskContext", "TaskHandle", "Record", "Retry", "RetryPolicy",
        "BlitzqError", "ConfigurationError", "TaskFailed", "TaskCancelled", "TaskExpired",
        "Cancellation", "ResultTimeout", "TimeLimitExceeded",
    ], _ENGINE),
    **dict.fromkeys([
        "task_enqueued", "task_started", "task_succeeded", "task_failed", "task_retried",
        "task_dead_lettered", "task_cancelled", "workflow_started", "workflow_finished",
    ], _SIGNALS),
    **dict.fromkeys(["Blitzq", "BlitzqTestMixin"], _TESTING),
    **dict.fromkeys(["chain", "chord", "group", "WorkflowCancelled", "WorkflowFailed",
                     "WorkflowHandle"], "blitzq_django.workflows"),
}

__all__ = [
    "DEFAULT_REDACT", "Blitzq", "BlitzqError", "BlitzqTestMixin", "Cancellation",
    "ConfigurationError", "Record", "ResultTimeout", "Retry", "RetryPolicy", "TaskCancelled",
    "TaskContext", "TaskExpired", "TaskFailed", "TaskHandle", "TimeLimitExceeded",
    "WorkflowCancelled", "WorkflowFailed", "WorkflowHandle", "__version__", "blitzq_task",
    "chain", "chord", "current_task", "enqueue_on_commit", "get_client", "get_handle", "group",
    "task_cancelled", "task_dead_lettered", "task_enqueued", "task_failed",
    "task_retried", "task_started", "task_succeeded", "workflow_finished", "workflow_started",
]

if TYPE_CHECKING:
    from .engine import (
        BlitzqError,
        Cancellation,
        ConfigurationError,
        Record,
        ResultTimeout,
        Retry,
        RetryPolicy,
        TaskCancelled,
        TaskContext,
        TaskExpired,
        TaskFailed,
        TaskHandle,
        TimeLimitExceeded,
        current_task,
    )
    from .engine.core.redact import DEFAULT_REDACT
    from .runtime import get_client, get_handle
    from .signals import (
        task_cancelled,
        task_dead_lettered,
        task_enqueued,
        task_failed,
        task_retried,
        task_started,
        task_succeeded,
        workflow_finished,
        workflow_started,
    )
    from .tasks.decorators import blitzq_task
    from .testing import Blitzq, BlitzqTestMixin
    from .transactions import enqueue_on_commit
    from .workflows import (
        WorkflowCancelled,
        WorkflowFailed,
        WorkflowHandle,
        chain,
        chord,
        group,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'blitzq_django' has no attribute {name!r}")
    return getattr(import_module(module), name)
