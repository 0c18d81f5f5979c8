"""MemoryBroker: the broker contract inside one Python process.

Ephemeral: everything is lost when the process exits. For tests, notebooks and
scripts. It keeps the same semantics as RedisBroker (pending entries owned by a
consumer, delivery counts, recovery of idle entries, schedule, dead letters,
records with TTL) so the engine's behaviour tests run against both.
Producers may call it from any thread; waiting readers are woken through an
asyncio.Condition on their own loop (or a threading.Condition for sync callers).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core import limits
from ..core.deadletter import DeadLetter
from ..core.record import Record
from .base import DEAD, REQUEUE, RETRY, RUNNING, Delivery, Enqueue, Settlement


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Pending:
    payload: bytes | None
    consumer: str
    count: int
    since: float  # monotonic time of the last delivery or renewal


@dataclass
class _Queue:
    ready: deque[tuple[str, bytes]] = field(default_factory=deque)
    pending: dict[str, _Pending] = field(default_factory=dict)
    schedule: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    dead: OrderedDict[str, bytes] = field(default_factory=OrderedDict)


class MemoryBroker:
    url = "memory://"

    def __init__(self, *, record_ttl: int = 86400, idempotency_ttl: int = 86400,
                 dead_letter_max: int = 100_000) -> None:
        limits.check_all(record_ttl=record_ttl, idempotency_ttl=idempotency_ttl,
                         dead_letter_max=dead_letter_max)
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
        self._readers: dict[str, set[str]] = {}  # queue -> consumers that read it

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

            loop.call_soon_threadsafe(lambda n=notify: asyncio.ensure_future(n()))

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
                if item.idempotency_key:
                    held = self._unique.get((item.queue, item.idempotency_key))
                    if held and held[0] > now:
                        ids.append(held[1])
                        continue
                    self._unique[(item.queue, item.idempotency_key)] = (
                        now + self.idempotency_ttl, item.message_id)
                if item.due_ms:
                    q.schedule[item.message_id] = (item.due_ms, item.payload)
                else:
                    q.ready.append((self._entry_id(), item.payload))
                if item.record:
                    expires = now + self.record_ttl
                    self._records[(item.queue, item.message_id)] = (expires, item.record)
                ids.append(item.message_id)
            self._wake()
        return ids

    async def aenqueue(self, items: Sequence[Enqueue]) -> list[str]:
        return self.enqueue(items)

    def _entry_id(self) -> str:
        # Shaped like a stream id (ms-sequence), so a ready entry's age reads off its id.
        return f"{_now_ms()}-{next(self._entry_ids)}"

    # -- reading state -------------------------------------------------------

    def _record(self, queue: str, message_id: str) -> Record | None:
        held = self._records.get((queue, message_id))
        if held is None:
            return None
        if held[0] <= time.monotonic():
            del self._records[(queue, message_id)]
            return None
        return Record.from_bytes(held[1])

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
            if q.ready:
                age = max(0, _now_ms() - int(q.ready[0][0].partition("-")[0]))
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

    async def heartbeat(self, name: str, info: bytes, now_ms: int, ttl_ms: int) -> None:
        with self._lock:
            self._workers[name] = (now_ms + ttl_ms, info)
            for other in [n for n, (exp, _) in self._workers.items() if exp < now_ms]:
                del self._workers[other]

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
            for dead_id, new_id, payload in items:
                if q.dead.pop(dead_id, None) is not None:
                    self._records.pop((queue, new_id), None)
                    q.ready.append((self._entry_id(), payload))
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
        condition = self._condition()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block_ms / 1000
        async with condition:
            while True:
                out = self._take(queues, consumer, count)
                remaining = deadline - loop.time()
                if out or remaining <= 0:
                    return out
                try:
                    await asyncio.wait_for(condition.wait(), remaining)
                except TimeoutError:
                    pass

    def _take(self, queues: Sequence[str], consumer: str, count: int) -> list[Delivery]:
        out: list[Delivery] = []
        now = time.monotonic()
        with self._lock:
            for name in queues:
                q = self._queue(name)
                self._readers.setdefault(name, set()).add(consumer)
                while q.ready and len(out) < count:
                    entry_id, payload = q.ready.popleft()
                    q.pending[entry_id] = _Pending(payload, consumer, 1, now)
                    out.append(Delivery(name, entry_id, payload, 1))
        return out

    async def settle(self, consumer: str, settlements: Sequence[Settlement],
                     now_ms: int, token: str | None = None) -> list[bool]:
        # Nothing is ever sent twice in-process: the token (see RedisBroker) is not needed.
        replies = []
        expires = time.monotonic() + self.record_ttl
        with self._lock:
            for s in settlements:
                q = self._queue(s.delivery.queue)
                held = q.pending.get(s.delivery.entry_id)
                if held is None or held.consumer != consumer:
                    replies.append(False)
                    continue
                if s.kind == RUNNING:
                    self._records[(s.delivery.queue, s.message_id)] = (expires, s.record)
                    replies.append(True)
                    continue
                del q.pending[s.delivery.entry_id]
                if s.kind == RETRY:
                    q.schedule[s.message_id] = (s.due_ms, s.body)
                elif s.kind == REQUEUE:
                    q.ready.append((self._entry_id(), s.body))
                elif s.kind == DEAD:
                    q.dead[s.message_id] = s.body
                    q.dead.move_to_end(s.message_id)
                    while len(q.dead) > self.dead_letter_max:
                        q.dead.popitem(last=False)
                if s.record:
                    self._records[(s.delivery.queue, s.message_id)] = (expires, s.record)
                replies.append(True)
            self._wake()
        return replies

    async def renew(self, consumer: str, deliveries: Sequence[Delivery]) -> list[str]:
        lost = []
        now = time.monotonic()
        with self._lock:
            for d in deliveries:
                held = self._queue(d.queue).pending.get(d.entry_id)
                if held is None or held.consumer != consumer:
                    lost.append(d.entry_id)
                else:
                    held.since = now
        return lost

    async def recover(self, queue: str, consumer: str, min_idle_ms: int,
                      count: int) -> tuple[list[Delivery], list[str]]:
        # Same rule as recover.lua: at most one already-recovered entry per call.
        out = []
        now = time.monotonic()
        suspect = False
        with self._lock:
            for entry_id, held in self._queue(queue).pending.items():
                if len(out) >= count:
                    break
                if (now - held.since) * 1000 < min_idle_ms or (held.count >= 2 and suspect):
                    continue
                suspect = suspect or held.count >= 2
                held.consumer, held.count, held.since = consumer, held.count + 1, now
                out.append(Delivery(queue, entry_id, held.payload, held.count))
        return out, []

    async def promote(self, queue: str, now_ms: int, limit: int) -> tuple[int, int]:
        with self._lock:
            q = self._queue(queue)
            due = sorted((d, mid) for mid, (d, _) in q.schedule.items() if d <= now_ms)[:limit]
            for _, mid in due:
                _, payload = q.schedule.pop(mid)
                q.ready.append((self._entry_id(), payload))
            nxt = min((d for d, _ in q.schedule.values()), default=-1)
            if due:
                self._wake()
            return len(due), nxt

    async def retire(self, queues: Sequence[str], consumer: str) -> None:
        return None

    async def prune_consumers(self, queue: str, min_idle_ms: int) -> int:
        return 0  # no consumer group in memory: nothing outlives its worker

    async def aclose(self) -> None:
        return None

    def close(self) -> None:
        return None
