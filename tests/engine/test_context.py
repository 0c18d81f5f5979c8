"""current_task(): what task code sees of the attempt it runs in."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from blitzq_django.engine import Client, TaskContext, current_task

from ..support.waiting import await_until
from .helpers import arun_burst, run_burst


@pytest.mark.parametrize("kind", ["thread", "async"])
def test_context_of_every_attempt(client: Client, kind: str) -> None:
    seen: list[TaskContext] = []

    def body() -> str:
        task = current_task()
        assert task is not None
        seen.append(task)
        if task.attempt < 3:
            raise ValueError("again")
        return "done"

    if kind == "thread":
        @client.task(name="ctx", queue="q2", retries=2, initial_delay=0)
        def ctx() -> str:
            return body()
    else:
        @client.task(name="ctx", queue="q2", retries=2, initial_delay=0)
        async def ctx() -> str:
            return body()

    h = ctx.enqueue()
    run_burst(client, queues=("q2",), name="worker-ctx")
    assert h.result(timeout=5) == "done"
    assert [c.attempt for c in seen] == [1, 2, 3]
    assert [c.retries for c in seen] == [0, 1, 2]
    for c in seen:
        assert c.id == h.id  # a retry keeps the id
        assert c.name == "ctx" and c.queue == "q2"
        assert c.max_attempts == 3
        assert c.delivery_count == 1
        assert c.worker == "worker-ctx"
    assert current_task() is None


def test_per_call_retries_change_max_attempts(client: Client) -> None:
    seen: list[tuple[int, int]] = []

    @client.task(name="t", retries=5)
    def t() -> None:
        task = current_task()
        assert task is not None
        seen.append((task.attempt, task.max_attempts))

    t.options(retries=1).enqueue()
    t.enqueue()
    run_burst(client, concurrency=1)
    assert sorted(seen) == [(1, 2), (1, 6)]


@pytest.mark.asyncio
async def test_concurrent_async_attempts_each_see_their_own(client: Client) -> None:
    release = asyncio.Event()
    mismatches: list[tuple[str, str | None]] = []
    started: list[str] = []

    @client.task(name="mine")
    async def mine(expected: str) -> None:
        before = current_task()
        started.append(expected)
        await release.wait()  # every attempt is suspended here at the same time
        after = current_task()
        for task in (before, after):
            if task is None or task.id != expected:
                mismatches.append((expected, task.id if task else None))

    handles = [await mine.options(task_id=f"m{i}").aenqueue(f"m{i}") for i in range(30)]

    async def release_when_all_started() -> None:
        await await_until(lambda: len(started) == 30, 5, message="30 attempts suspended")
        release.set()

    releaser = asyncio.create_task(release_when_all_started())
    await arun_burst(client, concurrency=50)
    await releaser
    assert mismatches == []
    for h in handles:
        assert await h.aresult(timeout=5) is None
    assert current_task() is None


def test_concurrent_thread_attempts_each_see_their_own(client: Client) -> None:
    barrier = threading.Barrier(4, timeout=5)
    seen: dict[str, Any] = {}

    @client.task(name="mine")
    def mine(expected: str) -> None:
        barrier.wait()  # four threads inside task code at once
        task = current_task()
        seen[expected] = task.id if task else None

    for i in range(8):
        mine.options(task_id=f"t{i}").enqueue(f"t{i}")
    run_burst(client, concurrency=4, threads=4)
    assert seen == {f"t{i}": f"t{i}" for i in range(8)}


def test_no_context_outside_task_code(client: Client) -> None:
    hooks_saw: list[Any] = []

    @client.task(name="t")
    def t() -> None:
        return None

    t.enqueue()
    run_burst(client, around_sync_call=[lambda: hooks_saw.append(current_task())])
    assert current_task() is None
    # The around hooks run inside the attempt's context (Django needs nothing else of it).
    assert len(hooks_saw) == 2


@pytest.mark.parametrize("kind", ["thread", "async"])
def test_correlation_id_and_headers_travel_to_the_tasks_a_task_enqueues(
        client: Client, kind: str) -> None:
    seen: dict[str, TaskContext] = {}

    @client.task(name="grandchild")
    def grandchild() -> None:
        task = current_task()
        assert task is not None
        seen["grandchild"] = task

    @client.task(name="child")
    async def child() -> None:
        task = current_task()
        assert task is not None
        seen["child"] = task
        await grandchild.options(headers={"tenant": "b"}).aenqueue()  # its own header wins

    def start() -> None:
        task = current_task()
        assert task is not None
        seen["root"] = task
        child.enqueue()

    if kind == "thread":
        root = client.task(name="root")(start)
    else:
        async def start_async() -> None:
            start()

        root = client.task(name="root")(start_async)

    handle = root.options(headers={"traceparent": "00-abc-01", "tenant": "a"}).enqueue()
    run_burst(client)
    assert handle.result(timeout=5) is None
    assert seen["root"].correlation_id == handle.id  # the root of the chain
    assert seen["child"].correlation_id == handle.id
    assert seen["grandchild"].correlation_id == handle.id
    assert seen["child"].headers["traceparent"] == "00-abc-01"
    assert seen["grandchild"].headers["traceparent"] == "00-abc-01"
    assert (seen["child"].headers["tenant"], seen["grandchild"].headers["tenant"]) == ("a", "b")


def test_a_message_enqueued_outside_a_task_starts_its_own_chain(client: Client) -> None:
    seen: list[TaskContext] = []

    @client.task(name="t")
    def t() -> None:
        task = current_task()
        assert task is not None
        seen.append(task)

    handle = t.enqueue()
    run_burst(client)
    assert [s.correlation_id for s in seen] == [handle.id]
    assert seen[0].headers == {}
