"""@blitzq_task: registration, options, lazy client, queues."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from blitzq_django import conf
from blitzq_django.decorators import BlitzqTask, blitzq_task
from testproject.shop import tasks


def test_tasks_py_of_installed_apps_are_autodiscovered() -> None:
    names = {spec.name for spec in conf.registry}
    assert {"testproject.shop.tasks.noop", "testproject.shop.tasks.create_order",
            "testproject.shop.tasks.fetch_exchange_rate"} <= names
    assert conf.registry.get("testproject.shop.tasks.noop").func is tasks.noop.__wrapped__


def test_bare_and_with_options() -> None:
    @blitzq_task
    def bare(x: int) -> int:
        return x * 2

    @blitzq_task(name="tests.custom", queue="emails", retries=2, timeout=3.0,
                 store_result=False, dead_letter=False)
    async def configured() -> None: ...

    assert isinstance(bare, BlitzqTask) and bare(21) == 42
    assert bare.__name__ == "bare" and bare.__doc__ is None
    spec = conf.registry.get("tests.custom")
    assert (spec.queue, spec.retry.retries, spec.timeout, spec.store_result,
            spec.dead_letter, spec.is_async) == ("emails", 2, 3.0, False, False, True)


def test_unknown_option_is_refused() -> None:
    with pytest.raises(TypeError, match="priorty"):
        blitzq_task(priorty=3)


def test_bad_option_value_names_the_task() -> None:
    with pytest.raises(ImproperlyConfigured, match="bad_timeout"):
        @blitzq_task(timeout=-1)
        def bad_timeout() -> None: ...


def test_decorating_reads_no_settings(settings: Any) -> None:
    settings.BLITZQ = {"CONCURRENCY": "broken"}  # any read would raise

    @blitzq_task
    def defined_anyway() -> None: ...

    with pytest.raises(ImproperlyConfigured, match="CONCURRENCY"):
        defined_anyway.enqueue()


def test_tasks_without_a_queue_use_default_queue_at_enqueue_time(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "QUEUES": ["main", "emails"],
                       "DEFAULT_QUEUE": "main"}
    assert tasks.noop.enqueue().queue == "main"
    assert tasks.noop.options(queue="emails").enqueue().queue == "emails"

    @blitzq_task(queue="emails")
    def declared() -> None: ...

    assert declared.enqueue().queue == "emails"


def test_options_keep_the_django_helpers() -> None:
    task = tasks.noop.options(delay=5)
    assert isinstance(task, BlitzqTask) and hasattr(task, "enqueue_on_commit")
    with pytest.raises(TypeError, match="Accepted: queue, task_id"):
        tasks.noop.options(colour="red")
    with pytest.raises(TypeError, match="Did you mean 'delay'"):
        tasks.noop.options(dealy=5)


def test_enqueue_many_and_aenqueue(blitzq_memory: Any) -> None:
    import asyncio

    handles = tasks.create_order.enqueue_many([("a", 1), (("b", 2), {})])
    assert len(handles) == 2 and all(h.queue == "default" for h in handles)
    handle = asyncio.run(tasks.fetch_exchange_rate.aenqueue("USD"))
    assert blitzq_memory.broker.queue_stats("default")["ready"] == 3
    assert handle.queue == "default"


def test_failure_hooks_are_task_options(blitzq_memory: Any) -> None:
    import asyncio

    from blitzq_django.engine import Worker

    failures: list[Any] = []
    letters: list[Any] = []

    @blitzq_task(name="tests.hooked", retries=1, initial_delay=0, on_failure=failures.append,
                 on_dead_letter=letters.append)
    def hooked() -> None:
        raise ValueError("declined")

    handle = hooked.enqueue()
    asyncio.run(Worker(blitzq_memory, burst=True, queues=("default",),
                       schedule_poll_interval=0.05).run())
    assert handle.record(timeout=1).state == "dead_lettered"
    assert [r.state for r in failures] == ["retrying", "dead_lettered"]
    assert [(d.id, d.reason, d.error_type) for d in letters] == [
        (handle.id, "retries exhausted", "ValueError")]


def test_enqueue_resolves_the_settings_once_per_client(settings: Any, monkeypatch: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "QUEUES": ["main"], "DEFAULT_QUEUE": "main"}

    @blitzq_task
    def counted() -> None: ...

    assert counted.enqueue().queue == "main"
    from blitzq_django import queues, runtime

    reads = []
    real = conf.get_settings
    for module in (runtime, queues):  # where settings would be read on enqueue
        monkeypatch.setattr(module, "get_settings", lambda: reads.append(1) or real())
    for _ in range(5):
        counted.enqueue()
    assert reads == []
    # A change of BLITZQ builds a new client, and the task follows it.
    monkeypatch.undo()
    settings.BLITZQ = {"BROKER": "memory", "QUEUES": ["other"], "DEFAULT_QUEUE": "other"}
    assert counted.enqueue().queue == "other"
