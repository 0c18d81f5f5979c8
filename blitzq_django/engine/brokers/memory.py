"""MemoryBroker: the broker contract inside one Python process.

Ephemeral: everything is lost when the process exits. For tests, notebooks and
scripts. It keeps the same semantics as RedisBroker (pending entries owned by a
consumer, delivery counts, recovery of idle entries, schedule, dead letters,
records with TTL) so the engine's behaviour tests run against both. Fast mode
(``mode``/``queue_modes``, as RedisBroker's) behaves as on Redis: a fetched message
of a fast queue is the worker's alone, with no lease, never recovered; a graceful
requeue puts it first in line.
Producers may call it from any thread; waiting readers are woken through an
asyncio.Condition on their own loop (or a threading.Condition for sync callers).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import events as ev
from ..core import limits, rates
from ..core.deadletter import DeadLetter
from ..core.ids import now_ms as clock_ms
from ..core.record import Record
from .base import (
    DEAD,
    FAST,
    RELIABLE,
    REQUEUE,
    RETRY,
    RUNNING,
    Delivery,
    Enqueue,
    ScheduledCancel,
    Settlement,
    check_modes,
    ready_holds,
)
from .capabilities import ServerFacts
from .memory_stores import (
    MemoryAttachmentStore,
    MemoryHistoryStore,
    MemoryLease,
    MemoryMetricsStore,
    MemoryPeriodicStore,
    MemoryProgressStore,
    MemoryWorkflowStore,
)


@dataclass
class _Pending:
    payload: bytes | None
    consumer: str
    count: int
    since: float  # monotonic time of the last delivery or renewal
    priority: str | None = None
    starts: int = 0  # starts counted after recoveries (start_recovered)


class _Ready:
    """A queue's ready messages: one line per priority lane, taken highest first."""

    def __init__(self) -> None:
        self.lanes: dict[str | None, deque[tuple[str, bytes]]] = {
            "high": deque(), None: deque(), "low": deque()}

    def append(self, entry: tuple[str, bytes], priority: str | None = None) -> None:
        self.lanes[priority].append(entry)

    def appendleft(self, entry: tuple[str, bytes], priority: str | None = None) -> None:
        """Put ``entry`` first in its lane (next in line): a fast mode requeue."""
        self.lanes[priority].appendleft(entry)

    def popleft(self) -> tuple[str, bytes, str | None]:
        for priority, line in self.lanes.items():
            if line:
                entry_id, payload = line.popleft()
                return entry_id, payload, priority
        raise IndexError("no ready message")

    def oldest_id(self) -> str | None:
        ids = [line[0][0] for line in self.lanes.values() if line]
        return min(ids, key=lambda i: int(i.partition("-")[0]), default=None)

    def clear(self) -> None:
        for line in self.lanes.values():
            line.clear()

    def __len__(self) -> int:
        return sum(map(len, self.lanes.values()))

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        """Every ready (entry id, payload), highest lane first."""
        return itertools.chain.from_iterable(self.lanes.values())


@dataclass
class _Queue:
    ready: _Ready = field(default_factory=_Ready)
    pending: dict[str, _Pending] = field(default_factory=dict)
    schedule: dict[str, tuple[int, bytes, str | None]] = field(default_factory=dict)
    dead: OrderedDict[str, bytes] = field(default_factory=OrderedDict)


@dataclass
class _EventGroup:
    """A consumer group of a queue's events: what it delivered, what is unacknowledged."""

    last: tuple[int, int] = (0, 0)  # cursor of the last event delivered
    pending: dict[str, str] = field(default_factory=dict)  # cursor -> consumer


def _cursor(cursor: str) -> tuple[int, int]:
    ms, _, seq = cursor.partition("-")
    return int(ms), int(seq or 0)


