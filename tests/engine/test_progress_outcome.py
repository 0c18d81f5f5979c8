"""A task's last progress report is written before its outcome (engine/progress.py):
whoever is told the task ended (get_result, a follower's final snapshot) reads that
report, not one up to MIN_INTERVAL_S older. Reports come faster than the rate limit
here, so without the ordering the last one is still waiting when the outcome lands."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from blitzq_django.engine import Client, RedisBroker, TaskCancelled, current_task
from blitzq_django.engine.core import record as states
from blitzq_django.engine.progress import ProgressReporter, make

from .helpers import background_worker

REPORTS = 50


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["async", "def"])
async def test_the_last_report_is_written_before_the_outcome(client: Client,
                                                             kind: str) -> None:
    def report_all() -> int:
        task = current_task()
        assert task is not None
        for done in range(1, REPORTS + 1):  # the first is written, the rest wait their turn
            task.progress(done, REPORTS, note=f"{done} of {REPORTS}")
        return REPORTS

    if kind == "async":
        @client.task(name="reports")
        async def reports() -> int:
            return report_all()
    else:
        @client.task(name="reports")
        def reports() -> int:
            return report_all()

    handle = await reports.aenqueue()
    async with background_worker(client):
        assert await handle.aresult(timeout=10) == REPORTS
        last = await handle.aprogress()  # read at once: no waiting for a late write
    assert last is not None
    assert (last.done, last.total, last.note) == (REPORTS, REPORTS, f"{REPORTS} of {REPORTS}")


@pytest.mark.asyncio
async def test_a_cancelled_task_keeps_its_last_report(client: Client) -> None:
    reported = asyncio.Event()

    @client.task(name="stuck")
    async def stuck() -> None:
        task = current_task()
        assert task is not None
        task.progress(1, 3)  # written at once
        task.progress(2, 3)  # waits up to MIN_INTERVAL_S behind the first
        reported.set()
        await asyncio.Event().wait()  # until cancel() interrupts it

    handle = await stuck.aenqueue()
    async with background_worker(client):
        await asyncio.wait_for(reported.wait(), 5)
        await handle.acancel()
        with pytest.raises(TaskCancelled):
            await handle.aresult(timeout=10)
        last = await handle.aprogress()
    record = await client.afinal_record(handle.id, timeout=1)
    assert record.state == states.CANCELLED
    assert last is not None and (last.done, last.total) == (2, 3)


class HeldFirstWrite(RedisBroker):
    """The real broker, whose first progress write is held back before it is sent (a
    slow connection) until the test releases it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    @property
    def aio(self) -> Any:
        return _HoldFirst(super().aio, self)


class _HoldFirst:
    def __init__(self, store: Any, broker: HeldFirstWrite) -> None:
        self._store, self._broker = store, broker

    def __getattr__(self, name: str) -> Any:  # everything but run_many, as it is
        return getattr(self._store, name)

    async def run_many(self, ops: Any) -> Any:
        if not self._broker.holding.is_set():
            self._broker.holding.set()
            await self._broker.release.wait()
        return await self._store.run_many(ops)


@pytest.mark.asyncio
async def test_an_older_write_on_a_slow_connection_does_not_land_last(
        redis_broker: RedisBroker) -> None:
    # before_outcome() starts the last write ahead of the rate limit, while an older write
    # of the same message may still be on its way: the older one must not land last.
    broker = HeldFirstWrite(redis_broker.url, namespace=redis_broker.keys.namespace)
    client = Client(broker)
    reporter = ProgressReporter(broker, asyncio.get_running_loop())
    try:
        reporter.report("default", "m1", make(1, 2))  # written at once: held back
        await asyncio.wait_for(broker.holding.wait(), 5)
        reporter.report("default", "m1", make(2, 2))  # waits its turn (rate limit)
        last = reporter.before_outcome("default", "m1")
        assert last is not None
        # Given time, a write that does not wait for the older one would be done by now.
        await asyncio.wait([last], timeout=0.5)
        broker.release.set()
        await asyncio.wait_for(last, 5)
        assert reporter.before_outcome("default", "m1") is None  # nothing left in flight
        written = await client.aprogress("m1")
    finally:
        broker.release.set()
        await broker.aclose()
    assert written is not None and written.done == 2
