"""Django signals of a task's life (blitzq_django/signals.py), with a real worker on a
real Redis: each fires once per transition, with its sender and keyword arguments; a
receiver that raises changes nothing for the task."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.dispatch import Signal

from blitzq_django import conf, signals
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import TaskFailed
from blitzq_django.signals import (
    task_cancelled,
    task_dead_lettered,
    task_enqueued,
    task_failed,
    task_retried,
    task_started,
    task_succeeded,
    worker_listeners,
)
from tests.support.waiting import wait_until

from .conftest import running_worker


@blitzq_task
def double(x: int) -> int:
    return x * 2


@blitzq_task
async def adouble(x: int) -> int:
    await asyncio.sleep(0)  # (noqa: sleep) a real await in the task body, not a wait
    return x * 2


@blitzq_task(retries=1, initial_delay=0, jitter=False)
def always_fails(message: str) -> None:
    raise ValueError(message)


@blitzq_task(dead_letter=False)
def fails_once_for_good() -> None:
    raise KeyError("missing")


ALL = {"task_enqueued": task_enqueued, "task_started": task_started,
       "task_succeeded": task_succeeded, "task_failed": task_failed,
       "task_retried": task_retried, "task_dead_lettered": task_dead_lettered,
       "task_cancelled": task_cancelled}


class Seen:
    """Every signal sent while connected: (name, sender, kwargs, thread name)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, dict[str, Any], str]] = []
        self._lock = threading.Lock()
        self._receivers: list[tuple[Signal, Any]] = []

    def connect(self) -> Seen:
        for name, signal in ALL.items():
            def on(sender: Any, _name: str = name, **kwargs: Any) -> None:
                kwargs.pop("signal")
                with self._lock:
                    self.calls.append((_name, sender, kwargs, threading.current_thread().name))
            signal.connect(on, weak=False)
            self._receivers.append((signal, on))
        return self

    def disconnect(self) -> None:
        for signal, on in self._receivers:
            signal.disconnect(on)

    def of(self, message_id: str) -> list[str]:
        with self._lock:
            return [name for name, _s, kw, _t in self.calls if kw["message_id"] == message_id]

    def one(self, name: str, message_id: str) -> tuple[Any, dict[str, Any], str]:
        with self._lock:
            found = [(s, kw, t) for n, s, kw, t in self.calls
                     if n == name and kw["message_id"] == message_id]
        assert len(found) == 1, (name, found)
        return found[0]


@pytest.fixture
def seen(blitzq_redis: Any) -> Iterator[Seen]:
    recorder = Seen().connect()
    yield recorder
    recorder.disconnect()


def settled(seen: Seen, message_id: str, names: list[str]) -> None:
    wait_until(lambda: seen.of(message_id) == names, timeout=15,
               message=f"signals {names} of {message_id} (got {seen.of(message_id)})")


def test_enqueued_once_per_message_with_sender_and_arguments(seen: Seen) -> None:
    one = double.enqueue(21)
    many = double.enqueue_many([(1,), (2,)])
    other = double.options(queue="default").enqueue(x=5)

    async def aenqueue() -> Any:
        try:
            return await adouble.aenqueue(4)
        finally:
            await conf.get_client().broker.aclose()

    async_one = asyncio.run(aenqueue())
    names = [(n, kw["message_id"]) for n, _s, kw, _t in seen.calls]
    assert names == [("task_enqueued", h.id) for h in (one, *many, other, async_one)]
    sender, kwargs, _thread = seen.one("task_enqueued", one.id)
    assert sender is double  # the task object, whatever options() made of it
    assert seen.one("task_enqueued", other.id)[0] is double
    assert kwargs == {"task_name": "tests.django.test_signals.double", "message_id": one.id,
                      "queue": "default", "task_args": (21,), "task_kwargs": {},
                      "handle": one}
    assert seen.one("task_enqueued", other.id)[1]["task_kwargs"] == {"x": 5}
    assert seen.one("task_enqueued", many[1].id)[1]["task_args"] == (2,)
    assert seen.one("task_enqueued", async_one.id)[0] is adouble


@pytest.mark.django_db(transaction=True)
def test_enqueued_on_commit_is_sent_after_the_commit_only(seen: Seen) -> None:
    from django.db import transaction

    with transaction.atomic():
        kept = double.enqueue_on_commit(1)
        assert seen.of(kept.id) == []  # nothing is in Redis yet
    assert seen.of(kept.id) == ["task_enqueued"]
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = double.enqueue_on_commit(2)
        raise RuntimeError("rolled back")
    assert seen.of(dropped.id) == []


