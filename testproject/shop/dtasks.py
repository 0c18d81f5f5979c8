"""``django.tasks`` functions of the test project, run by the BlitzQ backend
(tests/django/test_tasks_backend.py, tests/django/test_signals.py).

Written as Django documents them: ``@task`` from ``django.tasks`` (Django 6), or from
the ``django_tasks`` backport on Django 5.2. Not named tasks.py on purpose: a worker
finds these by importing this module when a message names one of them.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

#: What ``record_order`` saw, in order (the worker runs in the test process).
ORDER: list[str] = []
_lock = threading.Lock()


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def multiply(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a * b


@task(takes_context=True)
def describe_attempt(context: Any, tag: str) -> dict[str, Any]:
    return {"tag": tag, "attempt": context.attempt, "id": context.task_result.id,
            "status": str(context.task_result.status)}


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task
def returns_a_set() -> Any:
    return {1, 2}  # not JSON-compatible: the attempt fails, as with Django's backends


@task
def record_order(tag: str) -> str:
    with _lock:
        ORDER.append(tag)
    return tag


#: Set by a test to let ``wait_for_release`` return (the worker runs in the test process).
RELEASE = threading.Event()


@task
def wait_for_release(timeout: float) -> bool:
    """Runs until the test sets RELEASE (so that the test sees it running)."""
    return RELEASE.wait(timeout)
