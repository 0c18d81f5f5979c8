"""Record: what is known about one message (its state, and its outcome once final)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import states
from .message import pack, pack_fields, unpack_fields
from .states import RecordState

# The states of core/states.py's RecordState, bound once as plain str: records are
# packed and compared per message, and msgpack packs an exact str faster than an enum
# member (a str subclass). The values are the enum's: one vocabulary.
QUEUED = RecordState.QUEUED.value
SCHEDULED = RecordState.SCHEDULED.value
RUNNING = RecordState.RUNNING.value
RETRYING = RecordState.RETRYING.value
SUCCEEDED = RecordState.SUCCEEDED.value
FAILED = RecordState.FAILED.value
DEAD_LETTERED = RecordState.DEAD_LETTERED.value
CANCELLED = RecordState.CANCELLED.value
EXPIRED = RecordState.EXPIRED.value

FINAL_STATES = frozenset(state.value for state in states.FINAL_STATES)

DEFAULT_MAX_RESULT_SIZE = 8 * 1024 * 1024  # bytes of one encoded result (Client.max_result_size)


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    id: str
    task: str
    queue: str
    state: str
    attempt: int = 1
    result: Any = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    reason: str | None = None  # why it was dead-lettered
    created_ms: int | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    worker: str | None = None
    #: when a scheduled message (delayed, ETA, retry backoff) is due, in ms; set by
    #: inspect(), never stored
    due_ms: int | None = None

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == SUCCEEDED

    def to_bytes(self) -> bytes:
        return pack_fields(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> Record:
        return unpack_fields(cls, data)


def encode_success(id: str, task: str, queue: str, attempt: int, result: Any, created_ms: int,
                   started_ms: int, finished_ms: int, worker: str) -> bytes:
    """Record(state=succeeded, ...).to_bytes() without the Record: once per message."""
    return pack({"id": id, "task": task, "queue": queue, "state": SUCCEEDED, "attempt": attempt,
                 "result": result, "created_ms": created_ms, "started_ms": started_ms,
                 "finished_ms": finished_ms, "worker": worker})

