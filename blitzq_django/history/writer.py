"""The history writer: the engine's per-queue events, folded into TaskRecord rows.

Per queue it serves, the writer reads the events stream through a consumer group
(``GROUP``), a batch at a time; it loads the stored rows of the batch's ids, folds the
events into them (``merge.fold``), upserts the changed rows in one statement
(``bulk_create(update_conflicts=True)`` on ``task_id``) in one transaction, and only
after the commit acknowledges the events. A writer killed anywhere re-reads its
unacknowledged events when it starts again (they are pending for the group's one
consumer name, ``CONSUMER``); rows remember the last event applied, so the re-read
batch changes nothing already written. No transition is lost, none applied twice.

Workflows' own events (``events.WORKFLOW_KINDS``) fold into WorkflowRecord rows, keyed by
workflow id, in the same transaction (``merge.fold_workflows``); after the ack, the
workflow_started and workflow_finished signals are sent for the rows that started or
ended in the batch (signals.py).

One writer per queue at a time: the broker's lease (``broker.lease(queue, "history",
...)``; on Redis ``bq:{ns:queue}:hl``, a token with a TTL, renewed every round and
checked again just before each commit) elects it; other
writers (every ``runworker`` process runs one, and ``manage.py runhistory``) stand by
and take over within the lease TTL when it dies. Two writers folding the same row at
once would each write their own merge, and the second would drop the first's events.

The worker's hot path never waits on any of this: the events are written by the
scripts that make the transitions, and the writer runs on a thread (or a process) of
its own.

Complete, or it says so (health.py). The scripts cap the events stream only at a hard
cap (``EVENTS_HARD_MAXLEN``); each read of the writer (events_read.lua) trims it to the
newest ``keep_events`` (``EVENTS_MAXLEN``) and what the writer has not read yet, so a
writer that falls behind under load finds its events still there. Events the hard cap
trimmed before the writer read them are counted by that same read, and logged at ERROR. A batch the
database refuses is split in halves, down to the one event it refuses: that event is
recorded as unwritable (logged at ERROR, counted) and acknowledged, and the rest goes on.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    connections,
    transaction,
)
from django.utils import timezone

from .. import redaction, signals
from ..engine import Client
from ..engine.core import events as ev
from ..engine.core.record import Record
from ..engine.core.redact import redact as redact_args
from ..engine.core.redact import redact_value
from ..engine.errors import BrokerError
from . import health, merge
from .health import GROUP
from .merge import Row

log = logging.getLogger("blitzq.history")

CONSUMER = "writer"  # one name: whoever holds the lease reads its predecessor's pending
BATCH = 2000  # events per read
LEASE_TTL_MS = 15_000
IDLE_BLOCK_MS = 1000  # a round that found nothing waits this long (split over queues)

FIELDS = ("idempotency_key", "task_name", "queue", "state", "attempt", "args", "kwargs",
          "result", "error_type", "error_message", "traceback", "created_at", "started_at",
          "finished_at", "worker", "timeline", "last_event", "updated_at", "message",
          "workflow_id", "workflow_node", "workflow_path")


class LeaseLost(Exception):
    """Another writer holds the queue now: the batch is rolled back, not acknowledged."""


class Refused(Exception):
    """The database (or the conversion to its values) refused a batch's transaction
    (``_refused``): it is rolled back, and split (``HistoryWriter.write``)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


