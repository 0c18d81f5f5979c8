"""Failure hooks: per task and per worker, sync and async, after the settlement is written."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from blitzq_django.engine import Client, DeadLetter, Record
from blitzq_django.engine.core import record as states

from ..support.waiting import await_until, wait_until
from .helpers import arun_burst, background_worker, inject, run_burst


class Calls:
    """Thread-safe log of hook calls: (hook name, value)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[tuple[str, Any]] = []

    def hook(self, name: str) -> Any:
        def call(value: Any) -> None:
            with self._lock:
                self.items.append((name, value))
        return call

    def ahook(self, name: str) -> Any:
        async def call(value: Any) -> None:
            await asyncio.sleep(0)  # (noqa: sleep) a real coroutine that suspends once
            with self._lock:
                self.items.append((name, value))
        return call

    def of(self, name: str) -> list[Any]:
        with self._lock:
            return [v for n, v in self.items if n == name]

    def __len__(self) -> int:
        with self._lock:
            return len(self.items)


@pytest.mark.asyncio
async def test_task_and_worker_hooks_see_every_failed_attempt_and_the_dead_letter(
        client: Client) -> None:
    calls = Calls()

    @client.task(name="flaky", retries=2, initial_delay=0, on_failure=calls.hook("task.failure"),
                 on_dead_letter=calls.ahook("task.dead"))
    def flaky(x: int) -> None:
        raise ValueError(f"bad {x}")

    h = flaky.enqueue(3)
    async with background_worker(
            client, on_failure=[calls.ahook("worker.failure.async"), calls.hook("worker.failure")],
            on_dead_letter=[calls.hook("worker.dead")]):
        await await_until(lambda: len(calls) == 3 * 3 + 2, 5, message="11 hook calls")

    for name in ("task.failure", "worker.failure", "worker.failure.async"):
        records: list[Record] = calls.of(name)
        assert all(isinstance(r, Record) for r in records)
        assert sorted((r.attempt, r.state) for r in records) == [
            (1, states.RETRYING), (2, states.RETRYING), (3, states.DEAD_LETTERED)], name
        for r in records:
            assert r.id == h.id and r.task == "flaky" and r.queue == "default"
            assert r.error_type == "ValueError" and r.error_message == "bad 3"
            assert r.traceback and "bad 3" in r.traceback
        assert next(r for r in records if r.attempt == 3).reason == "retries exhausted"
    for name in ("task.dead", "worker.dead"):
        (letter,) = calls.of(name)
        assert isinstance(letter, DeadLetter)
        assert letter.id == h.id and letter.task == "flaky"
        assert letter.reason == "retries exhausted" and letter.attempt == 3
        assert letter.error_type == "ValueError" and letter.error_message == "bad 3"
        assert letter.message is not None and letter.message.args == [3]


def test_dead_letter_false_calls_on_failure_with_failed_and_no_dead_letter_hook(
        client: Client) -> None:
    calls = Calls()

    @client.task(name="quiet", dead_letter=False, on_failure=calls.hook("failure"),
                 on_dead_letter=calls.hook("dead"))
    async def quiet() -> None:
        raise KeyError("k")

    h = quiet.enqueue()
    run_burst(client, on_dead_letter=[calls.hook("dead")])
    wait_until(lambda: len(calls) >= 1, 5, message="the failure hook")
    (record,) = calls.of("failure")
    assert record.state == states.FAILED and record.id == h.id
    assert record.error_type == "KeyError"
    assert calls.of("dead") == []


def test_success_calls_no_hook(client: Client) -> None:
    calls = Calls()

    @client.task(name="fine", on_failure=calls.hook("failure"), on_dead_letter=calls.hook("dead"))
    def fine() -> int:
        return 1

    @client.task(name="marker", retries=0, on_failure=calls.hook("marker"))
    def marker() -> None:
        raise ValueError("the last message, so its hook marks the end")

    fine.enqueue()
    marker.enqueue()
    run_burst(client, concurrency=1, on_failure=[calls.hook("failure")])
    wait_until(lambda: calls.of("marker"), 5, message="the marker's hook")
    assert [r.task for r in calls.of("failure")] == ["marker"]  # only the worker's hook
    assert calls.of("dead") == []


