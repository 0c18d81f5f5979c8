"""The broker contract shared by RedisBroker and MemoryBroker.

A producer calls the sync or async half (``enqueue``/``aenqueue`` ...); a worker
calls only the async half. Every method that settles or renews a delivery checks
that the calling consumer still owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ..core.events import Event, peek
from ..core.names import check_name
from ..core.record import Record
from ..core.states import SettleKind
from ..errors import ConfigurationError
from .capabilities import (
    AttachmentStore,
    HistoryStore,
    Lease,
    MetricsStore,
    PeriodicStore,
    ProgressStore,
    ServerFacts,
    WorkflowStore,
)

# The settlement kinds of core/states.py's SettleKind, bound once as plain str (one per
# settled delivery; see core/record.py).
DONE = SettleKind.DONE.value  # acked, final record written
RETRY = SettleKind.RETRY.value  # acked, next attempt on the schedule
DEAD = SettleKind.DEAD.value  # acked, moved to dead letters
REQUEUE = SettleKind.REQUEUE.value  # acked, put back on the queue at once
MARK_RUNNING = SettleKind.MARK_RUNNING.value  # not acked: the "running" record
# (track_state), its "started" event and its running index entry (core/running.py),
# each when given
RUNNING = MARK_RUNNING  # its former name, still imported by the worker and the brokers

#: Delivery modes (docs/delivery-guarantees.md). Reliable: Redis streams, a lease per
#: delivery, at-least-once. Fast: Redis lists (LPUSH, RPOP, BRPOP), no lease, at-most-once:
#: what a killed worker had popped and not settled is lost.
RELIABLE, FAST = "reliable", "fast"
MODES = (RELIABLE, FAST)


def check_modes(mode: object, queue_modes: object) -> tuple[str, dict[str, str]]:
    """The default mode and the per-queue ones, checked: known modes, valid queue names."""
    if mode not in MODES:
        raise ConfigurationError(f"mode must be one of {', '.join(MODES)}, not {mode!r:.60}")
    if queue_modes is None:
        return mode, {}  # type: ignore[return-value]
    if not isinstance(queue_modes, dict):
        raise ConfigurationError(f"queue_modes must be a dict of queue -> mode, "
                                 f"got {queue_modes!r:.80}")
    for queue, queue_mode in queue_modes.items():
        check_name("queue", queue)
        if queue_mode not in MODES:
            raise ConfigurationError(f"queue_modes[{queue!r}] must be one of "
                                     f"{', '.join(MODES)}, not {queue_mode!r:.60}")
    return mode, dict(queue_modes)  # type: ignore[return-value]


class Delivery(NamedTuple):
    """One handing-out of a message to a worker. (A NamedTuple: one per message, so cheap.)"""

    queue: str
    entry_id: str
    payload: bytes | None  # None: the entry had no message field
    delivery_count: int = 1
    priority: str | None = None  # the lane it was read from ("high", None, "low")

    @property
    def key(self) -> tuple[str, str, str | None]:
        """What identifies it in one worker: entry ids are unique only within one lane."""
        return (self.queue, self.entry_id, self.priority)


class Settlement(NamedTuple):
    """How one delivery ends; applied atomically with its ack. (NamedTuple: one per message.)"""

    delivery: Delivery
    kind: str  # DONE | RETRY | DEAD | REQUEUE
    message_id: str
    record: bytes = b""  # encoded Record to store, or b""
    notify: bool = False  # publish "final record written" for get_result
    body: bytes = b""  # RETRY/REQUEUE: encoded message; DEAD: encoded dead letter;
    # RUNNING: its running index entry, or b"" (see ``indexed``)
    due_ms: int = 0  # RETRY: when the next attempt is due; DEAD: the dead letter's time;
    # RUNNING with an entry: how long it is kept (ms)
    state: str = ""  # the record state this settlement means (for stats and events)
    # For the worker's failure hooks once the settlement is written; never sent to the broker.
    failure: Any = None  # Record of the failed attempt
    letter: Any = None  # DeadLetter
    #: the message's unique key: its marker is released by a final settlement
    #: (succeeded, failed, dead_lettered, cancelled, expired), never by retry/requeue/running
    unique_key: str | None = None
    # For its event (core/events.py), when the broker writes events:
    task: str = ""
    attempt: int = 0  # 0: unknown
    duration_ms: int | None = None  # an attempt that ran: finished - started
    error_type: str | None = None
    #: write a "started" event at this time (ms) first, in the same atomic step (0: none).
    #: RUNNING: the time of its own "started" event (0: no event).
    started_ms: int = 0
    #: its attempt was listed in the running index (core/running.py; a RUNNING settlement
    #: with a ``body`` lists it): this settlement removes the entry, even when the delivery
    #: is no longer owned (the entry is this worker's own)
    indexed: bool = False


@dataclass(frozen=True, slots=True)
class Enqueue:
    """One message to write, with what goes with it."""

    queue: str
    message_id: str
    payload: bytes
    due_ms: int = 0  # 0: ready now
    record: bytes = b""  # first record when track_state is on
    idempotency_key: str | None = None
    priority: str | None = None  # the lane: "high", None (normal) or "low"
    #: while the message is unfinished, a second enqueue of this key answers with its id
    #: (``args:<digest>`` for unique=True, ``id:<task_id>`` for a chosen task_id)
    unique_key: str | None = None
    task: str = ""  # for its event


class ScheduledCancel(NamedTuple):
    """What cancelling a scheduled message writes, built by the client from its body."""

    record: bytes = b""  # the encoded cancelled record, or b"" (no record is stored)
    unique_key: str | None = None  # its unique marker, released with it
    task: str = ""  # for its event
    attempt: int | None = None


def ready_holds(replies: Sequence[Any], message_id: str, limit: int
                ) -> tuple[bool | None, int]:
    """Read the replies of (each lane's length, then each lane's first ``limit`` encoded
    messages): whether ``message_id`` is among them (True), is certainly not in the queue
    (False: every lane was read whole) or may be further back (None); and how many
    messages the lanes hold."""
    lanes = len(replies) // 2
    lengths = [int(n or 0) for n in replies[:lanes]]
    for head in replies[lanes:]:
        for payload in head or ():
            found = peek(payload)
            if found is not None and found[0] == message_id:
                return True, sum(lengths)
    return (False if all(n <= limit for n in lengths) else None), sum(lengths)


class Broker(Protocol):
    """The one door to the store: nothing outside engine/brokers/ (and the Redis layer
    under it) imports redis, formats a key or catches a redis error; a feature that needs
    storage goes through a method here or a capability store (capabilities.py)."""

    #: about this many events are kept per queue; 0: events off (core/events.py)
    events_maxlen: int
    #: events carry details (Event.detail): for a history writer
    event_details: bool
    record_ttl: int  # seconds a record is kept
    #: messages live in this process only (MemoryBroker), lost when it exits
    in_process: bool
    location: str  # where the messages are, fit to show (no password)
    mode: str  # the delivery mode of every queue queue_modes does not name

    def mode_of(self, queue: str) -> str:
        """The delivery mode of ``queue``: "reliable" or "fast"."""
    # the feature stores (capabilities.py)
    progress: ProgressStore
    periodic: PeriodicStore
    metrics: MetricsStore
    history: HistoryStore
    attachments: AttachmentStore
    workflows: WorkflowStore

    def lease(self, queue: str, purpose: str, token: str, ttl_ms: int) -> Lease:
        """The lease of ``purpose`` (capabilities.LEASE_PURPOSES) on ``queue`` for the
        holder ``token``: one holder per queue and purpose at a time."""
    def ping(self) -> None:
        """Raise BrokerUnavailable when the store cannot be reached."""
    async def aping(self) -> None: ...
    def server_facts(self) -> ServerFacts | None:
        """What the deploy checks read of the server; None: no server (in process)."""

    # producer, sync
    def enqueue(self, items: Sequence[Enqueue]) -> list[str]: ...
    def get_record(self, queue: str, message_id: str) -> Record | None: ...
    def wait_record(self, queue: str, message_id: str, timeout: float) -> Record | None: ...
    def scheduled_due_ms(self, queue: str, message_id: str) -> int | None: ...
    def scheduled_payload(self, queue: str, message_id: str) -> bytes | None: ...
    def dead_letter(self, queue: str, message_id: str) -> bytes | None: ...
    # dead letters (engine DeadLetters), sync and async: ids by the time they were
    # dead-lettered, bodies by id, and the three ways out (replay, remove, purge)
    def dead_letter_ids(self, queue: str, min_ms: int, max_ms: int) -> list[str]: ...
    async def adead_letter_ids(self, queue: str, min_ms: int, max_ms: int) -> list[str]: ...
    def dead_letter_bodies(self, queue: str, ids: Sequence[str]) -> list[bytes | None]: ...
    async def adead_letter_bodies(self, queue: str,
                                  ids: Sequence[str]) -> list[bytes | None]: ...
    def replay_dead_letters(self, queue: str,
                            items: Sequence[tuple[str, str, bytes]]) -> int:
        """For each (dead letter's id, new message id, encoded new message): drop the dead
        letter and put the new message on ``queue``, atomically; how many were replayed."""
    async def areplay_dead_letters(self, queue: str,
                                   items: Sequence[tuple[str, str, bytes]]) -> int: ...
    def remove_dead_letters(self, queue: str, ids: Sequence[str]) -> int: ...
    async def aremove_dead_letters(self, queue: str, ids: Sequence[str]) -> int: ...
    def purge_dead_letters(self, queue: str) -> int: ...
    async def apurge_dead_letters(self, queue: str) -> int: ...
    def records(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        """The encoded records of ``ids`` (None where there is none), in one round trip
        per 1000."""
    async def arecords(self, queue: str, ids: Sequence[str]) -> list[bytes | None]: ...
    def idempotency_holder(self, queue: str, key: str) -> str | None:
        """The id of the message holding idempotency key ``key`` on ``queue``, or None."""
    async def aidempotency_holder(self, queue: str, key: str) -> str | None: ...
    def locate(self, queue: str, message_id: str
               ) -> tuple[Record | None, int | None, bytes | None]:
        """In one step: the message's record, and when it is scheduled its due time (ms)
        and encoded message (inspect())."""
    def find_ready(self, queue: str, message_id: str, limit: int) -> tuple[bool | None, int]:
        """Whether the message is in the queue (ready, or taken by a worker and not
        settled), looking at the first ``limit`` of each lane: True, False (certainly
        not: every lane was read whole) or None (may be further back); and how many
        messages the queue holds (``ready_holds``)."""
    def find_running(self, queue: str, message_id: str,
                     workers: Sequence[str]) -> list[tuple[str, bytes]]:
        """(worker, entry) of each of ``workers`` whose running index of ``queue`` lists
        the message (core/running.py)."""
    def running_entries(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, bytes]]:
        """The running index of each (queue, worker): message id -> entry."""
    def queue_stats(self, queue: str) -> dict[str, int | None]: ...
    def workers(self, now_ms: int) -> list[bytes]: ...
    def purge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]: ...

    # the seen queues: every queue a message was written to (a default runworker serves
    # them). enqueue adds to them; other writers (a scheduler) call see_queues first.
    def see_queues(self, queues: Sequence[str]) -> None: ...
    async def asee_queues(self, queues: Sequence[str]) -> None: ...
    def seen_queues(self) -> list[str]: ...
    async def aseen_queues(self) -> list[str]: ...
    def forget_queue(self, queue: str) -> None: ...

    # producer, async
    async def aenqueue(self, items: Sequence[Enqueue]) -> list[str]: ...
    async def aget_record(self, queue: str, message_id: str) -> Record | None: ...
    async def await_record(self, queue: str, message_id: str, timeout: float) -> Record | None: ...
    async def aqueue_stats(self, queue: str) -> dict[str, int | None]: ...
    async def aworkers(self, now_ms: int) -> list[bytes]: ...
    async def apurge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]: ...
    async def adead_letter(self, queue: str, message_id: str) -> bytes | None: ...
    async def alocate(self, queue: str, message_id: str
                      ) -> tuple[Record | None, int | None, bytes | None]: ...
    async def afind_ready(self, queue: str, message_id: str,
                          limit: int) -> tuple[bool | None, int]: ...
    async def afind_running(self, queue: str, message_id: str,
                            workers: Sequence[str]) -> list[tuple[str, bytes]]: ...
    async def arunning_entries(self, pairs: Sequence[tuple[str, str]]
                               ) -> list[dict[str, bytes]]: ...

    # worker
    async def prepare(self, queues: Sequence[str]) -> None: ...
    async def fetch(self, queues: Sequence[str], consumer: str, count: int,
                    block_ms: int) -> list[Delivery]:
        """Up to ``count`` deliveries, higher priority lanes first; blocks up to ``block_ms``
        only when nothing is ready (and may then return one per lane). A worker reads one
        queue per call: a cluster refuses reads across hash tags."""
    async def settle(self, consumer: str, settlements: Sequence[Settlement],
                     now_ms: int, token: str | None = None) -> list[bool]:
        """Write settlements; one bool each (False: not owned). A batch sent again with the
        same ``token`` answers as the first time and changes nothing."""

    async def renew(self, consumer: str, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Renew the leases; return the deliveries whose lease is lost."""
    async def recover(self, queue: str, consumer: str, min_idle_ms: int,
                      count: int) -> tuple[list[Delivery], list[str]]: ...
    async def start_recovered(self, consumer: str, delivery: Delivery) -> int:
        """Count a start of a recovered delivery (delivery count >= 2) that ``consumer``
        still owns, renewing its lease: the starts counted so far, 0 when another
        worker owns it now (it must not start here)."""
    async def starts(self, delivery: Delivery) -> int:
        """How many starts of the delivery's entry were counted (start_recovered)."""
    async def promote(self, queue: str, now_ms: int, limit: int) -> tuple[int, int]: ...
    async def retire(self, queues: Sequence[str], consumer: str) -> None: ...
    async def heartbeat(self, name: str, info: bytes, now_ms: int, ttl_ms: int,
                        queues: Sequence[str] = ()) -> None:
        """Write the worker's registry entry (expires in ``ttl_ms``), and renew the TTL of
        its running index in ``queues`` to the same."""
    async def leave(self, name: str) -> None: ...
    async def prune_consumers(self, queue: str, min_idle_ms: int) -> int:
        """Remove the consumers that own no pending entry and were idle longer than
        ``min_idle_ms`` (those of workers that died); return how many."""
    async def take_tokens(self, bucket: str, capacity: float, refill_per_ms: float,
                          wanted: int) -> tuple[int, int]:
        """Take up to ``wanted`` tokens of a rate limit's bucket (shared by every worker):
        (granted, ms until the rest should come back, one token interval apart)."""
    # events (core/events.py), sync and async
    def last_event_cursor(self, queue: str) -> str:
        """The cursor of the queue's newest event, "0-0" when there is none."""
    async def alast_event_cursor(self, queue: str) -> str: ...
    def events(self, queue: str, after: str, count: int, block_ms: int | None) -> list[Event]:
        """Up to ``count`` events after cursor ``after`` ("0": the oldest kept); with
        ``block_ms``, waits up to that long for one when there is none ("$": only new)."""
    async def aevents(self, queue: str, after: str, count: int,
                      block_ms: int | None) -> list[Event]: ...
    def read_events(self, queue: str, group: str, consumer: str, count: int,
                    block_ms: int | None, pending: bool = False) -> list[Event]:
        """Events new to consumer group ``group`` (created at the oldest kept event on first
        use), each delivered to one of its consumers until acknowledged; ``pending``: those
        delivered to ``consumer`` and not acknowledged yet (after a crash)."""
    async def aread_events(self, queue: str, group: str, consumer: str, count: int,
                           block_ms: int | None, pending: bool = False) -> list[Event]: ...
    def ack_events(self, queue: str, group: str, cursors: Sequence[str]) -> int: ...
    async def aack_events(self, queue: str, group: str, cursors: Sequence[str]) -> int: ...

    # cancellation (docs/cancel.md)
    def cancel(self, queue: str, message_id: str,
               scheduled: Callable[[bytes], ScheduledCancel],
               known: bool) -> tuple[str, str | None]:
        """Cancel one message atomically: (outcome, state), outcome one of cancelled (it
        was scheduled: removed, ``scheduled(body)`` written), revoked (a revocation is
        kept and published), finished, unknown (only when ``known``: every message has a
        record). See Cancellation."""
    async def acancel(self, queue: str, message_id: str,
                      scheduled: Callable[[bytes], ScheduledCancel],
                      known: bool) -> tuple[str, str | None]: ...
    async def revoked(self, queues: Sequence[str], now_ms: int) -> set[tuple[str, str]]:
        """The (queue, id) of every revocation of these queues that has not expired."""
    async def listen_revocations(self, on_revoked: Callable[[str, str], None],
                                 on_listening: Callable[[], None]) -> None:
        """Call ``on_revoked(queue, id)`` for each new revocation until cancelled;
        ``on_listening()`` once it listens (nothing revoked from then on is missed)."""

    async def aclose(self) -> None: ...
    def close(self) -> None: ...
