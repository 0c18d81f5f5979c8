"""WorkerInfo, QueueStats, Purged and Cancellation: what operators see of the workers, the
queues, and what their actions did."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .message import pack_fields, unpack_fields


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInfo:
    """One live worker, as of its last heartbeat."""

    name: str
    host: str
    pid: int
    queues: list[str] = field(default_factory=list)
    concurrency: int = 0
    running: int = 0  # attempts running at the heartbeat
    processed: int = 0  # messages settled since it started
    started_ms: int = 0
    heartbeat_ms: int = 0
    expires_ms: int = 0  # gone from workers() after this without a new heartbeat
    version: str = ""

    def to_bytes(self) -> bytes:
        return pack_fields(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> WorkerInfo:
        return unpack_fields(cls, data)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStats:
    """One queue, counted in one call (cheap enough to poll every second)."""

    queue: str
    ready: int  # waiting to be read by a worker
    in_flight: int  # read by a worker, not yet settled (running or prefetched)
    scheduled: int  # delayed, ETA and retry backoff
    dead_letters: int
    consumers: int  # workers that have read this queue (idle dead ones are pruned)
    oldest_ready_age_ms: int | None  # how long the oldest ready message has waited


def workers_per_queue(workers: Iterable[WorkerInfo]) -> Counter[str]:
    """Queue -> how many of these (live) workers serve it."""
    return Counter(q for w in workers for q in w.queues)


def unserved(stats: Iterable[QueueStats], workers: Iterable[WorkerInfo]) -> list[str]:
    """The queues among ``stats`` whose messages wait (ready or scheduled) while none of
    these live workers serves them: nothing will run them."""
    serving = workers_per_queue(workers)
    return [s.queue for s in stats if (s.ready or s.scheduled) and not serving[s.queue]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Purged:
    """What a purge removed, and what it left to the workers that hold it."""

    queue: str
    ready: int
    scheduled: int
    dead_letters: int  # 0 unless dead letters were asked for
    in_flight: int  # held by workers: never purged, they finish and settle as usual


#: Cancellation outcomes.
CANCELLED = "cancelled"  # it was scheduled: removed, recorded cancelled; it will not run
REVOKED = "revoked"  # queued or running: a revocation is kept (REVOKE_TTL); see docs/cancel.md
FINISHED = "finished"  # already final (``state`` says which): nothing changed
UNKNOWN = "unknown"  # nothing is known of that id (track_state on): nothing changed


@dataclass(frozen=True, slots=True)
class Cancellation:
    """What ``client.cancel(id)`` did. True only when the cancel is certain (it was
    scheduled, and is now removed and recorded cancelled)."""

    id: str
    queue: str
    outcome: str  # CANCELLED | REVOKED | FINISHED | UNKNOWN
    #: the state the message was found in: "scheduled" (cancelled), the record's state
    #: (revoked: "queued", "running"..., or None without a record), the final state
    #: (finished), None (unknown)
    state: str | None = None

    def __bool__(self) -> bool:
        return self.outcome == CANCELLED
