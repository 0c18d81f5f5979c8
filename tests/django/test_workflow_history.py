"""Workflows in the task history: each step's row carries its workflow (id, node, place
in the tree) from its message's header, and each workflow gets a WorkflowRecord row from
its own events (started, then its end), which never fold into a step's row."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from blitzq_django.engine.core import events as ev
from blitzq_django.engine.core.message import Message, encode
from blitzq_django.engine.core.workflow import WORKFLOW_HEADER
from blitzq_django.history import merge
from blitzq_django.history.writer import (
    stored_workflows,
    upsert,
    upsert_workflows,
    workflow_changes,
)
from blitzq_django.models import TaskRecord, WorkflowRecord

T0 = 1_700_000_000_000


def _payload(id_: str, header: Any = None) -> bytes:
    headers = {} if header is None else {WORKFLOW_HEADER: header}
    return encode(Message(id=id_, task="t.x", queue="default", args=[1], created_ms=T0,
                          headers=headers))


def _event(n: int, kind: str, id_: str, task: str = "t.x", **fields: Any) -> ev.Event:
    return ev.Event(f"1700000000{n:03d}-0", "default", kind, id_, task, T0 + n, **fields)


def test_a_step_row_carries_its_workflow_and_place() -> None:
    batch = [_event(1, ev.ENQUEUED, "wf1.3", detail=_payload("wf1.3", ["wf1", 3, "1.0"])),
             _event(2, ev.ENQUEUED, "wf1.e", detail=_payload("wf1.e", ["wf1", "e", "e"])),
             _event(3, ev.ENQUEUED, "plain", detail=_payload("plain")),
             _event(4, ev.STARTED, "wf1.3", attempt=1),
             _event(5, ev.SUCCEEDED, "wf1.3", attempt=1, duration_ms=1)]
    changed, _ = merge.fold({}, batch)
    step = changed["wf1.3"]
    assert (step.workflow_id, step.workflow_node, step.workflow_path) == ("wf1", "3", "1.0")
    assert step.state == "succeeded"
    assert (changed["wf1.e"].workflow_id, changed["wf1.e"].workflow_node) == ("wf1", "e")
    assert changed["plain"].workflow_id is None and changed["plain"].workflow_path == ""


@pytest.mark.parametrize("header", ["wf1", ["wf1"], [7, 1, "0"], ["", 1, "0"],
                                    ["x" * 201, 1, "0"], {"id": "wf1"}])
def test_a_header_of_another_shape_is_not_a_workflow(header: Any) -> None:
    changed, _ = merge.fold({}, [_event(1, ev.ENQUEUED, "m", detail=_payload("m", header))])
    assert changed["m"].workflow_id is None


def test_workflow_events_make_workflow_rows_not_step_rows() -> None:
    batch = [_event(1, ev.WORKFLOW_STARTED, "wf1", task="chord"),
             _event(2, ev.ENQUEUED, "wf1.2", detail=_payload("wf1.2", ["wf1", 2, "0.0"])),
             _event(9, ev.WORKFLOW_FAILED, "wf1", task="chord", duration_ms=8,
                    error_type="KeyError")]
    changed, _ = merge.fold({}, batch)
    assert list(changed) == ["wf1.2"]
    workflows = merge.fold_workflows({}, batch)
    row = workflows["wf1"]
    assert (row.kind, row.state, row.queue, row.error_type) == ("chord", "failed", "default",
                                                                "KeyError")
    assert (row.created_ms, row.finished_ms) == (T0 + 1, T0 + 9)


def test_an_end_read_before_the_start_and_repeated_ends_keep_the_first_end() -> None:
    rows: dict[str, merge.WorkflowRow] = {}
    merge.fold_workflows(rows, [_event(5, ev.WORKFLOW_SUCCEEDED, "wf", task="chain",
                                       duration_ms=4)])
    # Written at least once: the start after the end, and the end again, change no outcome.
    merge.fold_workflows(rows, [_event(6, ev.WORKFLOW_STARTED, "wf", task="chain"),
                                _event(7, ev.WORKFLOW_CANCELLED, "wf", task="chain",
                                       duration_ms=6)])
    row = rows["wf"]
    assert (row.state, row.created_ms, row.finished_ms) == ("succeeded", T0 + 1, T0 + 5)
    # A batch read again (a writer that died before its ack) changes nothing.
    assert merge.fold_workflows(rows, [_event(6, ev.WORKFLOW_STARTED, "wf")]) == {}


def test_failures_only_keeps_failed_workflows() -> None:
    batch = [_event(1, ev.WORKFLOW_STARTED, "ok"), _event(2, ev.WORKFLOW_SUCCEEDED, "ok"),
             _event(3, ev.WORKFLOW_STARTED, "bad"),
             _event(4, ev.WORKFLOW_FAILED, "bad", duration_ms=1)]
    assert list(merge.fold_workflows({}, batch, failures_only=True)) == ["bad"]


@pytest.mark.django_db
def test_rows_are_stored_and_read_back() -> None:
    changed, _ = merge.fold({}, [
        _event(1, ev.ENQUEUED, "wf1.1", detail=_payload("wf1.1", ["wf1", 1, "0"]))])
    upsert(list(changed.values()))
    stored = TaskRecord.objects.get(task_id="wf1.1")
    assert (stored.workflow_id, stored.workflow_node, stored.workflow_path) == ("wf1", "1", "0")
    batch = [_event(1, ev.WORKFLOW_STARTED, "wf1", task="chain")]
    upsert_workflows(merge.fold_workflows({}, batch).values())
    rows = stored_workflows(["wf1"])
    end = [_event(2, ev.WORKFLOW_SUCCEEDED, "wf1", task="chain", duration_ms=1)]
    upsert_workflows(merge.fold_workflows(rows, end).values())
    record = WorkflowRecord.objects.get(workflow_id="wf1")
    assert (record.kind, record.state, record.queue, record.is_final) == (
        "chain", "succeeded", "default", True)
    assert record.finished_at is not None and record.created_at < record.finished_at


@pytest.mark.django_db
def test_prune_history_deletes_workflows_that_ended_before_the_cutoff(blitzq_memory: Any
                                                                       ) -> None:
    def flow(workflow_id: str, state: str, days: float | None) -> None:
        now = timezone.now()
        WorkflowRecord.objects.create(
            workflow_id=workflow_id, kind="chain", state=state, queue="default",
            created_at=now - dt.timedelta(days=(days or 0) + 1),
            finished_at=None if days is None else now - dt.timedelta(days=days))

    flow("old-ok", "succeeded", 30)
    flow("old-failed", "failed", 30)
    flow("old-running", "running", None)  # not ended: kept, as an unfinished task is
    flow("new", "succeeded", 1)

    def prune(*args: str) -> dict[str, Any]:
        out = io.StringIO()
        call_command("blitzq", "prune-history", *args, "--json", stdout=out)
        return dict(json.loads(out.getvalue()))

    assert prune("--dry-run")["workflows"] == 2 and WorkflowRecord.objects.count() == 4
    assert prune("--state", "failed")["workflows"] == 1
    assert prune()["workflows"] == 1
    assert sorted(WorkflowRecord.objects.values_list("workflow_id", flat=True)) == [
        "new", "old-running"]


def test_each_workflow_is_started_and_finished_once_in_that_order() -> None:
    rows: dict[str, merge.WorkflowRow] = {}
    first = [_event(1, ev.WORKFLOW_STARTED, "a"), _event(2, ev.WORKFLOW_SUCCEEDED, "b")]
    moved = merge.fold_workflows(rows, first)
    # "b" ended before its start was read: started, then finished, from one batch
    assert [(what, row.workflow_id) for what, row in workflow_changes({}, moved)] == [
        ("started", "a"), ("started", "b"), ("finished", "b")]
    before = {i: row.state for i, row in rows.items()}
    moved = merge.fold_workflows(rows, [_event(3, ev.WORKFLOW_STARTED, "b"),
                                        _event(4, ev.WORKFLOW_FAILED, "a"),
                                        _event(5, ev.WORKFLOW_SUCCEEDED, "b")])
    assert [(what, row.workflow_id) for what, row in workflow_changes(before, moved)] == [
        ("finished", "a")]
