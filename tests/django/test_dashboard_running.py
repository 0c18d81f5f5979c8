"""The dashboard's "Running now" list (issue 19, item 5): every attempt running now, with
its task, id, queue, worker, start and progress, with TRACK_STATE at its default (off);
over the WebSocket and the HTTP fallback, from the workers' running indexes."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.test import Client as DjangoClient

from blitzq_django import conf
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client, current_task
from blitzq_django.engine.core.running import Running
from blitzq_django.engine.progress import Progress
from blitzq_django.web.live import aggregator
from blitzq_django.web.live.aggregator import Tally
from tests.support.waiting import await_until, wait_until

from .conftest import running_worker
from .test_dashboard import DASHBOARD, communicator, session_cookie, staff, stop_aggregator

__all__ = ["stop_aggregator"]  # a fixture of this module's tests

pytestmark = [pytest.mark.django_db(transaction=True)]

GATE = threading.Event()


@blitzq_task(name="dashboard.tests.report")
def report(rows: int) -> int:
    current_task().progress(4, rows, note="row 4")
    GATE.wait(20)
    return rows


def entry(n: int, started_ms: int) -> Running:
    return Running(id=f"id-{n}", task="t", queue="default", worker="w-1", attempt=1,
                   started_ms=started_ms)


def test_tally_lists_the_oldest_running_and_sends_them_when_they_change() -> None:
    tally = Tally()
    tally.delta(1_000)
    running = [entry(n, 1_000 + n) for n in range(aggregator.RUNNING_SHOWN + 5)]
    shown = running[:aggregator.RUNNING_SHOWN]
    progress = [Progress(1, 4, "a note")] + [None] * (len(shown) - 1)
    tally.set_running(running, progress)
    snap = tally.snapshot(2_000)
    assert snap["running_total"] == aggregator.RUNNING_SHOWN + 5
    assert len(snap["running"]) == aggregator.RUNNING_SHOWN
    first = snap["running"][0]
    assert (first["id"], first["task"], first["queue"], first["worker"], first["started_ms"]) \
        == ("id-0", "t", "default", "w-1", 1_000)
    assert first["progress"]["fraction"] == 0.25 and first["progress"]["note"] == "a note"
    assert snap["running"][1]["progress"] is None
    delta = tally.delta(2_000)
    assert len(delta["running"]) == aggregator.RUNNING_SHOWN
    tally.set_running(running, progress)  # nothing changed: not sent again
    assert "running" not in tally.delta(2_500)
    tally.set_running([], [])
    assert tally.delta(3_000)["running"] == [] and tally.snapshot(3_000)["running_total"] == 0


def _reported(client: Client, task_id: str) -> bool:
    record = client.inspect(task_id)
    return record is not None and record.state == "running" and \
        client.progress(task_id) is not None


@pytest.mark.asyncio
async def test_the_socket_lists_a_running_task_with_its_progress(
        blitzq_redis: Client, stop_aggregator: None) -> None:
    from asgiref.sync import sync_to_async

    assert conf.get_settings()["TRACK_STATE"] is False
    viewer = await sync_to_async(staff)("viewer", "view_queueoverview", "view_taskrecord")
    cookie = await sync_to_async(session_cookie)(viewer)
    GATE.clear()
    handle = await sync_to_async(report.enqueue)(8)
    with running_worker(blitzq_redis) as worker:
        try:
            await await_until(lambda: _reported(blitzq_redis, handle.id), 10,
                              message="the task to run and report")
            socket = communicator(cookie)
            assert (await socket.connect(timeout=5))[0]
            seen: dict[str, Any] = {}

            async def listed() -> bool:
                message = await socket.receive_json_from(timeout=5)
                for row in message.get("running") or []:
                    if row["id"] == handle.id and row["progress"]:
                        seen.update(row)
                return bool(seen)

            await await_until(listed, 10, message="the task in the running list")
            assert (seen["task"], seen["queue"], seen["worker"], seen["attempt"]) == \
                ("dashboard.tests.report", "default", worker.name, 1)
            assert seen["started_ms"] > 0
            assert seen["progress"]["done"] == 4 and seen["progress"]["fraction"] == 0.5
            assert seen["progress"]["note"] == "row 4"
            GATE.set()

            async def gone() -> bool:
                message = await socket.receive_json_from(timeout=5)
                return "running" in message and not any(
                    r["id"] == handle.id for r in message["running"])

            await await_until(gone, 10, message="the task to leave the list")
            await socket.disconnect()
        finally:
            GATE.set()


def test_the_http_fallback_lists_running_tasks(blitzq_redis: Client) -> None:
    web = DjangoClient()
    web.force_login(staff("ops", "view_queueoverview"))
    GATE.clear()
    handle = report.enqueue(8)
    with running_worker(blitzq_redis):
        try:
            wait_until(lambda: _reported(blitzq_redis, handle.id), 10,
                       message="the task to run and report")
            data = wait_until(lambda: (d := web.get(DASHBOARD + "data/").json())["running"]
                              and d, 10, message="a snapshot listing it")
            (row,) = data["running"]
            assert row["id"] == handle.id and row["progress"]["done"] == 4
            assert data["running_total"] == 1
        finally:
            GATE.set()
