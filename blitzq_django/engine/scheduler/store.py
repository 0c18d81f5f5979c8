"""Where the scheduler's state lives: Redis (``RedisBroker``) or the memory broker.

The one write that matters is ``claim``: it marks a schedule's occurrences handled and
dispatches them in one atomic step (periodic.lua on Redis; a lock in memory), so any
number of schedulers dispatch each occurrence once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..brokers.base import Enqueue
from ..brokers.redis import periodic_ops
from ..brokers.redis.periodic_ops import Occurrence
from ..brokers.redis.store import mapped_errors
from ..core import events

log = logging.getLogger("blitzq.scheduler")

LISTEN_POLL_S = 5.0  # a listener checks its connection at least this often


class RedisPeriodicStore:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.keys = broker.keys

    async def handled(self, queue: str, names: Sequence[str]) -> list[int | None]:
        return await self.broker.aio.run(periodic_ops.handled(self.keys.queue(queue), names))

    async def claim(self, queue: str, priority: str | None, name: str, through_ms: int,
                    occurrences: Sequence[Occurrence], info: bytes) -> tuple[int, int]:
        op = periodic_ops.claim(self.keys.queue(queue, priority), name, through_ms, occurrences,
                                info=info, record_ttl=self.broker.record_ttl,
                                events_maxlen=self.broker.events_maxlen,
                                mode=self.broker.storage_mode(queue))
        if occurrences:
            await self.broker.asee_queues((queue,))  # runworker serves the queues seen
        return await self.broker.aio.run(op)

    def read(self, queue: str, names: Sequence[str]
             ) -> tuple[list[int | None], list[bytes | None]]:
        keys = self.keys.queue(queue)
        handled, last = self.broker.sync.run_many([periodic_ops.handled(keys, names),
                                                   periodic_ops.last_dispatches(keys, names)])
        return handled, last

    def records(self, queue: str, message_ids: Sequence[str]) -> list[bytes | None]:
        if not message_ids:
            return []
        return self.broker.sync.run(periodic_ops.records(self.keys.queue(queue), message_ids))

    async def version(self) -> int:
        return await self.broker.aio.run(periodic_ops.schedules_version(self.keys))

    def changed(self) -> int:
        version, _listeners = self.broker.sync.run_many(
            periodic_ops.schedules_changed(self.keys))
        return version

    async def listen(self, channels: Sequence[str], on_message: Callable[[str, bytes], None],
                     on_listening: Callable[[], None] | None = None) -> None:
        """Call ``on_message(channel, data)`` for each publish on ``channels`` until
        cancelled (one connection of its own)."""
        with mapped_errors(self.broker.url):
            pubsub = self.broker.aio.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(*channels)
                if on_listening is not None:
                    on_listening()
                while True:
                    message = await pubsub.get_message(timeout=LISTEN_POLL_S)
                    if message is None or message.get("type") != "message":
                        continue
                    channel = message["channel"]
                    on_message(channel.decode() if isinstance(channel, bytes) else channel,
                               message["data"])
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()


class MemoryPeriodicStore:
    """The same on a MemoryBroker (one process): claims under a lock."""

    _lock = threading.Lock()

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        state = getattr(broker, "_blitzq_periodic", None)
        if state is None:
            state = {"claims": {}, "last": {}, "version": 0, "listeners": []}
            broker._blitzq_periodic = state
        self.state = state

    async def handled(self, queue: str, names: Sequence[str]) -> list[int | None]:
        return [self.state["claims"].get((queue, n)) for n in names]

    async def claim(self, queue: str, priority: str | None, name: str, through_ms: int,
                    occurrences: Sequence[Occurrence], info: bytes) -> tuple[int, int]:
        with self._lock:
            last = self.state["claims"].get((queue, name), -1)
            if last >= through_ms:
                return 0, last
            self.state["claims"][(queue, name)] = through_ms
            items = [Enqueue(queue, message_id, payload, 0, record, priority=priority,
                             task=(events.peek(payload) or ("", ""))[1])
                     for occurrence_ms, message_id, payload, record, _event in occurrences
                     if occurrence_ms > last]
            if items:
                self.state["last"][(queue, name)] = info
        if items:
            await self.broker.aenqueue(items)
        return len(items), last

    def read(self, queue: str, names: Sequence[str]
             ) -> tuple[list[int | None], list[bytes | None]]:
        return ([self.state["claims"].get((queue, n)) for n in names],
                [self.state["last"].get((queue, n)) for n in names])

    def records(self, queue: str, message_ids: Sequence[str]) -> list[bytes | None]:
        out = []
        for message_id in message_ids:
            record = self.broker.get_record(queue, message_id)
            out.append(None if record is None else record.to_bytes())
        return out

    async def version(self) -> int:
        return self.state["version"]

    def changed(self) -> int:
        self.state["version"] += 1
        for loop, callback in list(self.state["listeners"]):
            with contextlib.suppress(RuntimeError):  # a closed loop
                loop.call_soon_threadsafe(callback, "schedules", b"changed")
        return self.state["version"]

    async def listen(self, channels: Sequence[str], on_message: Callable[[str, bytes], None],
                     on_listening: Callable[[], None] | None = None) -> None:
        entry = (asyncio.get_running_loop(), on_message)
        self.state["listeners"].append(entry)
        try:
            if on_listening is not None:
                on_listening()
            await asyncio.Event().wait()  # until cancelled
        finally:
            self.state["listeners"].remove(entry)


def store_of(broker: Any) -> RedisPeriodicStore | MemoryPeriodicStore:
    if hasattr(type(broker), "aio") and hasattr(broker, "keys"):
        return RedisPeriodicStore(broker)
    return MemoryPeriodicStore(broker)
