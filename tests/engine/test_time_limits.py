"""Time limits of `def` tasks (issue 19, item 7): at its timeout a task's thread gets
TimeLimitExceeded raised inside it; a thread that still runs after the grace makes the
worker recycle, its attempt settled once as timed out. (tests/fault/test_time_limits.py:
the recycle in real worker processes.)"""

from __future__ import annotations

import asyncio
import random
import sys
import threading
import time
from typing import Any

import pytest

from blitzq_django.engine import Client, TimeLimitExceeded, Worker, current_task
from blitzq_django.engine.core import record as states
from blitzq_django.engine.worker import timelimits
from blitzq_django.engine.worker.timelimits import TimeLimits

from .helpers import FAST, arun_burst, pending_count, ready_message_ids


@pytest.mark.asyncio
async def test_a_python_loop_is_stopped_at_its_timeout_and_cleans_up(client: Client) -> None:
    cleanup: list[str] = []

    @client.task(name="spin", timeout=0.3, retries=1, initial_delay=0, jitter=False)
    def spin() -> str:
        ctx = current_task()
        assert ctx is not None
        if ctx.attempt == 2:
            return "second attempt"
        try:
            while True:  # pure Python: interruptible between two bytecodes
                pass
        except TimeLimitExceeded:
            cleanup.append("except")
            raise
        finally:
            cleanup.append("finally")

    @client.task(name="after")
    def after() -> str:
        return "ran"

    looping = spin.enqueue()
    next_one = after.enqueue()
    # One thread, one slot: the next task runs only if the loop gave them back.
    stats = await arun_burst(client, concurrency=1, threads=1)
    assert cleanup == ["except", "finally"]
    assert stats.retried == 1 and stats.succeeded == 2, stats.as_dict()
    record = await client.aget_result(looping.id, 5)
    assert record.succeeded and record.attempt == 2 and record.result == "second attempt"
    assert (await client.aget_result(next_one.id, 5)).result == "ran"


@pytest.mark.asyncio
async def test_the_attempt_fails_with_time_limit_exceeded_even_if_the_task_swallows_it(
        client: Client) -> None:
    @client.task(name="swallow", timeout=0.2, retries=0, dead_letter=False)
    def swallow() -> str:
        try:
            while True:
                pass
        except TimeLimitExceeded:
            return "carried on"  # cleaned up, and returned: the attempt still failed

    handle = swallow.enqueue()
    stats = await arun_burst(client, concurrency=1, threads=1)
    assert stats.failed == 1
    record = await client.aget_result(handle.id, 5)
    assert record.state == states.FAILED and record.result is None
    assert record.error_type == "TimeLimitExceeded"
    assert record.error_message == "task exceeded its time limit of 0.2 s"
    assert issubclass(TimeLimitExceeded, TimeoutError)  # retry_on/dont_retry_on keep working


@pytest.mark.asyncio
async def test_a_thread_blocked_past_the_grace_makes_the_worker_recycle(client: Client) -> None:
    release = threading.Event()
    done: list[str] = []

    @client.task(name="blocked", timeout=0.3, retries=0, dead_letter=False)
    def blocked() -> None:
        release.wait()  # one C call (a lock): the interrupt waits for it to return
        done.append("blocked returned")

    @client.task(name="neighbour")
    def neighbour() -> str:
        time.sleep(3.0)  # (noqa: sleep) an attempt running beside it: it must finish
        return "finished"

    stuck = blocked.enqueue()
    beside = neighbour.enqueue()
    later = neighbour.enqueue()
    worker = Worker(client, **{**FAST, "concurrency": 2, "threads": 2,
                               "time_limit_grace": 0.3})
    try:
        # Not stopped from outside: it stops by itself, without the lost slot.
        stats = await asyncio.wait_for(worker.run(), 10)
        assert worker.recycled and worker.lost_slot and worker.threads_left == 1
        # The stuck attempt was settled once, as timed out; its neighbour finished.
        # (requeued: the third, fetched and waiting for a slot when the worker stopped)
        assert stats.failed == 1 and stats.succeeded == 1 and stats.requeued == 1, \
            stats.as_dict()
        record = await client.aget_result(stuck.id, 5)
        assert record.state == states.FAILED and record.error_type == "TimeLimitExceeded"
        assert (await client.aget_result(beside.id, 5)).result == "finished"
        # Taken no more work: the third message waits for a fresh worker.
        assert ready_message_ids(client.broker, "default") == [later.id]
        assert pending_count(client.broker, "default") == 0
    finally:
        release.set()
    # Released, the old thread's late result is dropped (the attempt is settled).
    assert (await client.aget_result(stuck.id, 1)).state == states.FAILED


CALLS = 3000


def test_the_interrupt_never_lands_after_the_call_returned(monkeypatch: Any) -> None:
    """The deadline passes as the task returns: the exception is raised inside
    TimeLimit.call (the attempt fails with it) or cleared, never later in the code that
    runs after it (the worker's). A stand-in for the loop interrupts each call as it
    returns, and is slow to raise once it has decided to (the window where a thread that
    returned meanwhile must wait for it, then clear it); a tiny switch interval makes the
    two threads interleave."""
    real_raise = timelimits.raise_in_thread

    def slow_raise(ident: int, exc_type: type[BaseException]) -> bool:
        time.sleep(random.random() * 0.0005)  # (noqa: sleep) the loop, slow to raise
        return real_raise(ident, exc_type)

    monkeypatch.setattr(timelimits, "raise_in_thread", slow_raise)
    loop = asyncio.new_event_loop()
    limits = TimeLimits(loop, 1.0, lambda limit: None)
    errors: list[BaseException] = []
    outcomes: list[str] = []
    # Plain flags, no locks: an exception raised asynchronously can land in a lock's
    # `with` before it is entered, and leave the lock held (as it can in any task).
    returning, finished = [False], [False]
    current: list[Any] = []

    def the_loop() -> None:
        while not finished[0]:
            if returning[0]:
                returning[0] = False
                current[0].interrupt()
            else:
                time.sleep(0)  # (noqa: sleep) let the other thread run

    def run() -> None:
        for n in range(CALLS):
            limit = limits.start(60, None, ("race", "-"), lambda exc: None)
            current[:] = [limit]

            def task(n: int = n) -> str:
                returning[0] = True
                for _ in range(n % 100):  # returns a little later each time
                    pass
                return "returned"

            try:
                outcomes.append(limit.call(task, (), {}))
            except TimeLimitExceeded:
                outcomes.append("exceeded")
            limits.finish(limit)
            try:
                for _ in range(2_000):  # the worker's code, after the attempt: never hit
                    pass
            except BaseException as exc:  # noqa: BLE001 - what the test looks for
                errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threading.Thread(target=the_loop, daemon=True).start()
        worker = threading.Thread(target=run)
        worker.start()
        worker.join(120)
    finally:
        finished[0] = True
        sys.setswitchinterval(interval)
        loop.close()
    assert errors == []
    assert len(outcomes) == CALLS and "exceeded" in outcomes