def test_rejected_messages_reach_the_worker_dead_letter_hook(client: Client) -> None:
    calls = Calls()

    @client.task(name="known")
    def known() -> None:
        return None

    inject(client.broker, "default", b"\xc1 garbage")
    run_burst(client, on_dead_letter=[calls.hook("dead")], on_failure=[calls.hook("failure")])
    wait_until(lambda: calls.of("dead"), 5, message="the dead letter hook")
    (letter,) = calls.of("dead")
    assert letter.reason == "malformed message"
    assert calls.of("failure") == []  # nothing ran, so no attempt failed


@pytest.mark.asyncio
async def test_hooks_run_after_the_settlement_is_written(client: Client) -> None:
    seen: list[tuple[str, Any]] = []

    def on_failure(record: Record) -> None:
        seen.append(("failure", client.inspect(record.id)))

    def on_dead_letter(letter: DeadLetter) -> None:
        seen.append(("dead", client.broker.dead_letter(letter.queue, letter.id)))

    @client.task(name="bad", on_failure=on_failure, on_dead_letter=on_dead_letter)
    def bad() -> None:
        raise ValueError("x")

    h = bad.enqueue()
    async with background_worker(client):
        await await_until(lambda: len(seen) == 2, 5, message="both hooks")
    found = dict(seen)
    assert found["failure"] is not None and found["failure"].state == states.DEAD_LETTERED
    assert found["failure"].id == h.id
    assert found["dead"] is not None


@pytest.mark.asyncio
async def test_raising_hooks_do_not_break_the_worker(client: Client,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    calls = Calls()

    def sync_boom(value: Any) -> None:
        raise RuntimeError("sync hook bug")

    async def async_boom(value: Any) -> None:
        raise RuntimeError("async hook bug")

    @client.task(name="bad", on_failure=sync_boom, on_dead_letter=async_boom)
    def bad(i: int) -> None:
        raise ValueError(i)

    @client.task(name="good")
    async def good(i: int) -> int:
        return i

    async with background_worker(client, on_failure=[async_boom, calls.hook("after")],
                                 on_dead_letter=[sync_boom]) as worker:
        first = [await bad.aenqueue(i) for i in range(3)]
        await await_until(lambda: len(calls.of("after")) == 3, 5,
                          message="the hook after the raising ones")
        second = [await good.aenqueue(i) for i in range(3)]
        assert [await h.aresult(timeout=5) for h in second] == [0, 1, 2]
        assert worker.stats.dead_lettered == 3
    for h in first:
        assert (await client.aget_result(h.id, 1)).state == states.DEAD_LETTERED
    assert "sync hook bug" in caplog.text or any(
        "sync hook bug" in str(r.exc_info) for r in caplog.records)
    assert "async hook bug" in caplog.text or any(
        "async hook bug" in str(r.exc_info) for r in caplog.records)


@pytest.mark.asyncio
async def test_hooks_of_the_last_settlements_run_before_a_burst_returns(client: Client) -> None:
    calls = Calls()

    @client.task(name="bad", retries=0, on_failure=calls.hook("sync"),
                 on_dead_letter=calls.ahook("async"))
    async def bad(i: int) -> None:
        raise ValueError(i)

    await bad.aenqueue_many([(i,) for i in range(20)])
    await arun_burst(client)
    # A burst worker (a cron job, a test) returns: the hooks of what it settled have run.
    assert len(calls.of("sync")) == 20
    assert len(calls.of("async")) == 20


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_hooks_of_attempts_settled_during_shutdown_still_run(client: Client, kind: str) -> None:
    # A worker process stopping (SIGTERM): attempts finishing in the drain are settled in
    # the last flush; their failure hooks (alerting, say) must still be called.
    from blitzq_django.engine import Worker

    from .helpers import FAST

    calls = Calls()
    release = threading.Event()
    started = threading.Semaphore(0)
    hook = calls.hook("hook") if kind == "sync" else calls.ahook("hook")

    @client.task(name="bad", retries=0, on_dead_letter=hook)
    def bad(i: int) -> None:
        started.release()
        release.wait(5)
        raise ValueError(i)

    bad.enqueue_many([(i,) for i in range(5)])
    worker = Worker(client, **{**FAST, "concurrency": 5})
    runner = threading.Thread(target=asyncio.run, args=(worker.run(close_broker=True),))
    runner.start()
    for _ in range(5):
        assert started.acquire(timeout=5)
    worker.stop()
    release.set()
    runner.join(10)
    assert not runner.is_alive()
    assert worker.stats.dead_lettered == 5
    wait_until(lambda: len(calls) == 5, 3, message="5 dead-letter hooks")
