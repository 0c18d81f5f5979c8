"""A task's last progress report is written before its outcome (engine/progress.py):
whoever is told the task ended (get_result, a follower's final snapshot) reads that
report, not one up to MIN_INTERVAL_S older. Reports come faster than the rate limit
here, so without the ordering the last one is still waiting when the outcome lands."""

from __future__ import annotations

import asyncio

import pytest

from blitzq_django.engine import Client, TaskCancelled, current_task
from blitzq_django.engine.core import record as states

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
