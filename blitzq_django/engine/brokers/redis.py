"""RedisBroker: reliable mode on Redis streams (at-least-once).

Producers use a sync redis-py client (one round trip per enqueue, no event
loop); async code and workers use redis.asyncio. Both run the same ops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import redis.asyncio

from ..core import limits
from ..core.record import Record
from ..errors import BrokerError, BrokerUnavailable
from ..redis import ops
from ..redis.keys import Keyspace
from ..redis.ops import Op
from ..redis.store import (
    AsyncStore,
    SyncStore,
    client_options,
    dedicated_pool,
    mapped_errors,
    redact,
    run_until,
)
from .base import Delivery, Enqueue, Settlement

log = logging.getLogger("blitzq.broker")

RESULT_POLL_S = 5.0  # safety net under pub/sub wake-ups: a lost notification costs this
#: How far past its timeout a result wait may run: the last read of the record gets this
#: long to answer before a silent Redis counts as unavailable.
REPLY_GRACE_S = 0.25


def _now_ms() -> int:
    return int(time.time() * 1000)


class RedisBroker:
    mode = "s"

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        namespace: str = "blitzq",
        record_ttl: int = 86400,
        idempotency_ttl: int = 86400,
        dead_letter_max: int = 100_000,
        redis_options: dict[str, Any] | None = None,
        sync_client: redis.Redis | None = None,
    ) -> None:
        limits.check_all(record_ttl=record_ttl, idempotency_ttl=idempotency_ttl,
                         dead_letter_max=dead_letter_max)
        self.url = url
        self.keys = Keyspace(namespace)
        self.record_ttl = record_ttl
        self.idempotency_ttl = idempotency_ttl
        self.dead_letter_max = dead_letter_max
        self._options = redis_options or {}
        self._sync = SyncStore(sync_client, url) if sync_client is not None else None
        self._async: dict[asyncio.AbstractEventLoop, AsyncStore] = {}

    # -- connections ---------------------------------------------------------

    @property
    def sync(self) -> SyncStore:
        if self._sync is None:
            self._sync = SyncStore.from_url(self.url, self._options)
        return self._sync

    @property
    def aio(self) -> AsyncStore:
        # redis.asyncio connections belong to the loop that opened them.
        loop = asyncio.get_running_loop()
        store = self._async.get(loop)
        if store is None:
            for old in [old for old in self._async if old.is_closed()]:
                del self._async[old]
            store = self._async[loop] = AsyncStore.from_url(self.url, self._options)
        return store

    def ping(self) -> None:
        self.sync.run(Op(command=("PING",)))

    # -- producing -----------------------------------------------------------

    def _enqueue_op(self, item: Enqueue) -> Op:
        keys = self.keys.queue(item.queue)
        if not (item.due_ms or item.record or item.idempotency_key):
            if self.mode == "s":
                return ops.xadd(keys, item.payload)
            return ops.lpush(keys, item.payload)
        return ops.enqueue(
            keys,
            payload=item.payload,
            message_id=item.message_id,
            due_ms=item.due_ms,
            record=item.record,
            record_ttl=self.record_ttl,
            idempotency_key=item.idempotency_key,
            idempotency_ttl=self.idempotency_ttl,
            mode=self.mode,
        )

    @staticmethod
    def _ids(items: Sequence[Enqueue], replies: list[Any]) -> list[str]:
        # A deduplicated enqueue answers with the id already holding the key.
        pairs = zip(items, replies, strict=True)
        return [r[1] if isinstance(r, tuple) else i.message_id for i, r in pairs]

    def enqueue(self, items: Sequence[Enqueue]) -> list[str]:
        if len(items) == 1:
            return self._ids(items, [self.sync.run(self._enqueue_op(items[0]))])
        return self._ids(items, self.sync.run_many([self._enqueue_op(i) for i in items]))

    async def aenqueue(self, items: Sequence[Enqueue]) -> list[str]:
        if len(items) == 1:
            return self._ids(items, [await self.aio.run(self._enqueue_op(items[0]))])
        return self._ids(items, await self.aio.run_many([self._enqueue_op(i) for i in items]))

    # -- reading state -------------------------------------------------------

    def get_record(self, queue: str, message_id: str) -> Record | None:
        data = self.sync.run(ops.get(self.keys.queue(queue).record(message_id)))
        return Record.from_bytes(data) if data else None

    async def aget_record(self, queue: str, message_id: str) -> Record | None:
        data = await self.aio.run(ops.get(self.keys.queue(queue).record(message_id)))
        return Record.from_bytes(data) if data else None

    def scheduled_due_ms(self, queue: str, message_id: str) -> int | None:
        score = self.sync.run(ops.zscore(self.keys.queue(queue).schedule, message_id))
        return None if score is None else int(score)

    def scheduled_payload(self, queue: str, message_id: str) -> bytes | None:
        return self.sync.run(ops.hget(self.keys.queue(queue).schedule_data, message_id))

    def dead_letter(self, queue: str, message_id: str) -> bytes | None:
        return self.sync.run(ops.hget(self.keys.queue(queue).dead_letter_data, message_id))

    def wait_record(self, queue: str, message_id: str, timeout: float) -> Record | None:
        """Wait for a final record: woken by pub/sub, re-checking after every wake-up.

        Returns by ``timeout`` + REPLY_GRACE_S even when Redis stalls: the wait runs on
        connections of its own that never block past that deadline, and a reply that does
        not come by then raises BrokerUnavailable.
        """
        keys = self.keys.queue(queue)
        get = ops.get(keys.record(message_id))
        deadline = time.monotonic() + max(timeout, 0.0)
        limit = deadline + REPLY_GRACE_S
        pool = dedicated_pool(self.sync.client, limit - time.monotonic())
        pubsub: redis.client.PubSub | None = None
        connection = pool.make_connection()
        with mapped_errors(self.url):
            try:
                while True:
                    data = run_until(connection, get, limit)
                    record = Record.from_bytes(data) if data else None
                    remaining = deadline - time.monotonic()
                    if (record is not None and record.is_final) or remaining <= 0:
                        return record
                    if pubsub is None:
                        # Subscribed only once waiting is needed. The first get_message below
                        # takes the subscription's confirmation, so the next GET runs
                        # subscribed: a record written from then on also wakes us up.
                        pubsub = redis.client.PubSub(pool, ignore_subscribe_messages=True)
                        pubsub.subscribe(keys.done_channel(message_id))
                    pubsub.get_message(timeout=min(remaining, RESULT_POLL_S))
            finally:
                if pubsub is not None:
                    pubsub.close()
                connection.disconnect()

    async def await_record(self, queue: str, message_id: str, timeout: float) -> Record | None:
        """As wait_record; one asyncio deadline bounds the whole wait."""
        try:
            async with asyncio.timeout(max(timeout, 0.0) + REPLY_GRACE_S):
                return await self._await_record(queue, message_id, timeout)
        except TimeoutError as exc:
            raise BrokerUnavailable(f"Redis at {redact(self.url)} did not answer within "
                                    f"{timeout + REPLY_GRACE_S:g} s") from exc

    async def _await_record(self, queue: str, message_id: str,
                            timeout: float) -> Record | None:
        keys = self.keys.queue(queue)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        with mapped_errors(self.url):
            pubsub = self.aio.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(keys.done_channel(message_id))
                while True:
                    record = await self.aget_record(queue, message_id)
                    remaining = deadline - loop.time()
                    if (record is not None and record.is_final) or remaining <= 0:
                        return record
                    await pubsub.get_message(timeout=min(remaining, RESULT_POLL_S))
            finally:
                await pubsub.aclose()

    def queue_stats(self, queue: str) -> dict[str, int | None]:
        """Counts of one queue (see QueueStats), in one read-only script call."""
        return self.sync.run(ops.stats(self.keys.queue(queue), _now_ms()))

    async def aqueue_stats(self, queue: str) -> dict[str, int | None]:
        return await self.aio.run(ops.stats(self.keys.queue(queue), _now_ms()))

    def purge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]:
        """Drop ready and scheduled messages (dead letters when asked); see purge.lua."""
        return self.sync.run(ops.purge(self.keys.queue(queue), force, dead_letters))

    async def apurge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]:
        return await self.aio.run(ops.purge(self.keys.queue(queue), force, dead_letters))

    def workers(self, now_ms: int) -> list[bytes]:
        """Encoded WorkerInfo of every worker whose entry has not expired."""
        return self.sync.run(ops.workers(self.keys, now_ms))

    async def aworkers(self, now_ms: int) -> list[bytes]:
        return await self.aio.run(ops.workers(self.keys, now_ms))

    # -- dead letters --------------------------------------------------------

    def _dl_ids(self, queue: str, min_ms: int, max_ms: int) -> Op:
        return ops.dead_letter_ids(self.keys.queue(queue), min_ms, max_ms)

    def _dl_replay(self, queue: str, items: Sequence[tuple[str, str, bytes]]) -> Op:
        return ops.replay_dead_letters(self.keys.queue(queue), items, self.mode)


    def dead_letter_ids(self, queue: str, min_ms: int, max_ms: int) -> list[str]:
        return self.sync.run(self._dl_ids(queue, min_ms, max_ms))

    async def adead_letter_ids(self, queue: str, min_ms: int, max_ms: int) -> list[str]:
        return await self.aio.run(self._dl_ids(queue, min_ms, max_ms))

    def dead_letter_bodies(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        return self.sync.run(ops.dead_letter_bodies(self.keys.queue(queue), ids)) if ids else []

    async def adead_letter_bodies(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        if not ids:
            return []
        return await self.aio.run(ops.dead_letter_bodies(self.keys.queue(queue), ids))

    def replay_dead_letters(self, queue: str, items: Sequence[tuple[str, str, bytes]]) -> int:
        return self.sync.run(self._dl_replay(queue, items)) if items else 0

    async def areplay_dead_letters(self, queue: str,
                                   items: Sequence[tuple[str, str, bytes]]) -> int:
        return await self.aio.run(self._dl_replay(queue, items)) if items else 0

    def remove_dead_letters(self, queue: str, ids: Sequence[str]) -> int:
        return self.sync.run(ops.remove_dead_letters(self.keys.queue(queue), ids)) if ids else 0

    async def aremove_dead_letters(self, queue: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        return await self.aio.run(ops.remove_dead_letters(self.keys.queue(queue), ids))

    def purge_dead_letters(self, queue: str) -> int:
        return self.sync.run(ops.purge_dead_letters(self.keys.queue(queue)))

    async def apurge_dead_letters(self, queue: str) -> int:
        return await self.aio.run(ops.purge_dead_letters(self.keys.queue(queue)))

    # -- worker --------------------------------------------------------------

    async def prepare(self, queues: Sequence[str]) -> None:
        for queue in queues:
            try:
                await self.aio.run(ops.create_group(self.keys.queue(queue)))
            except BrokerError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def fetch(self, queues: Sequence[str], consumer: str, count: int,
                    block_ms: int) -> list[Delivery]:
        by_stream = {self.keys.queue(q).stream: q for q in queues}
        op = ops.read_group([self.keys.queue(q) for q in queues], consumer, count, block_ms)
        try:
            entries = await self.aio.run(op)
        except Exception as exc:
            if "NOGROUP" in str(exc):
                log.error("the consumer group of %s is gone (Redis restarted without "
                          "persistence, or the stream was deleted): recreating it", queues)
                await self.prepare(queues)
                return []
            raise
        return [Delivery(by_stream[s], entry_id, payload) for s, entry_id, payload in entries]

    async def settle(self, consumer: str, settlements: Sequence[Settlement],
                     now_ms: int, token: str | None = None) -> list[bool]:
        token = token or os.urandom(8).hex()
        by_queue: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(settlements):
            by_queue[s.delivery.queue].append(i)
        batch = []
        for queue, indexes in by_queue.items():
            keys = self.keys.queue(queue)
            items: list[tuple[str, str, str, bytes, int, bytes, int]] = []
            for i in indexes:
                s = settlements[i]
                items.append((s.kind, s.delivery.entry_id, s.message_id, s.record,
                              int(s.notify), s.body, s.due_ms))
            batch.append(ops.complete(keys, consumer, items, record_ttl=self.record_ttl,
                                      dead_letter_max=self.dead_letter_max, now_ms=now_ms,
                                      token=token))
        replies = await self.aio.run_many(batch)
        settled = [False] * len(settlements)
        for indexes, reply in zip(by_queue.values(), replies, strict=True):
            for i, ok in zip(indexes, reply, strict=True):
                settled[i] = ok
        return settled

    async def renew(self, consumer: str, deliveries: Sequence[Delivery]) -> list[str]:
        by_queue: dict[str, list[str]] = defaultdict(list)
        for d in deliveries:
            by_queue[d.queue].append(d.entry_id)
        batch = [ops.renew(self.keys.queue(q), consumer, ids) for q, ids in by_queue.items()]
        lost: list[str] = []
        for reply in await self.aio.run_many(batch):
            lost.extend(reply)
        return lost

    async def recover(self, queue: str, consumer: str, min_idle_ms: int,
                      count: int) -> tuple[list[Delivery], list[str]]:
        keys = self.keys.queue(queue)
        claimed, deleted = await self.aio.run(ops.recover(keys, consumer, min_idle_ms, count))
        return [Delivery(queue, e, p or None, c) for e, p, c in claimed], deleted

    async def promote(self, queue: str, now_ms: int, limit: int) -> tuple[int, int]:
        return await self.aio.run(ops.promote(self.keys.queue(queue), now_ms, limit, self.mode))

    async def retire(self, queues: Sequence[str], consumer: str) -> None:
        await self.aio.run_many([ops.retire(self.keys.queue(q), consumer) for q in queues])

    async def heartbeat(self, name: str, info: bytes, now_ms: int, ttl_ms: int) -> None:
        await self.aio.run(ops.heartbeat(self.keys, name, info, now_ms, ttl_ms))

    async def leave(self, name: str) -> None:
        await self.aio.run(ops.leave(self.keys, name, _now_ms()))

    async def prune_consumers(self, queue: str, min_idle_ms: int) -> int:
        """Remove consumers that own nothing and were idle over min_idle_ms: dead workers'."""
        return await self.aio.run(ops.prune(self.keys.queue(queue), min_idle_ms))

    # -- lifecycle -----------------------------------------------------------

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        store = self._async.pop(loop, None)
        if store is not None:
            await store.close()

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None


__all__ = ["RedisBroker", "client_options"]
