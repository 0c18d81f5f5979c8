"""The scheduler's state on Redis (capabilities.PeriodicStore): claims by periodic.lua,
the reads behind ``Client.schedules()``, the schedules' version and the channels
schedulers and promoters listen on (periodic_ops.py builds the ops)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from . import periodic_ops
from .periodic_ops import Occurrence
from .store import mapped_errors

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
        return self.broker.records(queue, message_ids)

    async def version(self) -> int:
        return await self.broker.aio.run(periodic_ops.schedules_version(self.keys))

    def changed(self) -> int:
        version, _listeners = self.broker.sync.run_many(
            periodic_ops.schedules_changed(self.keys))
        return version

    async def listen_changes(self, on_change: Callable[[], None],
                             on_listening: Callable[[], None] | None = None) -> None:
        await self._listen([self.keys.schedules_channel], on_change, on_listening, False)

    async def listen_wakeups(self, queues: Sequence[str], on_wake: Callable[[], None]) -> None:
        await self._listen([self.keys.queue(q).wake_channel for q in queues], on_wake, None,
                           True)

    async def _listen(self, channels: Sequence[str], on_message: Callable[[], None],
                      on_listening: Callable[[], None] | None, sharded: bool) -> None:
        """Call ``on_message()`` for each publish on ``channels`` until cancelled (one
        connection of its own; per node for a queue's channels on a cluster)."""
        with mapped_errors(self.broker.url):
            pubsub = self.broker.aio.listener(sharded)
            try:
                await pubsub.subscribe(*channels)
                if on_listening is not None:
                    on_listening()
                while True:
                    if await pubsub.get(LISTEN_POLL_S) is None:
                        continue
                    on_message()
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
