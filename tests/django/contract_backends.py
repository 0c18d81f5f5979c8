"""The BlitzQ backend standing in for Django's own backends in Django's tests of them
(tests/django/test_django_contract.py): the same backend, and only what those tests
need of the backend they were written for.

- ``QueuedBackend`` for ``DummyBackend`` (results stay READY: nothing runs them).
- ``RunToEndBackend`` for ``ImmediateBackend``: ``enqueue()`` returns once a real worker
  has run the task and sent its ``task_finished`` (Django's immediate backend returns
  after running it in the caller).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from asgiref.sync import sync_to_async

from blitzq_django.backend import BlitzQBackend, task_finished
from blitzq_django.management.commands.runworker import listeners as worker_listeners

from .conftest import running_worker

RUN_TIMEOUT_S = 30.0


class QueuedBackend(BlitzQBackend):
    def clear(self) -> None:
        """DummyBackend.clear() forgets its results; Django's tests call it in setUp().
        Each test here has a Redis namespace of its own already: nothing to forget."""


class RunToEndBackend(BlitzQBackend):
    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        run_to_end(result)
        return result

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = await super().aenqueue(task, args, kwargs)
        await sync_to_async(run_to_end, thread_sensitive=False)(result)
        return result


def run_to_end(result: Any) -> None:
    """Run a worker (burst mode, the task's queue) until ``result``'s task_finished has
    been sent, then refresh ``result`` from the backend."""
    finished = threading.Event()

    def on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
        if task_result.id == result.id:
            finished.set()

    uid = f"contract-{uuid.uuid4().hex}"
    task_finished.connect(on_finished, weak=False, dispatch_uid=uid)
    try:
        with running_worker(queues=(result.task.queue_name,), listeners=worker_listeners(),
                            burst=True, concurrency=1):
            if not finished.wait(RUN_TIMEOUT_S):
                raise AssertionError(f"task {result.id} did not finish within "
                                     f"{RUN_TIMEOUT_S} s")
    finally:
        task_finished.disconnect(dispatch_uid=uid)
    result.refresh()
