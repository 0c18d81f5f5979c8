"""The feature stores of capabilities.py inside one process, for MemoryBroker: the same
semantics as engine/redis/'s (claims and leases atomic under a lock, the lease expiring),
kept on the broker, so they live and die with it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from ..core import events, workflow
from .base import Enqueue
from .capabilities import EventsRead, Occurrence

#: How often a follower re-reads a message here, where nothing is pushed to it.
WATCH_POLL_S = 0.05


class MemoryLease:
    """A lease of ``leases`` (shared by every lease of one broker), under its lock."""

    def __init__(self, leases: dict[tuple[str, str], tuple[str, float]],
                 lock: threading.Lock, queue: str, purpose: str, token: str,
                 ttl_ms: int) -> None:
        self._leases, self._lock = leases, lock
        self.key, self.token, self.ttl_ms = (queue, purpose), token, ttl_ms

    def hold(self) -> bool:
        now = time.monotonic()
        with self._lock:
            held = self._leases.get(self.key)
            if held is not None and held[0] != self.token and held[1] > now:
                return False
            self._leases[self.key] = (self.token, now + self.ttl_ms / 1000)
            return True

    def release(self) -> None:
        with self._lock:
            held = self._leases.get(self.key)
            if held is not None and held[0] == self.token:
                del self._leases[self.key]


class _Poll:
    async def wait(self, timeout: float) -> None:
        await asyncio.sleep(min(timeout, WATCH_POLL_S))


class MemoryProgressStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: dict[tuple[str, str], dict[str, str]] = {}

    def write(self, queue: str, message_id: str, fields: Mapping[str, str]) -> None:
        with self._lock:
            self._reports.setdefault((queue, message_id), {}).update(fields)

    async def awrite(self, queue: str, message_id: str, fields: Mapping[str, str],
                     publish: bytes | None = None) -> None:
        self.write(queue, message_id, fields)

    def read(self, queue: str, message_id: str) -> dict[str, str]:
        with self._lock:
            return dict(self._reports.get((queue, message_id), {}))

    async def aread(self, queue: str, message_id: str) -> dict[str, str]:
        return self.read(queue, message_id)

    def read_many(self, which: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        return [self.read(queue, message_id) for queue, message_id in which]

    async def aread_many(self, which: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        return self.read_many(which)

    @contextlib.asynccontextmanager
    async def watch(self, queue: str, message_id: str) -> AsyncIterator[_Poll]:
        yield _Poll()


class MemoryPeriodicStore:
    """Claims under a lock; a change is told to the listeners on their own loops."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], int] = {}
        self._last: dict[tuple[str, str], bytes] = {}
        self._version = 0
        self._listeners: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []

    async def handled(self, queue: str, names: Sequence[str]) -> list[int | None]:
        return [self._claims.get((queue, n)) for n in names]

    async def claim(self, queue: str, priority: str | None, name: str, through_ms: int,
                    occurrences: Sequence[Occurrence], info: bytes) -> tuple[int, int]:
        with self._lock:
            last = self._claims.get((queue, name), -1)
            if last >= through_ms:
                return 0, last
            self._claims[(queue, name)] = through_ms
            items = [Enqueue(queue, message_id, payload, 0, record, priority=priority,
                             task=(events.peek(payload) or ("", ""))[1])
                     for occurrence_ms, message_id, payload, record, _event in occurrences
                     if occurrence_ms > last]
            if items:
                self._last[(queue, name)] = info
        if items:
            await self.broker.aenqueue(items)
        return len(items), last

    def read(self, queue: str, names: Sequence[str]
             ) -> tuple[list[int | None], list[bytes | None]]:
        return ([self._claims.get((queue, n)) for n in names],
                [self._last.get((queue, n)) for n in names])

    def records(self, queue: str, message_ids: Sequence[str]) -> list[bytes | None]:
        return self.broker.records(queue, message_ids)

    async def version(self) -> int:
        return self._version

    def changed(self) -> int:
        with self._lock:
            self._version += 1
            listeners = list(self._listeners)
        for loop, callback in listeners:
            with contextlib.suppress(RuntimeError):  # a closed loop
                loop.call_soon_threadsafe(callback)
        return self._version

    async def listen_changes(self, on_change: Callable[[], None],
                             on_listening: Callable[[], None] | None = None) -> None:
        entry = (asyncio.get_running_loop(), on_change)
        with self._lock:
            self._listeners.append(entry)
        try:
            if on_listening is not None:
                on_listening()
            await asyncio.Event().wait()  # until cancelled
        finally:
            with self._lock:
                self._listeners.remove(entry)

    async def listen_wakeups(self, queues: Sequence[str], on_wake: Callable[[], None]) -> None:
        """Never called: a promoter of the memory broker polls."""
        await asyncio.Event().wait()  # until cancelled


class MemoryMetricsStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, str]] = {}
        self._starts: dict[str, dict[str, int]] = {}

    def read(self, queue: str) -> dict[str, str]:
        with self._lock:
            return dict(self._counts.get(queue, {}))

    def cursor(self, queue: str) -> str:
        return self.read(queue).get("cursor", "0")

    def enqueue_times(self, queue: str, message_ids: Sequence[str]) -> list[int | None]:
        with self._lock:
            starts = self._starts.get(queue, {})
            return [starts.get(i) for i in message_ids]

    def add(self, queue: str, incr: Mapping[str, int], cursor: str, gone: Sequence[str],
            enqueued: Mapping[str, int], max_starts: int) -> None:
        with self._lock:
            counts = self._counts.setdefault(queue, {})
            for name, n in incr.items():
                counts[name] = str(int(counts.get(name, "0")) + n)
            counts["cursor"] = cursor
            starts = self._starts.setdefault(queue, {})
            for message_id in gone:
                starts.pop(message_id, None)
            if enqueued:
                starts.update(enqueued)
                if len(starts) > max_starts:
                    starts.clear()


class MemoryAttachmentStore:
    """Kept until the broker goes (no TTL: a process's messages do not outlive it)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._values: dict[tuple[str, str], bytes] = {}

    def write(self, queue: str, message_id: str, data: bytes, ttl_ms: int) -> None:
        self._values[(queue, message_id)] = data

    async def awrite(self, queue: str, message_id: str, data: bytes, ttl_ms: int) -> None:
        self.write(queue, message_id, data, ttl_ms)

    def read(self, queue: str, message_id: str) -> bytes | None:
        return self._values.get((queue, message_id))

    def read_with_record(self, queue: str, message_id: str
                         ) -> tuple[bytes | None, bytes | None]:
        (record,) = self.broker.records(queue, [message_id])
        return record, self.read(queue, message_id)

    async def aread_with_record(self, queue: str, message_id: str
                                ) -> tuple[bytes | None, bytes | None]:
        return self.read_with_record(queue, message_id)


class MemoryHistoryStore:
    """Nothing trims the events here under a writer: nothing is lost."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._lock = threading.Lock()
        self._health: dict[str, dict[str, str]] = {}

    def read(self, queue: str, group: str, consumer: str, count: int, keep_events: int,
             block_ms: int | None) -> EventsRead:
        if not count:
            return EventsRead([])
        return EventsRead(self.broker.read_events(queue, group, consumer, count, block_ms))

    def add_unwritable(self, queue: str, time_ms: int, text: str) -> None:
        with self._lock:
            found = self._health.setdefault(queue, {})
            found["unwritable"] = str(int(found.get("unwritable", "0")) + 1)
            found["unwritable_last_ms"], found["unwritable_last"] = str(time_ms), text

    def health(self, queue: str, group: str) -> tuple[dict[str, str], int | None]:
        with self._lock:
            return dict(self._health.get(queue, {})), None