def test_started_and_succeeded_on_the_worker_pool(seen: Seen) -> None:
    sync_handle, async_handle = double.enqueue(21), adouble.enqueue(4)
    with running_worker(listeners=worker_listeners()) as worker:
        assert sync_handle.result(timeout=10) == 42 and async_handle.result(timeout=10) == 8
        for handle in (sync_handle, async_handle):
            settled(seen, handle.id, ["task_enqueued", "task_started", "task_succeeded"])
    sender, kwargs, thread = seen.one("task_started", sync_handle.id)
    assert sender is double and thread.startswith("blitzq")  # the worker's thread pool
    assert kwargs == {"task_name": "tests.django.test_signals.double",
                      "message_id": sync_handle.id, "queue": "default", "attempt": 1,
                      "worker": worker.name, "task_args": (21,), "task_kwargs": {}}
    sender, kwargs, thread = seen.one("task_succeeded", async_handle.id)
    assert sender is adouble and thread.startswith("blitzq")
    assert kwargs["result"] == 8 and kwargs["attempt"] == 1
    assert kwargs["duration"] is not None and kwargs["duration"] >= 0


def test_retried_failed_and_dead_lettered(seen: Seen) -> None:
    dead = always_fails.enqueue("declined")
    plain = fails_once_for_good.enqueue()
    with running_worker(listeners=worker_listeners()):
        with pytest.raises(TaskFailed):
            dead.result(timeout=10)
        with pytest.raises(TaskFailed):
            plain.result(timeout=10)
        settled(seen, dead.id, ["task_enqueued", "task_started", "task_retried",
                                "task_started", "task_failed", "task_dead_lettered"])
        settled(seen, plain.id, ["task_enqueued", "task_started", "task_failed"])
    sender, retried, _t = seen.one("task_retried", dead.id)
    assert sender is always_fails and retried["attempt"] == 1
    assert isinstance(retried["exception"], ValueError)
    assert str(retried["exception"]) == "declined"
    assert retried["error_type"] == "ValueError" and "declined" in retried["traceback"]
    assert retried["retry_at"] is not None and retried["retry_at"].tzinfo is not None
    _s, failed, _t = seen.one("task_failed", dead.id)
    assert (failed["attempt"], failed["dead_lettered"]) == (2, True)
    assert isinstance(failed["exception"], ValueError)
    _s, letter, _t = seen.one("task_dead_lettered", dead.id)
    assert (letter["reason"], letter["error_type"], letter["attempt"]) == (
        "retries exhausted", "ValueError", 2)
    sender, failed, _t = seen.one("task_failed", plain.id)
    assert sender is fails_once_for_good and failed["dead_lettered"] is False
    assert isinstance(failed["exception"], KeyError) and failed["error_type"] == "KeyError"


def test_cancelled(seen: Seen) -> None:
    handle = double.enqueue(1)
    assert handle.cancel().outcome  # queued: revoked; the worker drops it without running
    with running_worker(listeners=worker_listeners()):
        settled(seen, handle.id, ["task_enqueued", "task_cancelled"])
    sender, kwargs, _t = seen.one("task_cancelled", handle.id)
    assert sender is double and kwargs["interrupted"] is False


def test_dead_lettered_without_running(seen: Seen) -> None:
    from blitzq_django.engine import TaskSpec

    spec = TaskSpec.build(lambda: None, name="tests.django.test_signals.gone")
    handle = conf.get_client().enqueue(spec)  # a task no worker knows
    with running_worker(listeners=worker_listeners()):
        settled(seen, handle.id, ["task_dead_lettered"])
    sender, kwargs, _t = seen.one("task_dead_lettered", handle.id)
    assert sender is None and kwargs["reason"] == "unknown task"
    assert kwargs["exception"] is None


def test_a_raising_receiver_changes_nothing(seen: Seen) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    for signal in (task_enqueued, task_started, task_succeeded):
        signal.connect(broken)
    try:
        handle = double.enqueue(5)  # the enqueue is not affected either
        with running_worker(listeners=worker_listeners()):
            assert handle.result(timeout=10) == 10
            settled(seen, handle.id, ["task_enqueued", "task_started", "task_succeeded"])
    finally:
        for signal in (task_enqueued, task_started, task_succeeded):
            signal.disconnect(broken)
    assert conf.get_client().inspect(handle.id).state == "succeeded"


def test_no_listener_without_receivers(blitzq_redis: Any, settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    assert not signals.has_receivers()
    assert worker_listeners() == []  # the worker then runs its plain executor
    with running_worker(listeners=worker_listeners()) as worker:
        assert double.enqueue(2).result(timeout=10) == 4
    assert worker.notifier is None
    assert type(worker.executor).__name__ == "Executor"
    on = lambda **kwargs: None  # noqa: E731
    task_failed.connect(on)
    try:
        assert [type(x).__name__ for x in worker_listeners()] == ["SignalListener"]
    finally:
        task_failed.disconnect(on)
