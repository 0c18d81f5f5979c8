"""The running index: which attempts run right now, whatever TRACK_STATE says.

A worker lists in Redis each attempt that has been running for INDEX_DELAY_S: its
flusher writes the entry with its group commit (in the same write as the attempt's
"started" event, when events are on), and the attempt's settlement removes it in the
same atomic step that acknowledges the delivery. An attempt that ends sooner (almost
all of them) is never listed, so a message costs nothing for it unless it runs long.
The flusher looks every INDEX_DELAY_S, so an attempt is listed between INDEX_DELAY_S
and about twice that after it started, plus one write to Redis.

Entries live in one hash per queue and worker (``QueueKeys.running``), with the TTL of
the worker's registry entry, renewed with each heartbeat. Readers read only the hashes
of live workers (the registry), so a worker that dies takes its entries with it: they
are no longer shown once its registry entry expires, and gone from Redis then too.

This module is the entry's encoding and what a reader gets back (``Running``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import record as states
from .message import pack, unpack
from .record import Record

#: An attempt is listed once it has run this long (seconds); the flusher checks this often.
INDEX_DELAY_S = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class Running:
    """One attempt running now, as its worker listed it."""

    id: str
    task: str
    queue: str
    worker: str
    attempt: int = 1
    started_ms: int = 0
    created_ms: int | None = None

    def to_record(self) -> Record:
        """What inspect() answers for it: a record in state ``running``."""
        return Record(id=self.id, task=self.task, queue=self.queue, state=states.RUNNING,
                      attempt=self.attempt, created_ms=self.created_ms,
                      started_ms=self.started_ms or None, worker=self.worker)


def entry(task: str, attempt: int, started_ms: int, created_ms: int | None) -> bytes:
    """The value of an attempt's entry in its worker's hash."""
    return pack([task, attempt, started_ms, created_ms])


def parse(queue: str, worker: str, message_id: Any, data: Any) -> Running | None:
    """An entry read back; None when it is not one (written by hand, or by a newer
    version in a shape this one cannot read)."""
    try:
        task, attempt, started_ms, created_ms = unpack(data)[:4]
        text = message_id.decode() if isinstance(message_id, bytes) else str(message_id)
        return Running(id=text, task=str(task), queue=queue, worker=worker,
                       attempt=int(attempt), started_ms=int(started_ms),
                       created_ms=None if created_ms is None else int(created_ms))
    except Exception:  # noqa: BLE001 - a bad entry is skipped, the others are listed
        return None
