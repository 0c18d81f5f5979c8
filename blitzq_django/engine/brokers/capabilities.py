"""The storage a feature needs besides messages: one protocol per feature, each with a
Redis implementation (engine/redis/, reached through RedisBroker) and a memory one
(memory_stores.py, reached through MemoryBroker).

Dramatiq's recipe (a backend per feature: ``results/backend.py`` + ``backends/{redis,
stub}.py``): the feature's logic stays in its own module (engine/progress.py,
engine/metrics.py, engine/scheduler/, blitzq_django/history/) and stores through these,
so no code outside the brokers knows which store it runs on, imports redis or formats a
key. A broker exposes them as ``broker.progress``, ``broker.periodic``,
``broker.metrics``, ``broker.history``, ``broker.attachments``, ``broker.workflows``
and ``broker.lease(...)``; every error of the
store arrives as the engine's (errors.py), mapped at the broker's edge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, NamedTuple, Protocol

from ..core.events import Event
from ..core.workflow import Advance, Node

#: One occurrence to dispatch: (occurrence ms, message id, encoded message,
#: encoded record or b"", encoded event or b"").
Occurrence = tuple[int, str, bytes, bytes, bytes]

#: What the deploy checks read of a server: (INFO server + memory, maxmemory-policy or
#: None, why it is None: "" when it was read).
ServerFacts = tuple[dict[str, Any], str | None, str]
#: The key of a ServerFacts INFO dict holding the facts of a Sentinel or Cluster topology
#: (a dict: engine/brokers/redis/facts.py topology_facts); never an INFO field (no dot).
TOPOLOGY_FACTS = "blitzq.topology"

#: What a lease guards (``Broker.lease``): one holder per queue for each.
LEASE_PURPOSES = ("history", "metrics")


class Lease(Protocol):
    """The right of one holder (its token) to do one job of one queue, for ``ttl_ms``
    after each ``hold()``. Atomic: taking, renewing and releasing each compare the token
    in one step, so a holder whose lease expired and was taken can neither renew nor
    release its successor's."""

    def hold(self) -> bool:
        """Take the lease if free, renew it if this token holds it; whether it does."""

    def release(self) -> None:
        """Give it up, if this token still holds it (else nothing)."""


class Watch(Protocol):
    async def wait(self, timeout: float) -> None:
        """Return at the next change of the watched message, or after ``timeout`` s
        (at once or after a short sleep where the store cannot push changes)."""


