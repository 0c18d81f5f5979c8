"""Database connections in worker threads: handled as around a request.

``runworker`` calls ``close_old_connections`` before and after each `def` task and
each plain failure hook in a thread that opened a connection (and nothing in one that
never did: db_connections.py), so CONN_MAX_AGE applies to worker threads as it does to
request threads, and a connection broken by a task is not handed to the next one.
`async def` tasks use the async ORM.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection, connections

from blitzq_django import db_connections
from blitzq_django.decorators import blitzq_task
from testproject.shop.models import Order
from tests.django.conftest import running_worker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _conn_max_age_restored() -> Iterator[None]:
    """These tests set CONN_MAX_AGE in place (the connections read that very dict, so
    replacing DATABASES would not reach them): put it back for the tests after them."""
    default = django_settings.DATABASES["default"]
    had, before = "CONN_MAX_AGE" in default, default.get("CONN_MAX_AGE")
    yield
    if had:
        default["CONN_MAX_AGE"] = before
    else:
        default.pop("CONN_MAX_AGE", None)


def test_a_def_task_connection_is_closed_after_it_with_conn_max_age_0(
        blitzq_memory: Any, settings: Any) -> None:
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0
    seen: list[Any] = []

    @blitzq_task(name="tests.conn.count")
    def count() -> int:
        seen.append(connections["default"])  # this worker thread's own wrapper
        return Order.objects.count()

    with running_worker(blitzq_memory, concurrency=2, threads=2):
        assert count.enqueue().result(timeout=10) == 0
        (wrapper,) = seen
        assert wrapper is not connections["default"]  # not the test thread's
        # close_old_connections() after the task closed it (max age 0).
        wait_until(lambda: wrapper.connection is None, timeout=10,
                   message="connection closed after the task")


def test_a_broken_connection_is_not_reused_by_the_next_task(blitzq_memory: Any,
                                                             settings: Any) -> None:
    if connection.vendor != "postgresql":
        # Django asks the server whether a connection that saw an error is usable;
        # SQLite's answer is always yes, so only a server database shows the handling.
        pytest.skip("needs PostgreSQL (runs in the PostgreSQL pass of scripts/test.py)")
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 600  # persistent, as in production
    wrappers: list[Any] = []

    @blitzq_task(name="tests.conn.breaks")
    def breaks() -> None:
        Order.objects.count()
        wrapper = connections["default"]
        wrappers.append(wrapper)
        wrapper.connection.close()  # as a server restart would
        wrapper.errors_occurred = True  # what Django sets on a failed query

    @blitzq_task(name="tests.conn.after")
    def after() -> int:
        return Order.objects.count()

    # One thread: the second task runs on the same thread, with the same wrapper.
    with running_worker(blitzq_memory, concurrency=1, threads=1):
        breaks.enqueue().record(timeout=10)
        assert after.enqueue().result(timeout=10) == 0
    assert len(wrappers) == 1


def test_failure_hooks_get_the_same_connection_handling(blitzq_memory: Any,
                                                        settings: Any) -> None:
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0
    seen: list[Any] = []
    hooked = threading.Event()

    def on_failure(record: Any) -> None:
        seen.append((connections["default"], Order.objects.count()))
        hooked.set()

    @blitzq_task(name="tests.conn.fails", retries=0, on_failure=on_failure)
    def fails() -> None:
        raise ValueError("no")

    with running_worker(blitzq_memory, concurrency=1, threads=1):
        fails.enqueue()
        assert hooked.wait(10)
        (wrapper, orders), = seen
        assert orders == 0
        wait_until(lambda: wrapper.connection is None, timeout=10,
                   message="connection closed after the hook")


def test_async_tasks_may_use_the_async_orm(blitzq_memory: Any) -> None:
    @blitzq_task(name="tests.conn.async_orm")
    async def create(reference: str) -> int:
        order = await Order.objects.acreate(reference=reference, amount_cents=5)
        return await Order.objects.filter(pk=order.pk).acount()

    with running_worker(blitzq_memory, concurrency=2):
        assert create.enqueue("async-1").result(timeout=10) == 1
    assert Order.objects.filter(reference="async-1").exists()


def _in_a_thread(func: Any) -> Any:
    """What ``func()`` returns when called on a new thread (with its own connections)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = func()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    return out["value"]


def _count_walks(monkeypatch: Any) -> list[int]:
    """One entry per call of Django's close_old_connections by the hook, which still runs."""
    real = db_connections.close_old_connections
    calls: list[int] = []

    def counted() -> None:
        calls.append(1)
        real()

    monkeypatch.setattr(db_connections, "close_old_connections", counted)
    return calls


def test_a_thread_that_never_connected_does_not_walk_the_connections(
        monkeypatch: Any) -> None:
    calls: list[int] = []
    monkeypatch.setattr(db_connections, "close_old_connections", lambda: calls.append(1))

    def hook_twice() -> int:
        db_connections.close_old_connections_if_opened()
        db_connections.close_old_connections_if_opened()
        return len(calls)

    assert _in_a_thread(hook_twice) == 0


def test_a_thread_that_connected_is_closed_with_conn_max_age_0_then_skipped(
        settings: Any, monkeypatch: Any) -> None:
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0
    calls = _count_walks(monkeypatch)

    def use_then_hook() -> tuple[bool, bool, int]:
        Order.objects.count()
        wrapper = connections["default"]
        opened = wrapper.connection is not None
        db_connections.close_old_connections_if_opened()  # closes it (max age 0)
        closed = wrapper.connection is None
        db_connections.close_old_connections_if_opened()  # nothing open: not walked
        return opened, closed, len(calls)

    assert _in_a_thread(use_then_hook) == (True, True, 1)


def test_a_persistent_connection_stays_checked_around_every_task(
        settings: Any, monkeypatch: Any) -> None:
    settings.DATABASES["default"]["CONN_MAX_AGE"] = None  # persistent
    calls = _count_walks(monkeypatch)

    def use_then_hook() -> tuple[bool, int]:
        Order.objects.count()
        for _ in range(3):
            db_connections.close_old_connections_if_opened()
        return connections["default"].connection is not None, len(calls)

    assert _in_a_thread(use_then_hook) == (True, 3)
