"""Folding a message's events into its TaskRecord row: pure code, no database, no Redis.

A row is the sum of its events, applied oldest first. Each event carries its cursor
(stream entry id); a row remembers the last one applied (``last_event``), and an event
at or before it changes nothing. So a batch read again after a crash (the writer died
between its commit and its ack) leaves every row as it was.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..engine.core import events as ev
from ..engine.core.message import unpack
from ..engine.core.workflow import FINAL as WORKFLOW_FINAL
from ..engine.core.workflow import RUNNING as WORKFLOW_RUNNING
from ..engine.core.workflow import WORKFLOW_HEADER

#: Timeline entries kept per row (the newest): a message retried thousands of times
#: must not grow its row without bound.
TIMELINE_MAX = 200
#: Events that make a row in "failures" mode (then every later event of it is kept).
FAILURE_KINDS = frozenset({ev.FAILED, ev.RETRIED, ev.DEAD_LETTERED})

#: The row state each event kind leads to; recovered keeps the state it found.
STATE_OF = {
    ev.ENQUEUED: "queued", ev.SCHEDULED: "scheduled", ev.REPLAYED: "queued",
    ev.REQUEUED: "queued", ev.STARTED: "running", ev.RETRIED: "retrying",
    ev.SUCCEEDED: "succeeded", ev.FAILED: "failed", ev.DEAD_LETTERED: "dead_lettered",
    ev.CANCELLED: "cancelled", ev.EXPIRED: "expired",
}
ENQUEUE_KINDS = frozenset({ev.ENQUEUED, ev.SCHEDULED, ev.REPLAYED})

# Column sizes of TaskRecord (longer values are cut, never refused: one odd value must
# not stop the writer).
MAX_TASK_ID = 200  # the engine's longest task id too (core/validate.py)
_CUT = {"task_name": 255, "queue": 100, "worker": 255, "error_type": 255,
        "idempotency_key": 512, "workflow_node": 20, "workflow_path": 255, "kind": 10}
#: The message's headers (core/message.py's positions), and the workflow's among them.
_HEADERS = 11


def cursor_key(cursor: str) -> tuple[int, int]:
    """A stream entry id as numbers ("1700000000000-5" -> (1700000000000, 5))."""
    ms, _, seq = cursor.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return (0, 0)


def clean_text(text: Any, most: int | None = None) -> str:
    """A str the database takes: PostgreSQL refuses NUL in text and JSON."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text[:most] if most is not None else text


def jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON: the message types JSON lacks become strings (datetimes and
    dates ISO 8601, Decimal and UUID as text, bytes as base64), tuples lists, keys str."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):  # PostgreSQL's JSON has no NaN nor Infinity
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return clean_text(value)
    if depth > 100:
        return "..."
    if isinstance(value, dict):
        return {clean_text(k if isinstance(k, str) else str(k)): jsonable(v, depth + 1)
                for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    return clean_text(repr(value))


def aware(ms: int | None) -> dt.datetime | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


@dataclass
class Row:
    """The fields of one TaskRecord as the writer builds them (a plain value, so merging
    costs no model machinery; ``to_model`` makes the instance)."""

    task_id: str
    queue: str
    task_name: str = ""
    state: str = "queued"
    attempt: int = 1
    args: Any = field(default_factory=list)
    kwargs: Any = field(default_factory=dict)
    idempotency_key: str | None = None
    result: Any = None
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    created_ms: int | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    worker: str = ""
    timeline: list[Any] = field(default_factory=list)
    last_event: str = ""
    #: a succeeded attempt whose result is to be read from its record: its attempt
    wants_result: int | None = None
    #: the encoded message, kept for Retry (None: not kept; see TaskRecord.message)
    message: bytes | None = None
    #: the workflow of a step (its "workflow" header): id, node, path; None: no workflow
    workflow_id: str | None = None
    workflow_node: str = ""
    workflow_path: str = ""


Redactor = Callable[[str, Any, Any], tuple[Any, Any]]


def _no_redaction(task: str, args: Any, kwargs: Any) -> tuple[Any, Any]:
    return args, kwargs


def _message_fields(row: Row, payload: Any, redact: Redactor) -> None:
    """Arguments, idempotency key and creation time from an event's encoded message."""
    if isinstance(payload, int) and not isinstance(payload, bool):
        row.args, row.kwargs = [f"(not kept: the message is {payload} bytes)"], {}
        row.message = None
        return
    if not isinstance(payload, bytes | bytearray) or len(payload) > ev.DETAIL_MAX_MESSAGE:
        return  # nothing, or not what a broker writes (it writes the size of a larger one)
    # The message's fields by position (core/message.py): [v, id, task, queue, args,
    # kwargs, attempt, created_ms, eta_ms, timeout, idempotency_key, ...]. Unpacked
    # rather than decode()d: a third of the cost, and it is only shown (at most
    # DETAIL_MAX_MESSAGE bytes, so bounded all the same).
    try:
        fields = unpack(bytes(payload))
        task, args, kwargs, created_ms = fields[2], fields[4], fields[5], fields[7]
        key = fields[10] if len(fields) > 10 else None
        headers = fields[_HEADERS] if len(fields) > _HEADERS else None
    except Exception:  # noqa: BLE001 - a malformed message: keep what the events say
        return
    if isinstance(headers, dict):
        _workflow_fields(row, headers.get(WORKFLOW_HEADER))
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return
    shown_args, shown_kwargs = redact(task if isinstance(task, str) else "", args, kwargs)
    # The message itself only when nothing in it is masked: a secret stays out of the
    # table (and such a row offers no Retry).
    row.message = bytes(payload) if (shown_args, shown_kwargs) == (args, kwargs) else None
    row.args, row.kwargs = jsonable(shown_args), jsonable(shown_kwargs)
    row.idempotency_key = (clean_text(key, _CUT["idempotency_key"])
                           if isinstance(key, str) and key else None)
    if isinstance(created_ms, int) and (row.created_ms is None
                                        or row.created_ms > created_ms):
        row.created_ms = created_ms


def _workflow_fields(row: Row, header: Any) -> None:
    """The workflow of a step, from its header [workflow id, node, path]; anything else
    (not a step, or a header of another shape) leaves the row as it is."""
    if not (isinstance(header, list | tuple) and len(header) >= 3):
        return
    workflow_id, node, path = header[0], header[1], header[2]
    if not isinstance(workflow_id, str) or not workflow_id or len(workflow_id) > MAX_TASK_ID:
        return
    row.workflow_id = clean_text(workflow_id)
    row.workflow_node = clean_text(node, _CUT["workflow_node"])
    row.workflow_path = clean_text(path, _CUT["workflow_path"])


def apply(row: Row, event: ev.Event, redact: Redactor = _no_redaction) -> bool:
    """Fold one event into ``row``; False (nothing changed) when it was applied before."""
    if row.last_event and cursor_key(event.cursor) <= cursor_key(row.last_event):
        return False
    row.last_event = event.cursor
    kind = event.kind
    if event.task:
        row.task_name = clean_text(event.task, _CUT["task_name"])
    if event.attempt is not None:
        row.attempt = event.attempt
    if event.worker:
        row.worker = clean_text(event.worker, _CUT["worker"])
    if row.created_ms is None:
        row.created_ms = event.time_ms
    state = STATE_OF.get(kind)
    if state is not None:
        row.state = state
    detail = event.detail
    if kind in ENQUEUE_KINDS:
        if kind == ev.REPLAYED:  # a new life: the old outcome is history (the timeline)
            row.finished_ms = row.started_ms = None
            row.result, row.wants_result = None, None
        if detail is not None:
            _message_fields(row, detail, redact)
    elif kind == ev.STARTED:
        row.started_ms = event.time_ms
        row.finished_ms = None
    elif kind in FAILURE_KINDS or kind in ev.TERMINAL:
        row.error_type = clean_text(event.error_type, _CUT["error_type"]) if (
            event.error_type or kind in FAILURE_KINDS) else row.error_type
        if isinstance(detail, list) and len(detail) >= 2:
            row.error_message = clean_text(detail[0])
            row.traceback = clean_text(detail[1])
            if len(detail) > 2 and detail[2] is not None and not row.args and not row.kwargs:
                _message_fields(row, detail[2], redact)  # a row first seen failing
        elif kind in FAILURE_KINDS:
            row.error_message = row.traceback = ""
        if kind in ev.TERMINAL:
            row.finished_ms = event.time_ms
            if event.duration_ms is not None and row.started_ms is None:
                row.started_ms = event.time_ms - event.duration_ms
        if kind == ev.SUCCEEDED:
            row.error_type = row.error_message = row.traceback = ""
            row.wants_result = event.attempt or row.attempt
    # Cleaned like the columns: PostgreSQL's JSON refuses NUL too (an exception class
    # whose __qualname__ holds one).
    row.timeline.append([kind if kind in ev.KINDS else clean_text(kind, 32), event.time_ms,
                         event.attempt,
                         None if event.worker is None else clean_text(event.worker),
                         event.duration_ms,
                         None if event.error_type is None else clean_text(event.error_type)])
    if len(row.timeline) > TIMELINE_MAX:
        del row.timeline[:len(row.timeline) - TIMELINE_MAX]
    return True


def fold(rows: dict[str, Row], batch: Iterable[ev.Event], *, failures_only: bool = False,
         redact: Redactor = _no_redaction) -> tuple[dict[str, Row], int]:
    """Fold a batch of events (stream order) into ``rows`` (task id -> Row, the rows
    already stored for the batch's ids). Returns the rows that changed, by task id, and
    how many events were skipped (ids too long for the table).

    ``failures_only``: an id without a stored row gets one only when one of its events
    in the batch is a failure (failed, retried, dead_lettered); its earlier events in the
    batch are folded too.
    """
    by_id: dict[str, list[ev.Event]] = {}
    for event in batch:
        if event.kind in ev.WORKFLOW_KINDS:  # a workflow's, not a message's: fold_workflows
            continue
        by_id.setdefault(event.id, []).append(event)
    changed: dict[str, Row] = {}
    skipped = 0
    for task_id, found in by_id.items():
        if len(task_id) > MAX_TASK_ID:
            skipped += len(found)
            continue
        row = rows.get(task_id)
        if row is None:
            if failures_only and not any(e.kind in FAILURE_KINDS for e in found):
                continue
            row = Row(task_id=clean_text(task_id), queue=found[0].queue)
        touched = False
        for event in found:
            touched = apply(row, event, redact) or touched
        if touched:
            rows[task_id] = changed[task_id] = row
    return changed, skipped


# -- workflows ---------------------------------------------------------------------------

#: A workflow's state after each of its events.
WORKFLOW_STATE_OF = {ev.WORKFLOW_STARTED: WORKFLOW_RUNNING,
                     **{kind: state for state, kind in ev.WORKFLOW_END.items()}}


@dataclass
class WorkflowRow:
    """The fields of one WorkflowRecord as the writer builds them."""

    workflow_id: str
    queue: str
    kind: str = ""
    state: str = WORKFLOW_RUNNING
    created_ms: int | None = None
    finished_ms: int | None = None
    error_type: str = ""
    last_event: str = ""


def apply_workflow(row: WorkflowRow, event: ev.Event) -> bool:
    """Fold one workflow event into ``row``; False when it changes nothing.

    Each event is written at least once and its end may be read before its start (the
    start event is written after the first steps are enqueued, and they may finish
    first): a final state is never taken back, and a repeated end keeps the first."""
    if row.last_event and cursor_key(event.cursor) <= cursor_key(row.last_event):
        return False
    row.last_event = event.cursor
    if event.task:
        row.kind = clean_text(event.task, _CUT["kind"])
    state = WORKFLOW_STATE_OF.get(event.kind)
    if event.kind == ev.WORKFLOW_STARTED:
        if row.created_ms is None or event.time_ms < row.created_ms:
            row.created_ms = event.time_ms
        return True
    if state is None or row.state in WORKFLOW_FINAL:
        return True
    row.state = state
    row.finished_ms = event.time_ms
    if event.duration_ms is not None:
        row.created_ms = event.time_ms - event.duration_ms
    elif row.created_ms is None:
        row.created_ms = event.time_ms
    if event.error_type:
        row.error_type = clean_text(event.error_type, _CUT["error_type"])
    return True


def fold_workflows(rows: dict[str, WorkflowRow], batch: Iterable[ev.Event], *,
                   failures_only: bool = False) -> dict[str, WorkflowRow]:
    """Fold a batch's workflow events (the others are left out) into ``rows`` (workflow
    id -> WorkflowRow, those stored). Returns the rows that changed.

    ``failures_only``: a workflow without a stored row gets one only when it failed."""
    changed: dict[str, WorkflowRow] = {}
    for event in batch:
        if event.kind not in ev.WORKFLOW_KINDS or len(event.id) > MAX_TASK_ID:
            continue
        row = rows.get(event.id)
        if row is None:
            if failures_only and event.kind != ev.WORKFLOW_FAILED:
                continue
            row = WorkflowRow(workflow_id=clean_text(event.id), queue=event.queue)
        if apply_workflow(row, event):
            rows[event.id] = changed[event.id] = row
    return changed
