"""Test helpers: record what your code enqueues, run it eagerly or drain it with a worker.

Nothing here needs pytest: ``Blitzq`` is a context manager, ``BlitzqTestMixin`` a mixin
for ``django.test.TestCase``; the pytest fixtures ``blitzq`` and ``blitzq_eager``
(``pytest_plugin``, loaded by installing the package) wrap ``Blitzq``.

While a ``Blitzq`` is active, every client the process builds (``get_client()``,
``task.enqueue()``, ``enqueue_on_commit``) sends to one in-memory broker, whatever
``BLITZQ["BROKER"]`` says; the other settings (ROUTES, DEFAULT_QUEUE, RATE_LIMITS ...)
still apply, and a settings change in the test keeps the same broker. Nothing reaches
Redis. Two ways to run what was enqueued:

- ``drain()``: a real engine ``Worker`` in burst mode over the memory broker (one task
  at a time, on one thread sharing the test's database connections, so it sees the
  test's uncommitted rows), until the queues are empty: tasks those tasks enqueue run
  too, retries and delayed messages run at once (the clock "jumps"), records and
  failure hooks are written as in production;
- eager mode (``Blitzq(eager=True)``, the ``blitzq_eager`` fixture): each enqueue runs
  the task at once in the caller, retries included (without their delays); the handle's
  ``result()`` holds the outcome, and a failure is raised from ``enqueue()`` itself
  unless ``propagate=False`` (then ``result()`` raises TaskFailed).

Modules: ``helpers`` (Blitzq, drain, the TestCase mixin), ``broker`` (the in-memory
broker that logs enqueues), ``eager`` (eager runs, settled by the worker's outcome rules),
``pytest_plugin`` (the fixtures). Importing this package loads none of them (nor Django):
the names below are resolved on first use, so the pytest plugin costs nothing until a
fixture is used.

See docs/django.md, "Testing your tasks".
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Blitzq": "blitzq_django.testing.helpers",
    "BlitzqTestMixin": "blitzq_django.testing.helpers",
    "DrainResult": "blitzq_django.testing.helpers",
    "EnqueuedTask": "blitzq_django.testing.broker",
    "TestBroker": "blitzq_django.testing.broker",
}

__all__ = ["Blitzq", "BlitzqTestMixin", "DrainResult", "EnqueuedTask", "TestBroker"]

if TYPE_CHECKING:
    from .broker import EnqueuedTask, TestBroker
    from .helpers import Blitzq, BlitzqTestMixin, DrainResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'blitzq_django.testing' has no attribute {name!r}")
    return getattr(import_module(module), name)