@dataclass
class Stats:
    events: int = 0
    rows: int = 0
    batches: int = 0
    skipped: int = 0
    #: events trimmed from the stream before this writer read them (counted by it)
    lost: int = 0
    #: events the database refused even alone (recorded in the queue's health)
    unwritable: int = 0
    #: trims of unread events of unknown size (Redis before 7 cannot count them)
    gaps: int = 0


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` may say the database (or the conversion to its values) refuses
    this data, as opposed to something being away: a connection lost, Redis down, the
    lease lost. Only a refusal is worth splitting a batch for; the others are retried
    whole. (A PL/pgSQL RAISE arrives as a ProgrammingError, like a missing table: the
    writer tells them apart by asking the table, _table_answers.)"""

    return not isinstance(exc, LeaseLost | BrokerError | OperationalError
                          | InterfaceError | OSError)


#: The stored fields a batch folds its events into (read as values: no model instances).
_STORED = ("task_id", "queue", "task_name", "state", "attempt", "args", "kwargs",
           "idempotency_key", "result", "error_type", "error_message", "traceback",
           "created_at", "started_at", "finished_at", "worker", "timeline", "last_event",
           "message", "workflow_id", "workflow_node", "workflow_path")


def _row(stored: dict[str, Any]) -> Row:
    def ms(value: Any) -> int | None:
        return int(value.timestamp() * 1000) if value is not None else None

    return Row(task_id=stored["task_id"], queue=stored["queue"],
               task_name=stored["task_name"], state=stored["state"],
               attempt=stored["attempt"], args=stored["args"], kwargs=stored["kwargs"],
               idempotency_key=stored["idempotency_key"], result=stored["result"],
               error_type=stored["error_type"], error_message=stored["error_message"],
               traceback=stored["traceback"], created_ms=ms(stored["created_at"]),
               started_ms=ms(stored["started_at"]), finished_ms=ms(stored["finished_at"]),
               worker=stored["worker"], timeline=list(stored["timeline"] or []),
               last_event=stored["last_event"],
               message=None if stored["message"] is None else bytes(stored["message"]),
               workflow_id=stored["workflow_id"], workflow_node=stored["workflow_node"],
               workflow_path=stored["workflow_path"])


def _model(row: Row) -> Any:
    # lazy: app loading
    from ..models import TaskRecord

    return TaskRecord(task_id=row.task_id, idempotency_key=row.idempotency_key,
                      task_name=row.task_name, queue=row.queue, state=row.state,
                      attempt=row.attempt, args=row.args, kwargs=row.kwargs,
                      result=row.result, error_type=row.error_type,
                      error_message=row.error_message, traceback=row.traceback,
                      created_at=merge.aware(row.created_ms),
                      started_at=merge.aware(row.started_ms),
                      finished_at=merge.aware(row.finished_ms), worker=row.worker,
                      timeline=row.timeline, last_event=row.last_event, message=row.message,
                      workflow_id=row.workflow_id, workflow_node=row.workflow_node,
                      workflow_path=row.workflow_path)


def upsert(rows: Sequence[Row]) -> None:
    """Insert or update ``rows`` by task id, in the caller's transaction: one
    ``bulk_create(update_conflicts=True)``; on PostgreSQL a COPY into a temporary table
    and one ``INSERT ... SELECT ... ON CONFLICT (task_id) DO UPDATE`` instead (the same
    statement, without building and quoting a parameter per value: about twice the rows/s,
    bench/history_writer.py)."""

    # lazy: app loading
    from ..models import TaskRecord

    if connection.vendor == "postgresql" and PG_COPY:
        _pg_upsert(connection, rows)
        return
    if connection.vendor == "sqlite":
        _sqlite_upsert(connection, rows)
        return
    TaskRecord.objects.bulk_create([_model(row) for row in rows], batch_size=1000,
                                   update_conflicts=True, unique_fields=["task_id"],
                                   update_fields=list(FIELDS))


#: Use the COPY upsert on PostgreSQL (False: bulk_create there too).
PG_COPY = True
_BATCH_TABLE = "blitzq_history_batch"


def _pg_upsert(connection: Any, rows: Sequence[Row]) -> None:
    # lazy: app loading
    from ..models import TaskRecord

    table = connection.ops.quote_name(TaskRecord._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(c) for c in ("task_id", *FIELDS))
    updates = ", ".join(f"{connection.ops.quote_name(c)} = EXCLUDED.{connection.ops.quote_name(c)}"
                        for c in FIELDS)
    now = timezone.now()
    dumps = json.dumps
    aware = merge.aware
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {_BATCH_TABLE} ON COMMIT "
                       f"DELETE ROWS AS SELECT {columns} FROM {table} WITH NO DATA")
        with cursor.cursor.copy(f"COPY {_BATCH_TABLE} ({columns}) FROM STDIN") as copy:
            for r in rows:  # the order of FIELDS
                copy.write_row((r.task_id, r.idempotency_key, r.task_name, r.queue, r.state,
                                r.attempt, dumps(r.args), dumps(r.kwargs),
                                None if r.result is None else dumps(r.result), r.error_type,
                                r.error_message, r.traceback, aware(r.created_ms),
                                aware(r.started_ms), aware(r.finished_ms), r.worker,
                                dumps(r.timeline), r.last_event, now, r.message,
                                r.workflow_id, r.workflow_node, r.workflow_path))
        cursor.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {_BATCH_TABLE} "
                       f"ON CONFLICT (task_id) DO UPDATE SET {updates}")
        cursor.execute(f"TRUNCATE {_BATCH_TABLE}")


def _sqlite_upsert(connection: Any, rows: Sequence[Row]) -> None:
    """bulk_create(update_conflicts=True)'s statement, ``INSERT ... ON CONFLICT (task_id)
    DO UPDATE``, with one ``executemany``: the values adapted as the fields would adapt
    them, without building a model and a placeholder per value (in a busy runworker the
    ORM's compiler took most of the writer's time, and the writer is a thread beside the
    worker: bench/history_writer.py)."""

    # lazy: app loading
    from ..models import TaskRecord

    quote = connection.ops.quote_name
    table = quote(TaskRecord._meta.db_table)
    names = ("task_id", *FIELDS)
    columns = ", ".join(quote(c) for c in names)
    updates = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in FIELDS)
    placeholders = ", ".join(["%s"] * len(names))
    dumps = json.dumps
    # The field's own preparation: aware or naive by USE_TZ, then the backend's format
    # (given the connection itself: the proxy looks it up again on every access).
    prepare = TaskRecord._meta.get_field("created_at").get_db_prep_save
    wrapper = connections[DEFAULT_DB_ALIAS]

    def when(value: Any) -> Any:
        return prepare(value, wrapper)

    aware = merge.aware
    now = when(timezone.now())
    # Times of one batch repeat (tasks that start and end in the same millisecond):
    # each is prepared once.
    prepared: dict[int, Any] = {}

    def at(ms: int | None) -> Any:
        if ms is None:
            return None
        value = prepared.get(ms)
        if value is None:
            value = prepared[ms] = when(aware(ms))
        return value

    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) "
            f"ON CONFLICT ({quote('task_id')}) DO UPDATE SET {updates}",
            [(r.task_id, r.idempotency_key, r.task_name, r.queue, r.state, r.attempt,
              dumps(r.args), dumps(r.kwargs), None if r.result is None else dumps(r.result),
              r.error_type, r.error_message, r.traceback, at(r.created_ms),
              at(r.started_ms), at(r.finished_ms), r.worker, dumps(r.timeline),
              r.last_event, now, r.message, r.workflow_id, r.workflow_node,
              r.workflow_path) for r in rows])


#: The columns of a WorkflowRecord the writer writes (its workflow id aside).
WORKFLOW_FIELDS = ("kind", "state", "queue", "created_at", "finished_at", "error_type",
                   "last_event", "updated_at")


def stored_workflows(ids: Sequence[str]) -> dict[str, merge.WorkflowRow]:
    """The stored WorkflowRecord rows of ``ids``, as values."""
    # lazy: app loading
    from ..models import WorkflowRecord

    def ms(value: Any) -> int | None:
        return int(value.timestamp() * 1000) if value is not None else None

    return {r["workflow_id"]: merge.WorkflowRow(
        workflow_id=r["workflow_id"], queue=r["queue"], kind=r["kind"], state=r["state"],
        created_ms=ms(r["created_at"]), finished_ms=ms(r["finished_at"]),
        error_type=r["error_type"], last_event=r["last_event"])
        for r in WorkflowRecord.objects.filter(workflow_id__in=ids).values(
            "workflow_id", *WORKFLOW_FIELDS)}


def upsert_workflows(rows: Iterable[merge.WorkflowRow]) -> None:
    """Insert or update WorkflowRecord rows by workflow id (a few per batch at most: two
    events per workflow, against one per step and attempt, so the ORM's statement)."""
    # lazy: app loading
    from ..models import WorkflowRecord

    models = [WorkflowRecord(workflow_id=r.workflow_id, kind=r.kind, state=r.state,
                             queue=r.queue, created_at=merge.aware(r.created_ms),
                             finished_at=merge.aware(r.finished_ms),
                             error_type=r.error_type, last_event=r.last_event)
              for r in rows]
    if models:
        WorkflowRecord.objects.bulk_create(models, update_conflicts=True,
                                           unique_fields=["workflow_id"],
                                           update_fields=list(WORKFLOW_FIELDS))


def workflow_changes(before: dict[str, str], moved: dict[str, merge.WorkflowRow]
                     ) -> list[tuple[str, merge.WorkflowRow]]:
    """What a batch did to workflows: ("started", row) for each new row, ("finished", row)
    for each row that became final (a start read after its end sends both, in order)."""
    out: list[tuple[str, merge.WorkflowRow]] = []
    for workflow_id, row in moved.items():
        was = before.get(workflow_id)
        if was is None:
            out.append(("started", row))
        if row.state != merge.WORKFLOW_RUNNING and was in (None, merge.WORKFLOW_RUNNING):
            out.append(("finished", row))
    return out


def send_workflow_signals(changes: Sequence[tuple[str, merge.WorkflowRow]]) -> None:
    """workflow_started and workflow_finished (signals.py), after the batch committed."""
    for what, row in changes:
        started = merge.aware(row.created_ms)
        if what == "started":
            signals.send_workflow_started(workflow_id=row.workflow_id, kind=row.kind,
                                          queue=row.queue, state=row.state,
                                          started_at=started)
        else:
            signals.send_workflow_finished(workflow_id=row.workflow_id, kind=row.kind,
                                           queue=row.queue, state=row.state,
                                           started_at=started,
                                           finished_at=merge.aware(row.finished_ms),
                                           error_type=row.error_type)


def read_records(client: Client, queue: str, ids: Sequence[str]) -> list[Record | None]:
    """The records of ``ids``, read in one round trip per 1000 (``broker.records``)."""
    out: list[Record | None] = []
    for data in client.broker.records(queue, ids):
        try:
            out.append(Record.from_bytes(data) if data else None)
        except Exception:  # noqa: BLE001 - an unreadable record: no result, row kept
            out.append(None)
    return out


class HistoryWriter:
    """Writes the history of ``queues``; ``run(stop)`` until ``stop`` is set."""

    def __init__(self, client: Client, queues: Sequence[str], mode: str = "all", *,
                 batch: int = BATCH, lease_ttl_ms: int = LEASE_TTL_MS,
                 name: str | None = None,
                 redact: merge.Redactor | None = None,
                 redact_result: Callable[[Any], Any] | None = None,
                 keep_events: int | None = None) -> None:
        if mode not in ("all", "failures"):
            raise ValueError(f"history mode must be 'all' or 'failures', not {mode!r}")
        self.client, self.queues, self.mode, self.batch = client, list(queues), mode, batch
        #: Events kept in each stream once written (EVENTS_MAXLEN); None: the writer does
        #: not trim (the scripts' cap does), and counts no lost events.
        self.keep_events = keep_events
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.leases = {q: client.broker.lease(q, "history", self.name, lease_ttl_ms)
                       for q in self.queues}
        self.held: set[str] = set()
        self._backlog: set[str] = set()  # held queues whose pending events are not read yet
        if redact is None or redact_result is None:
            names = redaction.names()  # once: the settings do not change under a writer
            params: dict[str, tuple[str, ...]] = {}

            def redact_call(task: str, args: Any, kwargs: Any) -> tuple[Any, Any]:
                if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
                    return redact_value(args, names), redact_value(kwargs, names)
                known = params.get(task)
                if known is None:
                    known = params[task] = redaction.params(task)
                return redact_args(args, kwargs, names, known)

            redact = redact or redact_call
            redact_result = redact_result or (lambda value: redact_value(value, names))
        self.redact, self.redact_result = redact, redact_result
        self.stats = Stats()

    # -- one round ------------------------------------------------------------------

    def step(self, block_ms: int | None = None) -> int:
        """One round over the queues: each held queue's next batch written. Returns how
        many events were written."""
        done = 0
        for queue in self.queues:
            if not self._hold(queue):
                continue
            if queue in self._backlog:
                events = self.client.read_events(queue, GROUP, CONSUMER, self.batch,
                                                 pending=True)
                if not events:
                    self._backlog.discard(queue)
                    events = self.read(queue, block_ms)
            else:
                events = self.read(queue, block_ms)
            if events:
                self.write(queue, events)
                done += len(events)
        return done

    def _hold(self, queue: str) -> bool:
        if self.leases[queue].hold():
            if queue not in self.held:
                log.info("history writer %s writes queue %r", self.name, queue)
                self.held.add(queue)
                self._backlog.add(queue)  # a predecessor's unacknowledged events first
                self.read(queue, None, count=0)  # what was lost meanwhile: counted first
            return True
        if queue in self.held:
            log.warning("history writer %s lost queue %r to another writer", self.name, queue)
            self.held.discard(queue)
        return False

    def read(self, queue: str, block_ms: int | None = None, *,
             count: int | None = None) -> list[ev.Event]:
        """The queue's next events for this writer (up to ``batch``; ``count`` 0: none),
        waiting up to ``block_ms`` for one. On Redis in one step with counting the events
        trimmed before the writer read them (logged at ERROR) and trimming the stream to
        ``keep_events`` and what the writer has not read (events_read.lua)."""
        count = self.batch if count is None else count
        found = self.client.broker.history.read(queue, GROUP, CONSUMER, count,
                                                self.keep_events or 0, block_ms)
        if found.lost:
            self.stats.lost += found.lost
            log.error("history of queue %r: %d events were trimmed from its events stream "
                      "before the writer read them (the stream's hard cap, "
                      "EVENTS_HARD_MAXLEN, was reached while the writer was behind or "
                      "down): those tasks' rows are missing or not final", queue, found.lost)
        if found.gaps:
            self.stats.gaps += found.gaps
            log.error("history of queue %r: events were trimmed from its events stream "
                      "before the writer read them (the stream's hard cap, "
                      "EVENTS_HARD_MAXLEN, was reached while the writer was behind or "
                      "down; how many, Redis before 7 cannot tell): those tasks' rows are "
                      "missing or not final", queue)
        if found.skipped:  # not events (written by something else): nothing to write
            log.warning("history of queue %r: %d entries of its events stream are not "
                        "events and are skipped (the first: %s)", queue, len(found.skipped),
                        found.skipped[0])
            self.client.ack_events(queue, GROUP, found.skipped)
        return found.events

    def write(self, queue: str, events: Sequence[ev.Event]) -> int:
        """Fold ``events`` (one queue's, stream order) into their rows, commit, then ack.
        Returns the rows written.

        A batch the database refuses (``_refused``) is written in two halves, each split
        again while refused, down to single events: an event refused alone is recorded
        as unwritable (health.py; logged at ERROR) and acknowledged. Halves are written
        in stream order, each folding into the rows the one before committed, so the rows
        are those of the whole batch, without the refused events."""
        return self._split(queue, events)

    def _split(self, queue: str, events: Sequence[ev.Event]) -> int:
        try:
            return self._write(queue, events)
        except Refused as refused:
            # A table that cannot be read (not migrated, the database away) is not a
            # refusal of this data: raised as it is, and the batch retried whole.
            _table_answers(refused.error)
            if len(events) > 1:
                middle = len(events) // 2
                return self._split(queue, events[:middle]) + self._split(queue, events[middle:])
            self._unwritable(queue, events[0], refused.error)
            return 0

    def _unwritable(self, queue: str, event: ev.Event, exc: Exception) -> None:
        log.error("history of queue %r: event %s (%s) of task %s could not be written and "
                  "is skipped: %s: %s", queue, event.cursor, event.kind, event.id,
                  type(exc).__name__, exc, exc_info=exc)
        health.record_unwritable(self.client, queue, event, exc)
        self.client.ack_events(queue, GROUP, [event.cursor])
        self.stats.unwritable += 1
        self.stats.events += 1

    def _write(self, queue: str, events: Sequence[ev.Event]) -> int:
        # lazy: app loading
        from ..models import TaskRecord

        # The stored rows of the batch's ids, except those whose first event here starts a
        # message (enqueued, or scheduled at enqueue: no attempt yet): a new row, folded
        # from this batch alone, which is also what a re-read of this batch rebuilds. Most
        # ids of a writer that keeps up, so most batches load few rows.
        first: dict[str, ev.Event] = {}
        for e in events:
            first.setdefault(e.id, e)
        ids = [i for i, e in first.items() if len(i) <= merge.MAX_TASK_ID and not (
            e.kind == ev.ENQUEUED or (e.kind == ev.SCHEDULED and e.attempt is None)
            or e.kind in ev.WORKFLOW_KINDS)]
        workflow_ids = list({e.id for e in events if e.kind in ev.WORKFLOW_KINDS})
        try:
            with transaction.atomic():
                stored = ({r["task_id"]: _row(r) for r in
                           TaskRecord.objects.filter(task_id__in=ids).values(*_STORED)}
                          if ids else {})
                changed, skipped = merge.fold(stored, events,
                                              failures_only=self.mode == "failures",
                                              redact=self.redact)
                self._results(queue, changed)
                rows = list(changed.values())
                self._claim_keys(rows)
                if rows:
                    upsert(rows)
                changes: list[tuple[str, merge.WorkflowRow]] = []
                if workflow_ids:
                    flows = stored_workflows(workflow_ids)
                    before = {i: row.state for i, row in flows.items()}
                    moved = merge.fold_workflows(flows, events,
                                                 failures_only=self.mode == "failures")
                    upsert_workflows(moved.values())
                    changes = workflow_changes(before, moved)
                if not self.leases[queue].hold():  # fenced: a writer that lost the lease
                    raise LeaseLost(queue)         # must not commit over its successor
        except Exception as exc:
            if _refused(exc):
                raise Refused(exc) from exc
            raise
        self.client.ack_events(queue, GROUP, [e.cursor for e in events])
        send_workflow_signals(changes)
        if skipped:
            log.warning("history: %d events of task ids over %d characters not written",
                        skipped, merge.MAX_TASK_ID)
        self.stats.events += len(events)
        self.stats.rows += len(rows)
        self.stats.batches += 1
        self.stats.skipped += skipped
        return len(rows)

    def _results(self, queue: str, rows: dict[str, Row]) -> None:
        """The results of the rows that succeeded in this batch, from their records."""
        wanted = [row for row in rows.values() if row.wants_result is not None]
        if not wanted:
            return
        for row, record in zip(wanted, read_records(self.client, queue,
                                                    [r.task_id for r in wanted]), strict=True):
            if (record is not None and record.state == "succeeded"
                    and record.attempt == row.wants_result):
                row.result = merge.jsonable(self.redact_result(record.result))
            row.wants_result = None

    @staticmethod
    def _claim_keys(rows: list[Row]) -> None:
        """An idempotency key is unique in the table: the newest message holding it keeps
        it (a key reused after its TTL names a new message); older rows let go of it."""
        # lazy: app loading
        from ..models import TaskRecord

        holder: dict[str, Row] = {}
        for row in rows:
            key = row.idempotency_key
            if key is None:
                continue
            other = holder.get(key)
            if other is None or merge.cursor_key(row.last_event) > merge.cursor_key(
                    other.last_event):
                if other is not None:
                    other.idempotency_key = None
                holder[key] = row
            else:
                row.idempotency_key = None
        if holder:
            # Before the upsert: PostgreSQL checks uniqueness row by row.
            (TaskRecord.objects.filter(idempotency_key__in=list(holder))
             .exclude(task_id__in=[r.task_id for r in holder.values()])
             .update(idempotency_key=None))
            (TaskRecord.objects.filter(task_id__in=[r.task_id for r in rows
                                                    if r.idempotency_key is None])
             .exclude(idempotency_key=None).update(idempotency_key=None))

    # -- the loop -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Write until ``stop`` is set; errors are logged and retried with a backoff."""
        backoff = 0.0
        idle = False
        try:
            while not stop.is_set():
                try:
                    block = max(10, IDLE_BLOCK_MS // max(len(self.held), 1)) if idle else None
                    if not self.held and idle and stop.wait(1.0):
                        break  # standing by: the leases are looked at once a second
                    idle = self.step(block) == 0
                    backoff = 0.0
                except LeaseLost as lost:
                    log.warning("history writer %s lost queue %r while writing; its batch "
                                "is left to the new writer", self.name, str(lost))
                    self.held.discard(str(lost))
                except Exception as exc:
                    backoff = min(max(backoff * 2, 0.1), 5.0)
                    if isinstance(exc, BrokerError | DatabaseError):
                        # Redis or the database away: one line (no traceback, no URL).
                        log.warning("history writer %s: %s: %s; retrying in %.1f s",
                                    self.name, type(exc).__name__, exc, backoff)
                    else:
                        log.exception("history writer %s: write failed; retrying in %.1f s",
                                      self.name, backoff)
                    self.held.clear()  # re-read the pending batch when it works again
                    self._backlog.clear()
                    close_old_connections()  # a broken connection is opened again
                    if stop.wait(backoff):
                        break
        finally:
            close_old_connections()
            for queue in list(self.held):
                try:
                    self.leases[queue].release()
                except Exception:  # noqa: BLE001 - the TTL frees it anyway
                    pass
            self.held.clear()


def _table_answers(error: Exception) -> None:
    """Raise ``error`` if the history table cannot be read (one trivial query)."""

    # lazy: app loading
    from ..models import TaskRecord

    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 FROM {connection.ops.quote_name(TaskRecord._meta.db_table)}"
                           " WHERE 1 = 0")
    except Exception:
        raise error from None


def wait_caught_up(writer: HistoryWriter, timeout: float = 30.0) -> bool:
    """Run rounds until a round writes nothing (tests and benchmarks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if writer.step() == 0 and writer.held:
            return True
    return False