class MemoryBroker:
    url = "memory://"
    #: messages live in this process only, and are lost when it exits
    in_process = True
    location = "memory"  # where the messages are

    def __init__(self, *, record_ttl: int = 86400, idempotency_ttl: int = 86400,
                 dead_letter_max: int = 100_000, revoke_ttl: int = 3600,
                 events_maxlen: int = 100_000, event_details: bool = False,
                 mode: str = RELIABLE, queue_modes: dict[str, str] | None = None) -> None:
        #: the delivery mode of every queue queue_modes does not name (see RedisBroker)
        self.mode, self.queue_modes = check_modes(mode, queue_modes)
        limits.check_all(record_ttl=record_ttl, idempotency_ttl=idempotency_ttl,
                         dead_letter_max=dead_letter_max, revoke_ttl=revoke_ttl,
                         events_maxlen=events_maxlen)
        #: events kept per queue (exactly: a capped line); 0: events off
        self.events_maxlen = events_maxlen
        #: events carry details (Event.detail), as RedisBroker(event_details=True)
        self.event_details = event_details
        self._events: dict[str, deque[ev.Event]] = {}
        self._event_seq = itertools.count(1)
        self._event_ms = 0  # the last event's ms: cursors only grow
        self._event_groups: dict[tuple[str, str], _EventGroup] = {}
        #: unique markers: (queue, unique key) -> (expiry, monotonic; id of the message)
        self._unique_markers: dict[tuple[str, str], tuple[float, str]] = {}
        self.revoke_ttl = revoke_ttl
        #: revocations: (queue, id) -> expiry (wall ms); and who listens for new ones
        self._revoked: dict[tuple[str, str], int] = {}
        self._revocation_listeners: list[tuple[asyncio.AbstractEventLoop,
                                               Callable[[str, str], None]]] = []
        self.record_ttl = record_ttl
        self.idempotency_ttl = idempotency_ttl
        self.dead_letter_max = dead_letter_max
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queues: dict[str, _Queue] = {}
        self._records: dict[tuple[str, str], tuple[float, bytes]] = {}
        self._unique: dict[tuple[str, str], tuple[float, str]] = {}
        self._entry_ids = itertools.count(1)
        self._waiters: dict[asyncio.AbstractEventLoop, asyncio.Condition] = {}
        self._workers: dict[str, tuple[int, bytes]] = {}  # name -> (expires ms, info)
        #: running index (core/running.py): (queue, worker) -> message id -> entry, and
        #: when each (queue, worker) hash expires (monotonic) unless a heartbeat renews it
        self._running: dict[tuple[str, str], dict[str, bytes]] = {}
        self._running_expiry: dict[tuple[str, str], float] = {}
        self._readers: dict[str, set[str]] = {}  # queue -> consumers that read it
        self._seen: set[str] = set()  # every queue a message was written to
        #: the feature stores (capabilities.py), in this process
        self.progress = MemoryProgressStore()
        self.periodic = MemoryPeriodicStore(self)
        self.metrics = MemoryMetricsStore()
        self.history = MemoryHistoryStore(self)
        self.attachments = MemoryAttachmentStore(self)
        self.workflows = MemoryWorkflowStore(self)
        self._leases: dict[tuple[str, str], tuple[str, float]] = {}

    def lease(self, queue: str, purpose: str, token: str, ttl_ms: int) -> MemoryLease:
        """The lease of ``purpose`` on ``queue`` for the holder ``token``."""
        return MemoryLease(self._leases, self._lock, queue, purpose, token, ttl_ms)

    def ping(self) -> None:
        """Always answers: it is this process."""

    async def aping(self) -> None:
        """Always answers: it is this process."""

    def server_facts(self) -> ServerFacts | None:
        """None: no server to check."""
        return None

    def mode_of(self, queue: str) -> str:
        """The delivery mode of ``queue``: "reliable" or "fast"."""
        return self.queue_modes.get(queue, self.mode)

    def _queue(self, name: str) -> _Queue:
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = _Queue()
        return q

    def _wake(self) -> None:
        """Called with the lock held after any change readers may wait for."""
        self._changed.notify_all()
        for loop, condition in list(self._waiters.items()):
            if loop.is_closed():
                del self._waiters[loop]
                continue

            async def notify(c: asyncio.Condition = condition) -> None:
                async with c:
                    c.notify_all()

            loop.call_soon_threadsafe(lambda n=notify: asyncio.ensure_future(n()))  # type: ignore[misc]

    def _condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        with self._lock:
            c = self._waiters.get(loop)
            if c is None:
                c = self._waiters[loop] = asyncio.Condition()
            return c

    # -- producing -----------------------------------------------------------

    def enqueue(self, items: Sequence[Enqueue]) -> list[str]:
        ids = []
        now = time.monotonic()
        with self._lock:
            for item in items:
                q = self._queue(item.queue)
                self._seen.add(item.queue)
                if item.idempotency_key or item.unique_key:
                    held = self._unique.get((item.queue, item.idempotency_key or ""))
                    if not (held and held[0] > now) and item.unique_key:
                        held = self._unique_markers.get((item.queue, item.unique_key))
                    if held and held[0] > now:
                        ids.append(held[1])
                        continue
                    taken = (now + self.idempotency_ttl, item.message_id)
                    if item.idempotency_key:
                        self._unique[(item.queue, item.idempotency_key)] = taken
                    if item.unique_key:
                        self._unique_markers[(item.queue, item.unique_key)] = taken
                if item.due_ms:
                    q.schedule[item.message_id] = (item.due_ms, item.payload, item.priority)
                else:
                    q.ready.append((self._entry_id(), item.payload), item.priority)
                if item.record:
                    expires = now + self.record_ttl
                    self._records[(item.queue, item.message_id)] = (expires, item.record)
                if self.events_maxlen:
                    self._append_event(item.queue, ev.SCHEDULED if item.due_ms else ev.ENQUEUED,
                                       item.message_id, item.task,
                                       detail=ev.message_detail(item.payload)
                                       if self.event_details else None)
                ids.append(item.message_id)
            self._wake()
        return ids

    async def aenqueue(self, items: Sequence[Enqueue]) -> list[str]:
        return self.enqueue(items)

    # -- the seen queues (as RedisBroker's) ----------------------------------------------

    def see_queues(self, queues: Sequence[str]) -> None:
        with self._lock:
            self._seen.update(queues)

    async def asee_queues(self, queues: Sequence[str]) -> None:
        self.see_queues(queues)

    def seen_queues(self) -> list[str]:
        with self._lock:
            return sorted(self._seen)

    async def aseen_queues(self) -> list[str]:
        return self.seen_queues()

    def forget_queue(self, queue: str) -> None:
        with self._lock:
            self._seen.discard(queue)

    def _entry_id(self) -> str:
        # Shaped like a stream id (ms-sequence), so a ready entry's age reads off its id.
        return f"{clock_ms()}-{next(self._entry_ids)}"

    # -- reading state -------------------------------------------------------

    def _record(self, queue: str, message_id: str) -> Record | None:
        held = self._records.get((queue, message_id))
        if held is None:
            return None
        if held[0] <= time.monotonic():
            del self._records[(queue, message_id)]
            return None
        return Record.from_bytes(held[1])

    def records(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        """The encoded records of ``ids`` (None where there is none)."""
        now = time.monotonic()
        with self._lock:
            found = [self._records.get((queue, i)) for i in ids]
        return [held[1] if held is not None and held[0] > now else None for held in found]

    async def arecords(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        return self.records(queue, ids)

    def idempotency_holder(self, queue: str, key: str) -> str | None:
        """The id of the message holding idempotency key ``key`` on ``queue``, or None."""
        with self._lock:
            held = self._unique.get((queue, key))
        return held[1] if held is not None and held[0] > time.monotonic() else None

    async def aidempotency_holder(self, queue: str, key: str) -> str | None:
        return self.idempotency_holder(queue, key)

    def get_record(self, queue: str, message_id: str) -> Record | None:
        with self._lock:
            return self._record(queue, message_id)

    async def aget_record(self, queue: str, message_id: str) -> Record | None:
        return self.get_record(queue, message_id)

    def scheduled_due_ms(self, queue: str, message_id: str) -> int | None:
        with self._lock:
            held = self._queue(queue).schedule.get(message_id)
            return held[0] if held else None

    def scheduled_payload(self, queue: str, message_id: str) -> bytes | None:
        with self._lock:
            held = self._queue(queue).schedule.get(message_id)
            return held[1] if held else None

    def dead_letter(self, queue: str, message_id: str) -> bytes | None:
        with self._lock:
            return self._queue(queue).dead.get(message_id)

    async def adead_letter(self, queue: str, message_id: str) -> bytes | None:
        return self.dead_letter(queue, message_id)

    def locate(self, queue: str, message_id: str
               ) -> tuple[Record | None, int | None, bytes | None]:
        with self._lock:
            held = self._queue(queue).schedule.get(message_id)
            return (self._record(queue, message_id), held[0] if held else None,
                    held[1] if held else None)

    async def alocate(self, queue: str, message_id: str
                      ) -> tuple[Record | None, int | None, bytes | None]:
        return self.locate(queue, message_id)

    def find_ready(self, queue: str, message_id: str, limit: int) -> tuple[bool | None, int]:
        """As on Redis, where the stream holds the ready and the taken (pending) entries;
        in memory every one is looked at."""
        with self._lock:
            q = self._queue(queue)
            held: list[bytes | None] = [payload for _entry, payload in q.ready]
            held += [p.payload for p in q.pending.values()]
        return ready_holds([len(held), held], message_id, max(limit, len(held)))

    async def afind_ready(self, queue: str, message_id: str,
                          limit: int) -> tuple[bool | None, int]:
        return self.find_ready(queue, message_id, limit)

    def wait_record(self, queue: str, message_id: str, timeout: float) -> Record | None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                record = self._record(queue, message_id)
                remaining = deadline - time.monotonic()
                if (record is not None and record.is_final) or remaining <= 0:
                    return record
                self._changed.wait(remaining)

    async def await_record(self, queue: str, message_id: str, timeout: float) -> Record | None:
        condition = self._condition()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with condition:
            while True:
                record = self.get_record(queue, message_id)
                remaining = deadline - loop.time()
                if (record is not None and record.is_final) or remaining <= 0:
                    return record
                try:
                    await asyncio.wait_for(condition.wait(), remaining)
                except TimeoutError:
                    pass

    def queue_stats(self, queue: str) -> dict[str, int | None]:
        with self._lock:
            q = self._queue(queue)
            age = None
            oldest = q.ready.oldest_id()
            if oldest is not None:
                age = max(0, clock_ms() - int(oldest.partition("-")[0]))
            return {"ready": len(q.ready), "in_flight": len(q.pending),
                    "scheduled": len(q.schedule), "dead_letters": len(q.dead),
                    "consumers": len(self._readers.get(queue, ())),
                    "oldest_ready_age_ms": age}

    async def aqueue_stats(self, queue: str) -> dict[str, int | None]:
        return self.queue_stats(queue)

    def purge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]:
        with self._lock:
            if queue not in self._queues:
                return {"ready": -2, "scheduled": 0, "dead_letters": 0, "in_flight": 0}
            q = self._queue(queue)
            counts = {"ready": len(q.ready), "scheduled": len(q.schedule),
                      "dead_letters": len(q.dead) if dead_letters else 0,
                      "in_flight": len(q.pending)}
            if q.pending and not force:
                return {**counts, "ready": -1, "scheduled": 0, "dead_letters": 0}
            q.ready.clear()
            q.schedule.clear()
            if dead_letters:
                q.dead.clear()
            return counts

    async def apurge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]:
        return self.purge(queue, force, dead_letters)

    def workers(self, now_ms: int) -> list[bytes]:
        with self._lock:
            return [info for expires, info in self._workers.values() if expires >= now_ms]

    async def aworkers(self, now_ms: int) -> list[bytes]:
        return self.workers(now_ms)

    async def heartbeat(self, name: str, info: bytes, now_ms: int, ttl_ms: int,
                        queues: Sequence[str] = ()) -> None:
        with self._lock:
            self._workers[name] = (now_ms + ttl_ms, info)
            for other in [n for n, (exp, _) in self._workers.items() if exp < now_ms]:
                del self._workers[other]
            expires = time.monotonic() + ttl_ms / 1000
            for queue in queues:  # PEXPIRE of its running index hashes on Redis
                if (queue, name) in self._running_expiry:
                    self._running_expiry[(queue, name)] = expires

    def _running_of(self, queue: str, worker: str) -> dict[str, bytes]:
        """The running index hash of ``worker`` in ``queue`` (lock held; empty when there
        is none): an expired one is dropped first, as Redis would have."""
        key = (queue, worker)
        if self._running_expiry.get(key, float("inf")) <= time.monotonic():
            self._running.pop(key, None)
            del self._running_expiry[key]
        return self._running.get(key, {})

    def _list_running(self, queue: str, worker: str, message_id: str, entry: bytes,
                      ttl_ms: int) -> None:
        """HSET and PEXPIRE of complete.lua (lock held)."""
        key = (queue, worker)
        self._running_of(queue, worker)
        self._running.setdefault(key, {})[message_id] = entry
        self._running_expiry[key] = time.monotonic() + ttl_ms / 1000

    def _unlist_running(self, queue: str, worker: str, message_id: str) -> None:
        """HDEL of complete.lua (lock held); a hash left empty is gone, TTL and all."""
        key = (queue, worker)
        index = self._running_of(queue, worker)
        index.pop(message_id, None)
        if not index and key in self._running:
            del self._running[key]
            self._running_expiry.pop(key, None)

    def running_entries(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, bytes]]:
        """The running index of each (queue, worker): message id -> entry."""
        with self._lock:
            return [dict(self._running_of(queue, worker)) for queue, worker in pairs]

    async def arunning_entries(self, pairs: Sequence[tuple[str, str]]
                               ) -> list[dict[str, bytes]]:
        return self.running_entries(pairs)

    def find_running(self, queue: str, message_id: str,
                     workers: Sequence[str]) -> list[tuple[str, bytes]]:
        """(worker, entry) of each of ``workers`` listing the message in its running
        index of ``queue``."""
        with self._lock:
            return [(worker, data) for worker in workers
                    if (data := self._running_of(queue, worker).get(message_id)) is not None]

    async def afind_running(self, queue: str, message_id: str,
                            workers: Sequence[str]) -> list[tuple[str, bytes]]:
        return self.find_running(queue, message_id, workers)

    async def leave(self, name: str) -> None:
        with self._lock:
            self._workers.pop(name, None)

    # -- dead letters --------------------------------------------------------

    def dead_letter_ids(self, queue: str, min_ms: int, max_ms: int) -> list[str]:
        with self._lock:
            dead = list(self._queue(queue).dead.items())
        return [i for i, body in reversed(dead)
                if min_ms <= DeadLetter.from_bytes(body).dead_ms <= max_ms]

    def dead_letter_bodies(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        with self._lock:
            dead = self._queue(queue).dead
            return [dead.get(i) for i in ids]

    def replay_dead_letters(self, queue: str, items: Sequence[tuple[str, str, bytes]]) -> int:
        done = 0
        with self._lock:
            q = self._queue(queue)
            self._seen.add(queue)
            for dead_id, new_id, payload in items:
                if q.dead.pop(dead_id, None) is not None:
                    self._records.pop((queue, new_id), None)
                    q.ready.append((self._entry_id(), payload))
                    if self.events_maxlen:
                        head = ev.peek(payload)
                        self._append_event(queue, ev.REPLAYED, new_id, head[1] if head else "",
                                           attempt=1, detail=ev.message_detail(payload)
                                           if self.event_details else None)
                    done += 1
            self._wake()
        return done

    def remove_dead_letters(self, queue: str, ids: Sequence[str]) -> int:
        with self._lock:
            dead = self._queue(queue).dead
            return sum(dead.pop(i, None) is not None for i in ids)

    def purge_dead_letters(self, queue: str) -> int:
        with self._lock:
            dead = self._queue(queue).dead
            count = len(dead)
            dead.clear()
            return count

    async def adead_letter_ids(self, queue: str, min_ms: int, max_ms: int) -> list[str]:
        return self.dead_letter_ids(queue, min_ms, max_ms)

    async def adead_letter_bodies(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        return self.dead_letter_bodies(queue, ids)

    async def areplay_dead_letters(self, queue: str,
                                   items: Sequence[tuple[str, str, bytes]]) -> int:
        return self.replay_dead_letters(queue, items)

    async def aremove_dead_letters(self, queue: str, ids: Sequence[str]) -> int:
        return self.remove_dead_letters(queue, ids)

    async def apurge_dead_letters(self, queue: str) -> int:
        return self.purge_dead_letters(queue)

    # -- worker --------------------------------------------------------------

    async def prepare(self, queues: Sequence[str]) -> None:
        with self._lock:
            for name in queues:
                self._queue(name)

    async def fetch(self, queues: Sequence[str], consumer: str, count: int,
                    block_ms: int) -> list[Delivery]:
        return await self._await(lambda: self._take(queues, consumer, count), block_ms,
                                 locked=False)

    def _take(self, queues: Sequence[str], consumer: str, count: int) -> list[Delivery]:
        out: list[Delivery] = []
        now = time.monotonic()
        with self._lock:
            for name in queues:
                q = self._queue(name)
                fast = self.mode_of(name) == FAST
                if not fast:  # a fast queue has no consumer group
                    self._readers.setdefault(name, set()).add(consumer)
                while q.ready and len(out) < count:
                    entry_id, payload, priority = q.ready.popleft()
                    if not fast:  # fast: popped, the worker's alone (nothing pending)
                        q.pending[entry_id] = _Pending(payload, consumer, 1, now, priority)
                    out.append(Delivery(name, entry_id, payload, 1, priority))
        return out

    async def settle(self, consumer: str, settlements: Sequence[Settlement],
                     now_ms: int, token: str | None = None) -> list[bool]:
        # Nothing is ever sent twice in-process: the token (see RedisBroker) is not needed.
        replies = []
        expires = time.monotonic() + self.record_ttl
        with self._lock:
            for s in settlements:
                q = self._queue(s.delivery.queue)
                fast = self.mode_of(s.delivery.queue) == FAST
                held = q.pending.get(s.delivery.entry_id)
                if s.indexed:  # its entry is this consumer's own: removed, owned or not
                    self._unlist_running(s.delivery.queue, consumer, s.message_id)
                if not fast and (held is None or held.consumer != consumer):
                    replies.append(False)
                    continue
                if s.kind == RUNNING:
                    if s.record:
                        self._records[(s.delivery.queue, s.message_id)] = (expires, s.record)
                    if s.body:
                        self._list_running(s.delivery.queue, consumer, s.message_id, s.body,
                                           s.due_ms)
                    if self.events_maxlen and s.started_ms:
                        self._append_event(s.delivery.queue, ev.STARTED, s.message_id, s.task,
                                           s.started_ms, s.attempt or None, consumer)
                    replies.append(True)
                    continue
                q.pending.pop(s.delivery.entry_id, None)
                if s.kind == RETRY:
                    q.schedule[s.message_id] = (s.due_ms, s.body, s.delivery.priority)
                elif s.kind == REQUEUE and fast:  # RPUSH on Redis: next in line
                    q.ready.appendleft((self._entry_id(), s.body), s.delivery.priority)
                elif s.kind == REQUEUE:
                    q.ready.append((self._entry_id(), s.body), s.delivery.priority)
                elif s.kind == DEAD:
                    q.dead[s.message_id] = s.body
                    q.dead.move_to_end(s.message_id)
                    while len(q.dead) > self.dead_letter_max:
                        q.dead.popitem(last=False)
                if s.record:
                    self._records[(s.delivery.queue, s.message_id)] = (expires, s.record)
                if s.unique_key and s.kind not in (RETRY, REQUEUE):  # final: release it
                    self._release_unique(s.delivery.queue, s.message_id, s.unique_key)
                if self.events_maxlen:
                    queue, attempt = s.delivery.queue, s.attempt or None
                    if s.started_ms:
                        self._append_event(queue, ev.STARTED, s.message_id, s.task,
                                           s.started_ms, attempt, consumer)
                    self._append_event(queue, ev.OF_STATE.get(s.state) or s.state or s.kind,
                                       s.message_id, s.task, now_ms, attempt, consumer,
                                       s.duration_ms, s.error_type,
                                       ev.failure_detail(s) if self.event_details else None)
                replies.append(True)
            self._wake()
        return replies

    async def renew(self, consumer: str, deliveries: Sequence[Delivery]) -> list[Delivery]:
        lost = []
        now = time.monotonic()
        with self._lock:
            for d in deliveries:
                if self.mode_of(d.queue) == FAST:
                    continue  # no lease: never lost
                held = self._queue(d.queue).pending.get(d.entry_id)
                if held is None or held.consumer != consumer:
                    lost.append(d)
                else:
                    held.since = now
        return lost

    async def recover(self, queue: str, consumer: str, min_idle_ms: int,
                      count: int) -> tuple[list[Delivery], list[str]]:
        # Same rule as recover.lua: at most one already-recovered entry per call.
        if self.mode_of(queue) == FAST:
            return [], []  # nothing is pending in fast mode: nothing to recover
        out: list[Delivery] = []
        now = time.monotonic()
        suspect = False
        with self._lock:
            for entry_id, held in self._queue(queue).pending.items():
                if len(out) >= count:
                    break
                if (now - held.since) * 1000 < min_idle_ms or (held.count >= 2 and suspect):
                    continue
                suspect = suspect or held.count >= 2
                if self.events_maxlen and held.consumer != consumer:
                    head = ev.peek(held.payload)
                    self._append_event(queue, ev.RECOVERED,
                                       head[0] if head else f"malformed:{entry_id}",
                                       head[1] if head else "", worker=consumer)
                held.consumer, held.count, held.since = consumer, held.count + 1, now
                out.append(Delivery(queue, entry_id, held.payload, held.count, held.priority))
            if out:
                self._wake()
        return out, []

    async def start_recovered(self, consumer: str, delivery: Delivery) -> int:
        with self._lock:
            held = self._queue(delivery.queue).pending.get(delivery.entry_id)
            if held is None or held.consumer != consumer:
                return 0
            held.since = time.monotonic()
            held.starts += 1
            return held.starts

    async def starts(self, delivery: Delivery) -> int:
        with self._lock:
            held = self._queue(delivery.queue).pending.get(delivery.entry_id)
            return held.starts if held is not None else 0

    async def promote(self, queue: str, now_ms: int, limit: int) -> tuple[int, int]:
        with self._lock:
            q = self._queue(queue)
            due = sorted((d, mid) for mid, (d, *_) in q.schedule.items() if d <= now_ms)[:limit]
            for _, mid in due:
                _, payload, priority = q.schedule.pop(mid)
                q.ready.append((self._entry_id(), payload), priority)
            nxt = min((d for d, *_ in q.schedule.values()), default=-1)
            if due:
                self._wake()
            return len(due), nxt

    async def retire(self, queues: Sequence[str], consumer: str) -> None:
        return None

    async def prune_consumers(self, queue: str, min_idle_ms: int) -> int:
        return 0  # no consumer group in memory: nothing outlives its worker

    async def take_tokens(self, bucket: str, capacity: float, refill_per_ms: float,
                          wanted: int) -> tuple[int, int]:
        """The token bucket of rate.lua, in this process (rates.take), by the wall clock."""
        with self._lock:
            buckets: dict[str, rates.Bucket] = self.__dict__.setdefault("_buckets", {})
            state, granted, wait = rates.take(buckets.get(bucket), clock_ms(),
                                              capacity, refill_per_ms, wanted)
            buckets[bucket] = state
        return granted, wait

    # -- cancellation (the steps of cancel.lua, under the lock) ------------------

    def cancel(self, queue: str, message_id: str,
               scheduled: Callable[[bytes], ScheduledCancel],
               known: bool) -> tuple[str, str | None]:
        with self._lock:
            q = self._queue(queue)
            held = q.schedule.pop(message_id, None)
            if held is not None:
                built = scheduled(held[1])
                if built.record:
                    self._records[(queue, message_id)] = (time.monotonic() + self.record_ttl,
                                                          built.record)
                self._release_unique(queue, message_id, built.unique_key)
                if self.events_maxlen:
                    self._append_event(queue, ev.CANCELLED, message_id, built.task,
                                       attempt=built.attempt)
                self._wake()
                return "cancelled", "scheduled"
            record = self._record(queue, message_id)
            if record is not None and record.is_final:
                return "finished", record.state
            if record is None and message_id in q.dead:
                return "finished", "dead_lettered"
            if record is None and known:
                return "unknown", None
            now = clock_ms()
            for key in [k for k, expiry in self._revoked.items() if expiry <= now]:
                del self._revoked[key]
            self._revoked[(queue, message_id)] = now + self.revoke_ttl * 1000
            listeners = list(self._revocation_listeners)
        for loop, on_revoked in listeners:
            if not loop.is_closed():
                loop.call_soon_threadsafe(on_revoked, queue, message_id)
        return "revoked", record.state if record is not None else None

    def _release_unique(self, queue: str, message_id: str, unique_key: str | None) -> None:
        """Drop the unique marker ``unique_key`` if ``message_id`` holds it (lock held)."""
        if unique_key:
            held = self._unique_markers.get((queue, unique_key))
            if held is not None and held[1] == message_id:
                del self._unique_markers[(queue, unique_key)]

    async def acancel(self, queue: str, message_id: str,
                      scheduled: Callable[[bytes], ScheduledCancel],
                      known: bool) -> tuple[str, str | None]:
        return self.cancel(queue, message_id, scheduled, known)

    async def revoked(self, queues: Sequence[str], now_ms: int) -> set[tuple[str, str]]:
        with self._lock:
            return {key for key, expiry in self._revoked.items()
                    if expiry > now_ms and key[0] in queues}

    async def listen_revocations(self, on_revoked: Callable[[str, str], None],
                                 on_listening: Callable[[], None]) -> None:
        """No channel in process: cancel() calls ``on_revoked`` on this loop directly."""
        entry = (asyncio.get_running_loop(), on_revoked)
        with self._lock:
            self._revocation_listeners.append(entry)
        try:
            on_listening()
            await asyncio.Event().wait()  # until cancelled
        finally:
            with self._lock:
                self._revocation_listeners.remove(entry)

    # -- events (core/events.py) -----------------------------------------------

    def _append_event(self, queue: str, kind: str, message_id: str, task: str | None,
                      time_ms: int | None = None, attempt: int | None = None,
                      worker: str | None = None, duration_ms: int | None = None,
                      error_type: str | None = None, detail: Any = None) -> None:
        """Append one event to ``queue``'s line (lock held; events on). The caller wakes
        the readers (``_wake``) once its change is complete."""
        line = self._events.get(queue)
        if line is None:
            line = self._events[queue] = deque(maxlen=self.events_maxlen)
        self._event_ms = max(self._event_ms, clock_ms())
        line.append(ev.Event(f"{self._event_ms}-{next(self._event_seq)}", queue, kind,
                             message_id, task or "", time_ms or clock_ms(), attempt, worker,
                             duration_ms, error_type, detail))

    def _events_after(self, queue: str, after: tuple[int, int], count: int) -> list[ev.Event]:
        out = []
        for event in self._events.get(queue, ()):
            if _cursor(event.cursor) > after:
                out.append(event)
                if len(out) >= count:
                    break
        return out

    def _last_cursor(self, queue: str) -> tuple[int, int]:
        line = self._events.get(queue)
        return _cursor(line[-1].cursor) if line else (0, 0)

    def last_event_cursor(self, queue: str) -> str:
        with self._lock:
            ms, seq = self._last_cursor(queue)
        return f"{ms}-{seq}"

    async def alast_event_cursor(self, queue: str) -> str:
        return self.last_event_cursor(queue)

    def events(self, queue: str, after: str, count: int, block_ms: int | None) -> list[ev.Event]:
        deadline = time.monotonic() + (block_ms or 0) / 1000
        with self._lock:
            start = self._last_cursor(queue) if after == "$" else _cursor(after)
            while True:
                out = self._events_after(queue, start, count)
                remaining = deadline - time.monotonic()
                if out or block_ms is None or remaining <= 0:
                    return out
                self._changed.wait(remaining)

    async def aevents(self, queue: str, after: str, count: int,
                      block_ms: int | None) -> list[ev.Event]:
        if block_ms is None:
            return self.events(queue, after, count, None)
        with self._lock:
            start = self._last_cursor(queue) if after == "$" else _cursor(after)
        return await self._await(lambda: self._events_after(queue, start, count), block_ms)

    async def _await(self, read: Callable[[], list[Any]], block_ms: int,
                     locked: bool = True) -> list[Any]:
        """``read()`` (under the lock when ``locked``) until it finds something or
        ``block_ms`` pass, woken by every change."""
        condition = self._condition()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block_ms / 1000
        async with condition:
            while True:
                if locked:
                    with self._lock:
                        out = read()
                else:
                    out = read()
                remaining = deadline - loop.time()
                if out or remaining <= 0:
                    return out
                try:
                    await asyncio.wait_for(condition.wait(), remaining)
                except TimeoutError:
                    pass

    def _read_group(self, queue: str, group: str, consumer: str, count: int,
                    pending: bool) -> list[ev.Event]:
        """Lock held. New events for ``group`` (marked pending for ``consumer``), or with
        ``pending`` those delivered to ``consumer`` and not acknowledged."""
        state = self._event_groups.get((queue, group))
        if state is None:
            state = self._event_groups[(queue, group)] = _EventGroup()
        if pending:
            kept = {e.cursor: e for e in self._events.get(queue, ())
                    if state.pending.get(e.cursor) == consumer}
            for cursor in [c for c, who in state.pending.items()
                           if who == consumer and c not in kept]:
                del state.pending[cursor]  # trimmed away: nothing left to deliver
            return sorted(kept.values(), key=lambda e: _cursor(e.cursor))[:count]
        out = self._events_after(queue, state.last, count)
        for event in out:
            state.pending[event.cursor] = consumer
        if out:
            state.last = _cursor(out[-1].cursor)
        return out

    def read_events(self, queue: str, group: str, consumer: str, count: int,
                    block_ms: int | None, pending: bool = False) -> list[ev.Event]:
        deadline = time.monotonic() + (block_ms or 0) / 1000
        with self._lock:
            while True:
                out = self._read_group(queue, group, consumer, count, pending)
                remaining = deadline - time.monotonic()
                if out or pending or block_ms is None or remaining <= 0:
                    return out
                self._changed.wait(remaining)

    async def aread_events(self, queue: str, group: str, consumer: str, count: int,
                           block_ms: int | None, pending: bool = False) -> list[ev.Event]:
        if block_ms is None or pending:
            return self.read_events(queue, group, consumer, count, None, pending)
        return await self._await(
            lambda: self._read_group(queue, group, consumer, count, False), block_ms)

    def ack_events(self, queue: str, group: str, cursors: Sequence[str]) -> int:
        with self._lock:
            state = self._event_groups.get((queue, group))
            if state is None:
                return 0
            return sum(state.pending.pop(c, None) is not None for c in cursors)

    async def aack_events(self, queue: str, group: str, cursors: Sequence[str]) -> int:
        return self.ack_events(queue, group, cursors)

    async def aclose(self) -> None:
        return None

    def close(self) -> None:
        return None
