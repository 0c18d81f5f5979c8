"""The state vocabularies of the engine, one ``StrEnum`` each (pure: no I/O).

Each word names one thing only; where two vocabularies share a word it is spelled
through its own enum, so ``RecordState.RUNNING`` (what a record says) is never
confused with ``HeldState.RUNNING`` (what a worker's table says).

- ``RecordState``: what a message's record says (core/record.py, the history model).
- ``EventKind``: what one event of the event stream says happened (core/events.py).
- ``SettleKind``: how one delivery settles at its broker (brokers/base.py).
- ``HeldState``: where a delivery a worker holds stands (worker/inflight.py).

They are ``StrEnum`` so that a member equals its stored string: records, events and
Lua scripts keep the same bytes, and comparisons with decoded strings hold.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EventKind", "HeldState", "RecordState", "SettleKind"]


class RecordState(StrEnum):
    """A message's state, as its record and the history keep it."""

    QUEUED = "queued"
    SCHEDULED = "scheduled"  # delayed, or waiting for its next attempt
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"  # cancelled before it ran, or interrupted running
    EXPIRED = "expired"  # not started before its ``expires`` time: dropped without running

    @property
    def final(self) -> bool:
        """No later attempt will change it."""
        return self in FINAL_STATES


FINAL_STATES = frozenset({RecordState.SUCCEEDED, RecordState.FAILED, RecordState.DEAD_LETTERED,
                          RecordState.CANCELLED, RecordState.EXPIRED})


class EventKind(StrEnum):
    """What one event of a queue's event stream says happened to a message."""

    ENQUEUED = "enqueued"
    SCHEDULED = "scheduled"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    RECOVERED = "recovered"
    REQUEUED = "requeued"
    REPLAYED = "replayed"
    # A workflow's own events (core/workflow.py): ``id`` is the workflow's id, ``task``
    # its kind (chain, group, chord, task), written to the queue of its first task.
    WORKFLOW_STARTED = "workflow_started"
    WORKFLOW_SUCCEEDED = "workflow_succeeded"
    WORKFLOW_FAILED = "workflow_failed"
    WORKFLOW_CANCELLED = "workflow_cancelled"


class SettleKind(StrEnum):
    """How one delivery settles at its broker."""

    DONE = "done"  # acked, final record written
    RETRY = "retry"  # acked, next attempt on the schedule
    DEAD = "dead"  # acked, moved to dead letters
    REQUEUE = "requeue"  # acked, put back on the queue at once
    MARK_RUNNING = "running"  # not acked: the running record, event and index entry


class HeldState(StrEnum):
    """Where a delivery a worker holds stands; an entry only moves forward."""

    PREFETCHED = "prefetched"  # held, not started: waits for decoding or for a slot
    RUNNING = "running"  # its attempt executes and holds a slot
    SETTLING = "settling"  # its settlement is handed to the flusher, not yet written