class ProgressStore(Protocol):
    """The latest progress report of each message (engine/progress.py): a flat
    ``{field: text}`` mapping kept as long as records, merged on write."""

    def write(self, queue: str, message_id: str, fields: Mapping[str, str]) -> None: ...
    async def awrite(self, queue: str, message_id: str, fields: Mapping[str, str],
                     publish: bytes | None = None) -> None:
        """Merge ``fields``; with ``publish``, tell the message's followers (``watch``)."""
    def read(self, queue: str, message_id: str) -> dict[str, str]: ...
    async def aread(self, queue: str, message_id: str) -> dict[str, str]: ...
    def read_many(self, which: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        """The fields of each (queue, message id), in one round trip."""
    async def aread_many(self, which: Sequence[tuple[str, str]]) -> list[dict[str, str]]: ...
    def watch(self, queue: str, message_id: str) -> AbstractAsyncContextManager[Watch]:
        """Follow a message's progress writes and its final record's notice."""


class PeriodicStore(Protocol):
    """The scheduler's state (engine/scheduler/). ``claim`` marks a schedule's
    occurrences handled and dispatches them in one atomic step, so any number of
    schedulers dispatch each occurrence once."""

    async def handled(self, queue: str, names: Sequence[str]) -> list[int | None]: ...
    async def claim(self, queue: str, priority: str | None, name: str, through_ms: int,
                    occurrences: Sequence[Occurrence], info: bytes) -> tuple[int, int]:
        """(dispatched, latest occurrence handled before or -1)."""
    def read(self, queue: str, names: Sequence[str]
             ) -> tuple[list[int | None], list[bytes | None]]:
        """(latest occurrence handled, packed last dispatch) of each schedule."""
    def records(self, queue: str, message_ids: Sequence[str]) -> list[bytes | None]: ...
    async def version(self) -> int: ...
    def changed(self) -> int:
        """Bump the schedules' version and tell the listening schedulers."""
    async def listen_changes(self, on_change: Callable[[], None],
                             on_listening: Callable[[], None] | None = None) -> None:
        """Call ``on_change()`` at each ``changed()`` until cancelled."""
    async def listen_wakeups(self, queues: Sequence[str], on_wake: Callable[[], None]) -> None:
        """Call ``on_wake()`` when a delayed message of ``queues`` becomes the earliest of
        its schedule, until cancelled (a store that cannot tell never calls it)."""


class MetricsStore(Protocol):
    """The counters folded from the events (engine/metrics.py), a flat ``{name: text}``
    per queue with the cursor folded up to, and the enqueue times waiting for a start."""

    def read(self, queue: str) -> dict[str, str]: ...
    def cursor(self, queue: str) -> str: ...
    def enqueue_times(self, queue: str, message_ids: Sequence[str]) -> list[int | None]: ...
    def add(self, queue: str, incr: Mapping[str, int], cursor: str, gone: Sequence[str],
            enqueued: Mapping[str, int], max_starts: int) -> None:
        """Add ``incr``, set the cursor, forget ``gone``'s and keep ``enqueued``'s enqueue
        times, in one atomic step; then forget them all if over ``max_starts``."""


class AttachmentStore(Protocol):
    """One opaque value kept beside a message (blitzq_django's django.tasks call: the
    Task as enqueued), read alone or with the message's record in one round trip."""

    def write(self, queue: str, message_id: str, data: bytes, ttl_ms: int) -> None: ...
    async def awrite(self, queue: str, message_id: str, data: bytes, ttl_ms: int) -> None: ...
    def read(self, queue: str, message_id: str) -> bytes | None: ...
    def read_with_record(self, queue: str, message_id: str
                         ) -> tuple[bytes | None, bytes | None]:
        """(the encoded record, the value), each None when missing."""
    async def aread_with_record(self, queue: str, message_id: str
                                ) -> tuple[bytes | None, bytes | None]: ...


class EventsRead(NamedTuple):
    """What one read of a history writer found: the events, and those trimmed from the
    stream before it read them (``lost``; ``gaps``: runs Redis before 7 cannot count),
    and the cursors of entries that are not events (to acknowledge)."""

    events: list[Event]
    lost: int = 0
    gaps: int = 0
    skipped: list[str] = []


class HistoryStore(Protocol):
    """The history writer's reads, and what each queue's history lacks
    (blitzq_django/history/)."""

    def read(self, queue: str, group: str, consumer: str, count: int, keep_events: int,
             block_ms: int | None) -> EventsRead:
        """The group's next ``count`` events (0: none), waiting up to ``block_ms`` for one;
        trimming the stream to ``keep_events`` (0: no trim) and what the group has not
        read, in the same step."""
    def add_unwritable(self, queue: str, time_ms: int, text: str) -> None: ...
    def health(self, queue: str, group: str) -> tuple[dict[str, str], int | None]:
        """(the queue's health fields, events ``group`` has not read or None)."""


class WorkflowStore(Protocol):
    """The state of workflows (chains, groups, chords: engine/core/workflow.py), one hash
    per workflow under its own hash tag. Each method is one atomic step on that hash;
    recording an outcome is idempotent (a step that ran twice records once and gets the
    same launches back), so the caller enqueues what follows with fixed ids and
    idempotency keys and a crash between any two steps loses or doubles nothing."""

    def start(self, workflow_id: str, now_ms: int, home: str, nodes: Sequence[Node],
              members: Mapping[int, bytes], on_error: bytes | None) -> Advance:
        """Store the tree and answer its first launches (again: the same ones)."""
    async def astart(self, workflow_id: str, now_ms: int, home: str, nodes: Sequence[Node],
                     members: Mapping[int, bytes], on_error: bytes | None) -> Advance: ...
    def settle(self, workflow_id: str, at: int | str, state: str, value: bytes,
               outcome: bytes, failure: bytes, now_ms: int) -> Advance:
        """Record member ``at``'s final outcome once, and advance (core/workflow.py
        ``settle``)."""
    async def asettle(self, workflow_id: str, at: int | str, state: str, value: bytes,
                      outcome: bytes, failure: bytes, now_ms: int) -> Advance: ...
    async def asettle_many(self, items: Sequence[tuple[str, int | str, str, bytes, bytes,
                                                       bytes, int]]) -> list[Advance]:
        """``asettle`` of each (workflow id, node, state, value, outcome, failure, now_ms),
        in one round trip (each its own atomic step: they are other workflows' keys)."""
    def cancel(self, workflow_id: str, now_ms: int) -> tuple[str, list[bytes]]:
        """Cancel it if running: (its state before or "" when unknown, the members
        launched and unfinished, each a packed Member, to cancel)."""
    async def acancel(self, workflow_id: str, now_ms: int) -> tuple[str, list[bytes]]: ...
    def read(self, workflow_id: str) -> dict[str, bytes]:
        """Every field of its hash ({} when unknown)."""
    async def aread(self, workflow_id: str) -> dict[str, bytes]: ...
    def fields(self, workflow_id: str, names: Sequence[str]) -> list[bytes | None]:
        """Some fields of its hash (state, done, total ...)."""
    async def afields(self, workflow_id: str, names: Sequence[str]) -> list[bytes | None]: ...
    def wait(self, workflow_id: str, timeout: float) -> str:
        """Its state once final, or its state when ``timeout`` s have passed ("" when
        unknown)."""
    async def await_final(self, workflow_id: str, timeout: float) -> str: ...
    def emit(self, queue: str, event: bytes) -> None:
        """Append a workflow event (core/events.py: workflow_started, workflow_succeeded,
        workflow_failed, workflow_cancelled) to ``queue``'s events stream."""
    async def aemit(self, queue: str, event: bytes) -> None: ...