class MemoryWorkflowStore:
    """Workflows in one process: core/workflow.py's steps on one dict per workflow, each
    under the broker's lock (what workflow.lua is on Redis)."""

    def __init__(self, broker: Any) -> None:
        self._broker = broker
        self._flows: dict[str, dict[str, Any]] = {}

    def _run(self, workflow_id: str, step: Callable[[dict[str, Any]], Any],
             create: bool = False) -> Any:
        broker = self._broker
        with broker._lock:
            h = self._flows.get(workflow_id)
            if h is None:
                if not create:
                    h = {}
                else:
                    h = self._flows[workflow_id] = {}
            out = step(h)
            broker._wake()
            return out

    def start(self, workflow_id: str, now_ms: int, home: str, nodes: Sequence[Any],
              members: Mapping[int, bytes], on_error: bytes | None) -> Any:
        return self._run(workflow_id, lambda h: workflow.start(
            h, workflow_id=workflow_id, now_ms=now_ms, home=home, nodes=nodes,
            members=dict(members), on_error=on_error), create=True)

    async def astart(self, workflow_id: str, now_ms: int, home: str, nodes: Sequence[Any],
                     members: Mapping[int, bytes], on_error: bytes | None) -> Any:
        return self.start(workflow_id, now_ms, home, nodes, members, on_error)

    def settle(self, workflow_id: str, at: int | str, state: str, value: bytes,
               outcome: bytes, failure: bytes, now_ms: int) -> Any:
        return self._run(workflow_id, lambda h: workflow.settle(
            h, at=at, state=state, value_=value, outcome=outcome, failure=failure,
            now_ms=now_ms))

    async def asettle(self, workflow_id: str, at: int | str, state: str, value: bytes,
                      outcome: bytes, failure: bytes, now_ms: int) -> Any:
        return self.settle(workflow_id, at, state, value, outcome, failure, now_ms)

    async def asettle_many(self, items: Sequence[tuple[str, int | str, str, bytes, bytes,
                                                       bytes, int]]) -> list[Any]:
        return [self.settle(*item) for item in items]

    def cancel(self, workflow_id: str, now_ms: int) -> tuple[str, list[bytes]]:
        return self._run(workflow_id, lambda h: workflow.cancel(h, now_ms=now_ms))  # type: ignore[no-any-return]

    async def acancel(self, workflow_id: str, now_ms: int) -> tuple[str, list[bytes]]:
        return self.cancel(workflow_id, now_ms)

    def read(self, workflow_id: str) -> dict[str, bytes]:
        with self._broker._lock:
            h = self._flows.get(workflow_id, {})
            return {k: v if isinstance(v, bytes) else str(v).encode() for k, v in h.items()}

    async def aread(self, workflow_id: str) -> dict[str, bytes]:
        return self.read(workflow_id)

    def fields(self, workflow_id: str, names: Sequence[str]) -> list[bytes | None]:
        found = self.read(workflow_id)
        return [found.get(name) for name in names]

    async def afields(self, workflow_id: str, names: Sequence[str]) -> list[bytes | None]:
        return self.fields(workflow_id, names)

    def _state(self, workflow_id: str) -> str:
        h = self._flows.get(workflow_id)
        return "" if h is None else str(h.get("state", ""))

    def wait(self, workflow_id: str, timeout: float) -> str:
        deadline = time.monotonic() + max(timeout, 0.0)
        broker = self._broker
        with broker._lock:
            while True:
                state = self._state(workflow_id)
                remaining = deadline - time.monotonic()
                if state in workflow.FINAL or remaining <= 0:
                    return state
                broker._changed.wait(remaining)

    async def await_final(self, workflow_id: str, timeout: float) -> str:
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            with self._broker._lock:
                state = self._state(workflow_id)
            remaining = deadline - time.monotonic()
            if state in workflow.FINAL or remaining <= 0:
                return state
            await asyncio.sleep(min(remaining, WATCH_POLL_S / 5))

    def emit(self, queue: str, event: bytes) -> None:
        broker = self._broker
        if not broker.events_maxlen:
            return
        found = events.parse("0-0", queue, event)
        if found is None:
            return
        with broker._lock:
            broker._append_event(queue, found.kind, found.id, found.task, found.time_ms,
                                 found.attempt, found.worker, found.duration_ms,
                                 found.error_type)
            broker._wake()

    async def aemit(self, queue: str, event: bytes) -> None:
        self.emit(queue, event)
