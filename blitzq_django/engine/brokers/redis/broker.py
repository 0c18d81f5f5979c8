"""RedisBroker: reliable mode on Redis streams (at-least-once), fast mode on Redis
lists (at-most-once), chosen per queue (docs/delivery-guarantees.md).

Producers use a sync redis-py client (one round trip per enqueue, no event
loop); async code and workers use redis.asyncio. Both run the same ops.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis.asyncio

from ...core import limits
from ...core.events import OF_STATE, STARTED, Event, failure_detail
from ...core.events import packer as event_packer
from ...core.ids import now_ms as clock_ms
from ...core.record import FINAL_STATES, Record
from ...errors import BrokerError, BrokerUnavailable, NotReplicated
from ..base import (
    FAST,
    RELIABLE,
    RUNNING,
    Delivery,
    Enqueue,
    ScheduledCancel,
    Settlement,
    check_modes,
    ready_holds,
)
from ..capabilities import ServerFacts
from . import facts, ops, topology
from .attachments import RedisAttachmentStore
from .facts import server_facts
from .history import RedisHistoryStore
from .keys import Keyspace, QueueKeys
from .lease import RedisLease
from .metrics import RedisMetricsStore
from .ops import Op
from .periodic import RedisPeriodicStore
from .progress import RedisProgressStore
from .store import (
    AsyncStore,
    SyncStore,
    client_options,
    dedicated_pool,
    mapped_errors,
    redact,
    run_until,
)
from .workflows import RedisWorkflowStore

log = logging.getLogger("blitzq.broker")

#: Messages per enqueue script call, and per write of a many-message enqueue: a script
#: holds Redis for its whole run (1,000 messages with their events: about 2 ms).
MAX_BATCH = 1000

RESULT_POLL_S = 5.0  # safety net under pub/sub wake-ups: a lost notification costs this
#: How far past its timeout a result wait may run: the last read of the record gets this
#: long to answer before a silent Redis counts as unavailable (0.25 s was exceeded by a
#: busy Redis on a loaded CI machine: a result wait then raised BrokerUnavailable).
REPLY_GRACE_S = 1.0
#: Seconds a revocation (cancel of a queued or running message) is kept by default.
REVOKE_TTL = 3600
#: Events kept per queue by default (core/events.py); 0 turns events off.
EVENTS_MAXLEN = 100_000
#: Attempts of one cancel when a scheduled message keeps changing under it (a retry
#: rescheduled between the read of its body and the cancel): never needed twice in practice.
CANCEL_ROUNDS = 5
LISTEN_POLL_S = 5.0  # a revocation listener wakes up at least this often
#: A producer adds a queue to the seen queues (keys.seen_queues) the first time it writes
#: to it, then again at its first write after this many seconds: a Redis that lost the
#: set (FLUSHALL, a restart without persistence) has each queue in use back that soon.
SEEN_REFRESH_S = 300.0


_FINAL = tuple(sorted(FINAL_STATES))

#: (record or None, due ms or None, encoded message or None): what locate() finds.
Located = tuple[Record | None, int | None, bytes | None]


def _located(replies: list[Any]) -> Located:
    data, lanes = replies[0], (len(replies) - 1) // 2
    due = next((int(score) for score in replies[1:1 + lanes] if score is not None), None)
    body = next((b for b in replies[1 + lanes:] if b is not None), None)
    return Record.from_bytes(data) if data else None, due, body



def _holder(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode()
    return value if isinstance(value, str) and value else None


class RedisBroker:
    """Messages on Redis. Each queue is in one delivery mode: ``mode`` for every queue,
    or the one ``queue_modes`` names for it ("reliable": streams, leases, at-least-once;
    "fast": lists, no lease, at-most-once). Producers and workers read the mode of a
    queue here, so give both the same configuration."""

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
        revoke_ttl: int = REVOKE_TTL,
        events_maxlen: int = EVENTS_MAXLEN,
        event_details: bool = False,
        mode: str = RELIABLE,
        queue_modes: dict[str, str] | None = None,
        replica_wait: tuple[int, int] | None = None,
    ) -> None:
        #: the delivery mode of every queue queue_modes does not name
        self.mode, self.queue_modes = check_modes(mode, queue_modes)
        # What a fast delivery is called in the worker (a popped list entry has no id of
        # its own): unique in this process, and random across processes, so the id of a
        # malformed message's dead letter ("malformed:<entry>") does not collide.
        self._fast_ids = itertools.count(1)
        self._fast_prefix = f"f{os.urandom(4).hex()}-"
        limits.check_all(record_ttl=record_ttl, idempotency_ttl=idempotency_ttl,
                         dead_letter_max=dead_letter_max, revoke_ttl=revoke_ttl,
                         events_maxlen=events_maxlen)
        #: about this many events are kept per queue (XADD MAXLEN ~); 0: events off
        self.events_maxlen = events_maxlen
        #: events carry details (core/events.py Event.detail): the message on the enqueue
        #: side, error message and traceback on failures. For a history writer.
        self.event_details = event_details
        self.revoke_ttl = revoke_ttl
        #: (replicas, timeout ms): enqueue and settle send WAIT right after their writes,
        #: in the same round trip, and enqueue raises NotReplicated when fewer replicas
        #: confirmed them in time (docs/delivery-guarantees.md); None: no wait
        self.replica_wait = limits.check_replica_wait(replica_wait)
        self.url = url
        self.keys = Keyspace(namespace)
        self.record_ttl = record_ttl
        self.idempotency_ttl = idempotency_ttl
        self.dead_letter_max = dead_letter_max
        self._options = redis_options or {}
        self._sync = SyncStore(sync_client, url) if sync_client is not None else None
        #: a Redis Cluster: a queue's channels are shard channels (SPUBLISH, SSUBSCRIBE),
        #: served by the node of the queue's slot
        self.sharded = (self._sync.cluster if self._sync is not None
                        else topology.kind_of(url) == topology.CLUSTER)
        #: the verb the scripts publish a queue's channels with
        self.publish = "SPUBLISH" if self.sharded else "PUBLISH"
        self._async: dict[asyncio.AbstractEventLoop, AsyncStore] = {}
        #: queues added to the seen queues since ``_seen_until`` (ms) was set; from then on
        #: a write adds its queue again (every queue in use comes back within
        #: SEEN_REFRESH_S of a Redis that lost the set)
        self._seen: set[str] = set()
        self._seen_until = 0
        #: the feature stores (capabilities.py): engine/redis/'s, on this broker's keys
        #: and connections
        self.progress = RedisProgressStore(self)
        self.periodic = RedisPeriodicStore(self)
        self.metrics = RedisMetricsStore(self)
        self.history = RedisHistoryStore(self)
        self.attachments = RedisAttachmentStore(self)
        self.workflows = RedisWorkflowStore(self)

    def lease(self, queue: str, purpose: str, token: str, ttl_ms: int) -> RedisLease:
        """The lease of ``purpose`` on ``queue`` for the holder ``token`` (lease.py)."""
        return RedisLease(self, queue, purpose, token, ttl_ms)

    #: messages live in Redis, beyond this process
    in_process = False

    @property
    def location(self) -> str:
        """Where the messages are: the URL, its password masked."""
        return redact(self.url)

    def mode_of(self, queue: str) -> str:
        """The delivery mode of ``queue``: "reliable" or "fast"."""
        return self.queue_modes.get(queue, self.mode)

    def storage_mode(self, queue: str) -> str:
        """Where ``queue``'s ready messages wait, as the scripts name it: "s" stream
        (reliable), "l" list (fast)."""
        return "l" if self.queue_modes.get(queue, self.mode) == FAST else "s"

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

    async def aping(self) -> None:
        await self.aio.run(Op(command=("PING",)))

    def server_facts(self) -> ServerFacts | None:
        """What the deploy checks read of the server (redis/facts.py)."""
        info, policy, why = server_facts(self.sync.run)
        kind = topology.CLUSTER if self.sync.cluster else topology.kind_of(self.url)
        if kind != topology.SINGLE:
            with mapped_errors(self.url):
                info[facts.TOPOLOGY] = facts.topology_facts(self.sync.client, kind)
                if kind == topology.CLUSTER:
                    policy, why = facts.cluster_policy(self.sync.client)
        return info, policy, why

    # -- producing -----------------------------------------------------------

    def _enqueue_op(self, item: Enqueue, now_ms: int = 0) -> Op:
        """The op writing one message; ``now_ms`` (0: read the clock) times its event."""
        keys = self.keys.queue(item.queue, item.priority)
        if not (item.due_ms or item.record or item.idempotency_key or item.unique_key):
            mode = self.storage_mode(item.queue)
            if self.events_maxlen:  # the message and its event: one step
                return ops.enqueue_plain(keys, ((item.payload, item.message_id, item.task),),
                                         events_maxlen=self.events_maxlen,
                                         now_ms=now_ms or clock_ms(), mode=mode,
                                         details=self.event_details)
            if mode == "s":
                return ops.xadd(keys, item.payload)
            return ops.lpush(keys, item.payload)
        return self._script_op(keys, (item,), now_ms)

    def _script_op(self, keys: QueueKeys, items: Sequence[Enqueue], now_ms: int = 0) -> Op:
        """One script call writing ``items`` (of the lane ``keys``), each with its event:
        enqueue_plain.lua when none has a delay, key, record or unique key."""
        mode = self.storage_mode(items[0].queue)
        if self.events_maxlen and not any(i.due_ms or i.record or i.idempotency_key
                                           or i.unique_key for i in items):
            return ops.enqueue_plain(keys, [(i.payload, i.message_id, i.task) for i in items],
                                     events_maxlen=self.events_maxlen,
                                     now_ms=now_ms or clock_ms(), mode=mode,
                                     details=self.event_details)
        return ops.enqueue(
            keys,
            [(i.payload, i.message_id, i.due_ms, i.record, i.idempotency_key, i.unique_key,
              i.task) for i in items],
            record_ttl=self.record_ttl,
            idempotency_ttl=self.idempotency_ttl,
            events_maxlen=self.events_maxlen,
            now_ms=(now_ms or clock_ms()) if self.events_maxlen else 0,
            mode=mode,
            details=self.event_details,
            publish=self.publish,
        )

    def _enqueue_plan(self, items: Sequence[Enqueue]) -> tuple[list[Op], list[list[int]]]:
        """The ops writing ``items`` and the indexes of the items each one writes: one op
        per item with events off (a plain message is a bare XADD), else one script call per
        lane and MAX_BATCH messages, every message of it atomic with its event."""
        if not self.events_maxlen:
            return [self._enqueue_op(i) for i in items], [[n] for n in range(len(items))]
        lanes: dict[tuple[str, str | None], list[int]] = {}
        for n, item in enumerate(items):
            lanes.setdefault((item.queue, item.priority), []).append(n)
        batch: list[Op] = []
        plan: list[list[int]] = []
        for lane, indexes in lanes.items():
            keys = self.keys.queue(*lane)
            for start in range(0, len(indexes), MAX_BATCH):
                chunk = indexes[start:start + MAX_BATCH]
                batch.append(self._script_op(keys, [items[n] for n in chunk]))
                plan.append(chunk)
        return batch, plan

    @staticmethod
    def _groups(batch: list[Op], plan: list[list[int]]) -> list[list[Op]]:
        """The ops in groups of at most MAX_BATCH messages, each group sent in one write."""
        groups: list[list[Op]] = [[]]
        held = 0
        for op, indexes in zip(batch, plan, strict=True):
            if held and held + len(indexes) > MAX_BATCH:
                groups.append([])
                held = 0
            groups[-1].append(op)
            held += len(indexes)
        return groups

    @staticmethod
    def _ids(items: Sequence[Enqueue], plan: list[list[int]], replies: list[Any]) -> list[str]:
        # A deduplicated enqueue answers with the id already holding the key.
        ids = [item.message_id for item in items]
        for indexes, reply in zip(plan, replies, strict=True):
            if type(reply) is list:  # the script's (written, id) pairs; XADD's is an entry id
                for n, (_written, message_id) in zip(indexes, reply, strict=True):
                    ids[n] = message_id
        return ids

    def enqueue(self, items: Sequence[Enqueue]) -> list[str]:
        if not items:
            return []
        if len(items) == 1:
            item = items[0]
            now = clock_ms()  # one read of the clock: the event's time, and the seen queues'
            op = self._enqueue_op(item, now)
            if self.replica_wait is not None:
                batch = self._waited_one(item, op, now)
                return self._waited_id(item, now, batch, self.sync.run_many(batch))
            if now < self._seen_until and item.queue in self._seen:
                reply = self.sync.run(op)
            else:  # the queue's first write here: into the seen queues, same round trip
                reply = self.sync.run_many([ops.add_seen_queues(self.keys, (item.queue,)),
                                            op])[1]
                self._saw((item.queue,), now)
            return [reply[0][1] if type(reply) is list else item.message_id]
        batch, groups, plan, unseen = self._with_seen(items)
        if self.replica_wait is not None:
            groups, at = self._waited_groups(groups)
            replies = self.sync.run_streamed(groups)
            self._saw(unseen)
            acknowledged = [replies[i] for i in at]
            for i in reversed(at):
                del replies[i]
            return self._confirmed(self._ids(items, plan, replies[1 if unseen else 0:]),
                                   acknowledged)
        if not unseen and len(batch) == 1:
            replies = [self.sync.run(batch[0])]
        else:
            replies = self.sync.run_streamed(groups)[1 if unseen else 0:]
        self._saw(unseen)
        return self._ids(items, plan, replies)

    async def aenqueue(self, items: Sequence[Enqueue]) -> list[str]:
        if not items:
            return []
        if len(items) == 1:
            item = items[0]
            now = clock_ms()
            op = self._enqueue_op(item, now)
            if self.replica_wait is not None:
                batch = self._waited_one(item, op, now)
                return self._waited_id(item, now, batch, await self.aio.run_many(batch))
            if now < self._seen_until and item.queue in self._seen:
                reply = await self.aio.run(op)
            else:
                reply = (await self.aio.run_many(
                    [ops.add_seen_queues(self.keys, (item.queue,)), op]))[1]
                self._saw((item.queue,), now)
            return [reply[0][1] if type(reply) is list else item.message_id]
        batch, groups, plan, unseen = self._with_seen(items)
        if self.replica_wait is not None:
            groups, at = self._waited_groups(groups)
            replies = (await self.aio.run_streamed(groups))
            self._saw(unseen)
            acknowledged = [replies[i] for i in at]
            for i in reversed(at):
                del replies[i]
            return self._confirmed(self._ids(items, plan, replies[1 if unseen else 0:]),
                                   acknowledged)
        if not unseen and len(batch) == 1:
            replies = [await self.aio.run(batch[0])]
        else:
            replies = (await self.aio.run_streamed(groups))[1 if unseen else 0:]
        self._saw(unseen)
        return self._ids(items, plan, replies)

    # -- the replica wait (replica_wait) ---------------------------------------------

    def _waits(self, writes: Sequence[Op]) -> list[Op]:
        """The WAITs to send right after ``writes``: one per hash tag they write to, each
        naming a key of it, so that on a cluster each reaches the node (and connection)
        that ran those writes; on one node the WAITs after the first find the writes
        confirmed and answer at once."""
        replicas, timeout_ms = self.replica_wait  # type: ignore[misc]
        tags: dict[str, str] = {}
        for op in writes:
            key = op.keys[0] if op.keys else op.command[1]
            text = key.decode() if isinstance(key, bytes) else str(key)
            tags.setdefault(text[text.find("{"):text.find("}") + 1], text)
        return [ops.wait_replicas(replicas, timeout_ms, key) for key in tags.values()]

    def _waited_groups(self, groups: list[list[Op]]) -> tuple[list[list[Op]], list[int]]:
        """``groups`` each followed by its WAITs (on a cluster each group is a pipeline
        of its own, on connections of its own), and where the WAIT replies are."""
        out: list[list[Op]] = []
        at: list[int] = []
        n = 0
        for group in groups:
            waits = self._waits(group)
            at += range(n + len(group), n + len(group) + len(waits))
            n += len(group) + len(waits)
            out.append([*group, *waits])
        return out, at

    def _waited_one(self, item: Enqueue, op: Op, now: int) -> list[Op]:
        """One message's write, its queue into the seen queues when due, then WAIT."""
        if now < self._seen_until and item.queue in self._seen:
            return [op, *self._waits((op,))]
        seen = ops.add_seen_queues(self.keys, (item.queue,))
        return [op, seen, *self._waits((op, seen))]

    def _waited_id(self, item: Enqueue, now: int, batch: list[Op],
                   replies: list[Any]) -> list[str]:
        if batch[1].command[:1] != ("WAIT",):  # the seen queues were written too
            self._saw((item.queue,), now)
        reply = replies[0]
        return self._confirmed([reply[0][1] if type(reply) is list else item.message_id],
                               [r for op, r in zip(batch, replies, strict=True)
                                if op.command[:1] == ("WAIT",)])

    def _confirmed(self, ids: list[str], acknowledged: list[int]) -> list[str]:
        """``ids``, once the WAIT replies say enough replicas confirmed their writes;
        else NotReplicated naming them."""
        replicas, timeout_ms = self.replica_wait  # type: ignore[misc]
        fewest = min(acknowledged)
        if fewest < replicas:
            raise NotReplicated(
                f"{len(ids)} message(s) written on the Redis master at "
                f"{redact(self.url)}, but {fewest} of the {replicas} replica(s) asked for "
                f"confirmed them within {timeout_ms} ms: a failover before the replicas "
                "catch up may forget them (enqueue again with the same idempotency key to "
                "be sure, without a second copy)", ids, fewest, replicas)
        return ids

    # -- the seen queues (keys.seen_queues) ------------------------------------------

    def _unseen(self, queues: Iterable[str]) -> list[str]:
        """Of ``queues``, those to add to the seen queues with the next write: not added
        by this process in the current SEEN_REFRESH_S."""
        if clock_ms() >= self._seen_until:
            return list(queues)
        return [q for q in queues if q not in self._seen]

    def _saw(self, queues: Sequence[str], now_ms: int = 0) -> None:
        now = now_ms or clock_ms()
        if now >= self._seen_until:  # a new period: every queue is added again once
            self._seen = set()
            self._seen_until = now + int(SEEN_REFRESH_S * 1000)
        self._seen.update(queues)

    def see_queues(self, queues: Sequence[str]) -> None:
        """Add queues about to be written to the seen queues (a writer other than
        enqueue: the scheduler); at most once per SEEN_REFRESH_S per queue."""
        due = self._unseen(queues)
        if due:
            self.sync.run(ops.add_seen_queues(self.keys, due))
            self._saw(due)

    async def asee_queues(self, queues: Sequence[str]) -> None:
        due = self._unseen(queues)
        if due:
            await self.aio.run(ops.add_seen_queues(self.keys, due))
            self._saw(due)

    def seen_queues(self) -> list[str]:
        """Every queue a message was ever written to (unless Redis lost the set since:
        each producer adds its queues again within SEEN_REFRESH_S), sorted."""
        return self.sync.run(ops.seen_queues(self.keys))

    async def aseen_queues(self) -> list[str]:
        return await self.aio.run(ops.seen_queues(self.keys))

    def forget_queue(self, queue: str) -> None:
        """Remove ``queue`` from the seen queues (a producer writing to it adds it back)."""
        self.sync.run(ops.forget_seen_queue(self.keys, queue))
        self._seen.discard(queue)

    def _with_seen(self, items: Sequence[Enqueue]) -> tuple[list[Op], list[list[Op]],
                                                             list[list[int]], list[str]]:
        """The ops writing ``items`` (several: with the write of any unseen queue to the
        seen queues first, in the same round trip), grouped, the plan, the unseen."""
        unseen = self._unseen({i.queue for i in items})
        batch, plan = self._enqueue_plan(items)
        first = [ops.add_seen_queues(self.keys, unseen)] if unseen else []
        groups = self._groups(batch, plan)
        groups[0] = [*first, *groups[0]]
        return batch, groups, plan, unseen

    # -- reading state -------------------------------------------------------

    def get_record(self, queue: str, message_id: str) -> Record | None:
        data = self.sync.run(ops.get(self.keys.queue(queue).record(message_id)))
        return Record.from_bytes(data) if data else None

    async def aget_record(self, queue: str, message_id: str) -> Record | None:
        data = await self.aio.run(ops.get(self.keys.queue(queue).record(message_id)))
        return Record.from_bytes(data) if data else None

    def _records_ops(self, queue: str, ids: Sequence[str]) -> list[Op]:
        # One MGET per 1000 (a GET each cost a history writer three times the time: a
        # reply to parse per key).
        keys = self.keys.queue(queue)
        return [ops.mget([keys.record(i) for i in ids[start:start + 1000]])
                for start in range(0, len(ids), 1000)]

    def records(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        """The encoded records of ``ids`` (None where there is none)."""
        return [data for reply in self.sync.run_many(self._records_ops(queue, ids))
                for data in reply]

    async def arecords(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        return [data for reply in await self.aio.run_many(self._records_ops(queue, ids))
                for data in reply]

    def idempotency_holder(self, queue: str, key: str) -> str | None:
        """The id of the message holding idempotency key ``key`` on ``queue``, or None."""
        return _holder(self.sync.run(ops.get(self.keys.queue(queue).unique(key))))

    async def aidempotency_holder(self, queue: str, key: str) -> str | None:
        return _holder(await self.aio.run(ops.get(self.keys.queue(queue).unique(key))))

    def scheduled_due_ms(self, queue: str, message_id: str) -> int | None:
        lanes = self.keys.queue(queue).lanes
        scores = self.sync.run_many([ops.zscore(lane.schedule, message_id) for lane in lanes])
        return next((int(score) for score in scores if score is not None), None)

    def scheduled_payload(self, queue: str, message_id: str) -> bytes | None:
        lanes = self.keys.queue(queue).lanes
        bodies = self.sync.run_many([ops.hget(lane.schedule_data, message_id) for lane in lanes])
        return next((body for body in bodies if body is not None), None)

    def dead_letter(self, queue: str, message_id: str) -> bytes | None:
        return self.sync.run(ops.hget(self.keys.queue(queue).dead_letter_data, message_id))

    async def adead_letter(self, queue: str, message_id: str) -> bytes | None:
        return await self.aio.run(ops.hget(self.keys.queue(queue).dead_letter_data,
                                           message_id))

    def locate(self, queue: str, message_id: str) -> Located:
        """The record, and the due time and body when scheduled: one round trip."""
        return _located(self.sync.run_many(ops.locate(self.keys.queue(queue), message_id)))

    async def alocate(self, queue: str, message_id: str) -> Located:
        return _located(await self.aio.run_many(ops.locate(self.keys.queue(queue),
                                                           message_id)))

    def _ready_ops(self, queue: str, limit: int) -> list[Op]:
        keys, mode = self.keys.queue(queue), self.storage_mode(queue)
        return [*ops.lane_lengths(keys, mode), *ops.ready_heads(keys, limit, mode)]

    def find_ready(self, queue: str, message_id: str, limit: int) -> tuple[bool | None, int]:
        """Whether the message is among the first ``limit`` messages of each lane of the
        queue (waiting, or taken and not settled): see ``ready_holds``."""
        return ready_holds(self.sync.run_many(self._ready_ops(queue, limit)), message_id,
                           limit)

    async def afind_ready(self, queue: str, message_id: str,
                          limit: int) -> tuple[bool | None, int]:
        return ready_holds(await self.aio.run_many(self._ready_ops(queue, limit)), message_id,
                           limit)

    # -- the running index (core/running.py) -----------------------------------

    def find_running(self, queue: str, message_id: str,
                     workers: Sequence[str]) -> list[tuple[str, bytes]]:
        """(worker, entry) of each of ``workers`` listing the message in its running index
        of ``queue``: one round trip."""
        if not workers:
            return []
        found = self.sync.run_many(ops.running_entry(self.keys.queue(queue), workers,
                                                     message_id))
        return [(w, d) for w, d in zip(workers, found, strict=True) if d]

    async def afind_running(self, queue: str, message_id: str,
                            workers: Sequence[str]) -> list[tuple[str, bytes]]:
        if not workers:
            return []
        found = await self.aio.run_many(ops.running_entry(self.keys.queue(queue), workers,
                                                          message_id))
        return [(w, d) for w, d in zip(workers, found, strict=True) if d]

    def running_entries(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, bytes]]:
        """The running index of each (queue, worker): message id -> entry; one round trip."""
        return self.sync.run_many([ops.running_entries(self.keys.queue(q), w)
                                   for q, w in pairs])

    async def arunning_entries(self, pairs: Sequence[tuple[str, str]]
                               ) -> list[dict[str, bytes]]:
        return await self.aio.run_many([ops.running_entries(self.keys.queue(q), w)
                                        for q, w in pairs])

    def wait_record(self, queue: str, message_id: str, timeout: float) -> Record | None:
        """Wait for a final record: woken by pub/sub, re-checking after every wake-up.

        Returns by ``timeout`` + REPLY_GRACE_S even when Redis stalls: the wait runs on
        connections of its own that never block past that deadline, and a reply that does
        not come by then raises BrokerUnavailable.
        """
        keys = self.keys.queue(queue)
        get = ops.get(keys.record(message_id))
        client = self.sync.client  # made first: a cluster client reads its slot map
        deadline = time.monotonic() + max(timeout, 0.0)
        limit = deadline + REPLY_GRACE_S
        pool = dedicated_pool(client, limit - time.monotonic(), keys.tag)
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
                        if self.sharded:
                            pubsub.ssubscribe(keys.done_channel(message_id))
                        else:
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
            pubsub = self.aio.listener(sharded=True)
            try:
                await pubsub.subscribe(keys.done_channel(message_id))
                while True:
                    record = await self.aget_record(queue, message_id)
                    remaining = deadline - loop.time()
                    if (record is not None and record.is_final) or remaining <= 0:
                        return record
                    await pubsub.get(min(remaining, RESULT_POLL_S))
            finally:
                await pubsub.aclose()

    def queue_stats(self, queue: str) -> dict[str, int | None]:
        """Counts of one queue (see QueueStats), in one read-only script call."""
        return self.sync.run(ops.stats(self.keys.queue(queue), clock_ms(),
                                       self.storage_mode(queue)))

    async def aqueue_stats(self, queue: str) -> dict[str, int | None]:
        return await self.aio.run(ops.stats(self.keys.queue(queue), clock_ms(),
                                            self.storage_mode(queue)))

    def purge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]:
        """Drop ready and scheduled messages (dead letters when asked); see purge.lua."""
        return self.sync.run(ops.purge(self.keys.queue(queue), force, dead_letters,
                                       self.storage_mode(queue)))

    async def apurge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]:
        return await self.aio.run(ops.purge(self.keys.queue(queue), force, dead_letters,
                                            self.storage_mode(queue)))

    def workers(self, now_ms: int) -> list[bytes]:
        """Encoded WorkerInfo of every worker whose entry has not expired."""
        names = self.sync.run(ops.worker_names(self.keys, now_ms))
        return self.sync.run(ops.worker_infos(self.keys, names)) if names else []

    async def aworkers(self, now_ms: int) -> list[bytes]:
        names = await self.aio.run(ops.worker_names(self.keys, now_ms))
        return await self.aio.run(ops.worker_infos(self.keys, names)) if names else []

    # -- dead letters --------------------------------------------------------

    def _dl_ids(self, queue: str, min_ms: int, max_ms: int) -> Op:
        return ops.dead_letter_ids(self.keys.queue(queue), min_ms, max_ms)

    def _dl_replay(self, queue: str, items: Sequence[tuple[str, str, bytes]]) -> Op:
        return ops.replay_dead_letters(self.keys.queue(queue), items, self.storage_mode(queue),
                                       self.events_maxlen, clock_ms(), self.event_details)


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
        if not items:
            return 0
        self.see_queues((queue,))
        return self.sync.run(self._dl_replay(queue, items))

    async def areplay_dead_letters(self, queue: str,
                                   items: Sequence[tuple[str, str, bytes]]) -> int:
        if not items:
            return 0
        await self.asee_queues((queue,))
        return await self.aio.run(self._dl_replay(queue, items))

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

    # -- cancellation --------------------------------------------------------

    def _cancel_op(self, queue: str, message_id: str, known: bool, body: bytes,
                   scheduled: ScheduledCancel) -> Op:
        return ops.cancel(self.keys, queue, message_id, now_ms=clock_ms(),
                          revoke_ttl=self.revoke_ttl, record_ttl=self.record_ttl,
                          final_states=_FINAL, known=known, record=scheduled.record,
                          expected=body, unique_key=scheduled.unique_key,
                          task=scheduled.task, attempt=scheduled.attempt,
                          events_maxlen=self.events_maxlen, publish=self.publish)

    def cancel(self, queue: str, message_id: str,
               scheduled: Callable[[bytes], ScheduledCancel],
               known: bool) -> tuple[str, str | None]:
        """cancel.lua; a scheduled message takes a second call, with the record built
        from its body (see the script's header)."""
        body, built = b"", ScheduledCancel()
        for _ in range(CANCEL_ROUNDS):
            outcome, detail = self.sync.run(self._cancel_op(queue, message_id, known, body,
                                                            built))
            if outcome != "scheduled":
                return outcome, detail
            body, built = detail, scheduled(detail)
        raise BrokerError(f"could not cancel {message_id!r}: its scheduled message kept "
                          "changing")

    async def acancel(self, queue: str, message_id: str,
                      scheduled: Callable[[bytes], ScheduledCancel],
                      known: bool) -> tuple[str, str | None]:
        body, built = b"", ScheduledCancel()
        for _ in range(CANCEL_ROUNDS):
            outcome, detail = await self.aio.run(self._cancel_op(queue, message_id, known,
                                                                 body, built))
            if outcome != "scheduled":
                return outcome, detail
            body, built = detail, scheduled(detail)
        raise BrokerError(f"could not cancel {message_id!r}: its scheduled message kept "
                          "changing")

    async def revoked(self, queues: Sequence[str], now_ms: int) -> set[tuple[str, str]]:
        """Every unexpired revocation of these queues: one pipelined read."""
        replies = await self.aio.run_many([ops.revoked(self.keys.queue(q), now_ms)
                                           for q in queues])
        return {(q, i) for q, ids in zip(queues, replies, strict=True) for i in ids}

    async def listen_revocations(self, on_revoked: Callable[[str, str], None],
                                 on_listening: Callable[[], None]) -> None:
        """Subscribe to the revocation channel (one connection) until cancelled."""
        with mapped_errors(self.url):
            pubsub = self.aio.listener()
            try:
                await pubsub.subscribe(self.keys.revocation_channel)
                on_listening()
                while True:
                    # Not forever: each return lets the pubsub check its connection.
                    message = await pubsub.get(LISTEN_POLL_S)
                    if message is None:
                        continue
                    data = message["data"]
                    queue, _, message_id = (data.decode(errors="replace")
                                            if isinstance(data, bytes) else str(data)
                                            ).partition(" ")
                    if queue and message_id:
                        on_revoked(queue, message_id)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    # -- worker --------------------------------------------------------------

    async def prepare(self, queues: Sequence[str]) -> None:
        for queue in queues:
            if self.mode_of(queue) == FAST:
                continue  # lists: no consumer group
            for lane in self.keys.queue(queue).lanes:
                try:
                    await self.aio.run(ops.create_group(lane))
                except BrokerError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise

    async def fetch(self, queues: Sequence[str], consumer: str, count: int,
                    block_ms: int) -> list[Delivery]:
        try:
            return await self._fetch(queues, consumer, count, block_ms)
        except Exception as exc:
            if "NOGROUP" in str(exc):
                log.error("the consumer group of %s is gone (Redis restarted without "
                          "persistence, or the stream was deleted): recreating it", queues)
                await self.prepare(queues)
                return []
            raise

    async def _fetch(self, queues: Sequence[str], consumer: str, count: int,
                     block_ms: int) -> list[Delivery]:
        out: list[Delivery] = []
        fast = [q for q in queues if self.mode_of(q) == FAST]
        for queue in queues:  # a worker passes one queue: reads may not cross hash tags
            lanes: Sequence[QueueKeys] = self.keys.queue(queue).lanes
            if queue in fast:
                ids, prefix = self._fast_ids, self._fast_prefix
                for index, _none, payload in await self.aio.run(
                        ops.fetch(lanes, consumer, count - len(out), "l")):
                    out.append(Delivery(queue, f"{prefix}{next(ids)}", payload, 1,
                                        lanes[index].priority))
            else:
                for index, entry_id, payload in await self.aio.run(
                        ops.fetch(lanes, consumer, count - len(out))):
                    out.append(Delivery(queue, entry_id, payload, 1, lanes[index].priority))
            if len(out) >= count:
                return out
        if out or not block_ms:
            return out
        if len(fast) == len(queues):
            # Fast mode, nothing ready: BRPOP on every lane, highest first; one message,
            # and the next fetch takes what came with it.
            by_list = {lane.list: (queue, lane) for queue in queues
                       for lane in self.keys.queue(queue).lanes}
            popped = await self.aio.run(ops.pop_blocking(
                [lane for _queue, lane in by_list.values()], block_ms))
            if popped is not None:
                queue, lane = by_list[popped[0]]
                out.append(Delivery(queue, f"{self._fast_prefix}{next(self._fast_ids)}",
                                    popped[1], 1, lane.priority))
            return out
        # Nothing ready: block on every lane, so a lone low message wakes the worker as
        # soon as a normal one would. COUNT is per stream here: split it. (Given queues
        # of both modes, only the reliable ones block.)
        by_stream = {lane.stream: (queue, lane) for queue in queues if queue not in fast
                     for lane in self.keys.queue(queue).lanes}
        lanes = [lane for _queue, lane in by_stream.values()]
        entries = await self.aio.run(ops.read_group(lanes, consumer,
                                                    max(1, count // len(lanes)), block_ms))
        for stream, entry_id, payload in entries:
            queue, lane = by_stream[stream]
            out.append(Delivery(queue, entry_id, payload, 1, lane.priority))
        return out

    async def settle(self, consumer: str, settlements: Sequence[Settlement],
                     now_ms: int, token: str | None = None) -> list[bool]:
        token = token or os.urandom(8).hex()
        by_queue: dict[tuple[str, str | None], list[int]] = defaultdict(list)
        for i, s in enumerate(settlements):
            by_queue[(s.delivery.queue, s.delivery.priority)].append(i)
        batch = []
        events_maxlen, of_state = self.events_maxlen, OF_STATE
        pack = event_packer().pack if events_maxlen else None
        details = self.event_details
        for (queue, priority), indexes in by_queue.items():
            keys = self.keys.queue(queue, priority)
            items: list[tuple[Any, ...]] = []
            for i in indexes:
                s = settlements[i]
                if pack is not None:
                    # Its events, packed here (see complete.lua): its attempt's start first
                    # when it rides on this settlement, then its own. The fields are those
                    # of core/events.py pack(), inlined: this runs for every message.
                    attempt = s.attempt or None
                    if s.kind == RUNNING:
                        event = pack([STARTED, s.message_id, s.task, s.started_ms, attempt,
                                      consumer, None, None]) if s.started_ms else None
                        started = b""
                    else:
                        if details and (s.failure is not None or s.letter is not None):
                            # A failure carries its error and message (history): rare, so
                            # the usual outcome pays one test for it.
                            event = pack([of_state.get(s.state) or s.state or s.kind,
                                          s.message_id, s.task, now_ms, attempt, consumer,
                                          s.duration_ms, s.error_type, failure_detail(s)])
                        else:
                            event = pack([of_state.get(s.state) or s.state or s.kind,
                                          s.message_id, s.task, now_ms, attempt, consumer,
                                          s.duration_ms, s.error_type])
                        started = pack([STARTED, s.message_id, s.task, s.started_ms, attempt,
                                        consumer, None, None]) if s.started_ms else b""
                    items.append((s.kind, s.delivery.entry_id, s.message_id, s.record,
                                  int(s.notify), s.body, s.due_ms, s.unique_key, event,
                                  started))
                else:
                    items.append((s.kind, s.delivery.entry_id, s.message_id, s.record,
                                  int(s.notify), s.body, s.due_ms, s.unique_key))
                if s.indexed:  # (rare: an attempt that ran past INDEX_DELAY_S)
                    items[-1] = (*items[-1], *(None,) * (10 - len(items[-1])), 1)
            batch.append(ops.complete(keys, consumer, items, record_ttl=self.record_ttl,
                                      dead_letter_max=self.dead_letter_max, now_ms=now_ms,
                                      token=token, events_maxlen=events_maxlen,
                                      mode=self.storage_mode(queue), publish=self.publish))
        if self.replica_wait is not None:
            waits = self._waits(batch)
            replies = await self.aio.run_many([*batch, *waits])
            self._settle_confirmed(len(settlements), replies[len(batch):])
            replies = replies[:len(batch)]
        else:
            replies = await self.aio.run_many(batch)
        settled = [False] * len(settlements)
        for indexes, reply in zip(by_queue.values(), replies, strict=True):
            for i, ok in zip(indexes, reply, strict=True):
                settled[i] = ok
        return settled

    def _settle_confirmed(self, count: int, acknowledged: list[int]) -> None:
        """Settlements are written on the master whatever the replicas say, and cannot be
        taken back: too few confirmations are logged, and the worker goes on. A failover
        before the replicas catch up runs those messages again (at-least-once)."""
        replicas, timeout_ms = self.replica_wait  # type: ignore[misc]
        fewest = min(acknowledged)
        if fewest < replicas:
            log.warning("%d settlement(s) written on the Redis master at %s, but %d of the "
                        "%d replica(s) asked for confirmed them within %d ms: a failover "
                        "before the replicas catch up runs those messages again", count,
                        redact(self.url), fewest, replicas, timeout_ms)

    async def renew(self, consumer: str, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Fast queues have no lease: their deliveries are never lost, nothing is sent."""
        by_lane: dict[tuple[str, str | None], dict[str, Delivery]] = defaultdict(dict)
        for d in deliveries:
            if self.mode_of(d.queue) == FAST:
                continue
            by_lane[(d.queue, d.priority)][d.entry_id] = d
        if not by_lane:
            return []
        lanes = list(by_lane.items())
        batch = [ops.renew(self.keys.queue(q, p), consumer, list(held))
                 for (q, p), held in lanes]
        lost: list[Delivery] = []
        for (_lane, held), reply in zip(lanes, await self.aio.run_many(batch), strict=True):
            lost.extend(held[entry_id] for entry_id in reply)
        return lost

    async def recover(self, queue: str, consumer: str, min_idle_ms: int,
                      count: int) -> tuple[list[Delivery], list[str]]:
        if self.mode_of(queue) == FAST:
            return [], []  # nothing stays pending in a list: nothing to recover
        lanes = self.keys.queue(queue).lanes
        now = clock_ms()
        replies = await self.aio.run_many([ops.recover(lane, consumer, min_idle_ms, count,
                                                       self.events_maxlen, now)
                                           for lane in lanes])
        claimed: list[Delivery] = []
        deleted: list[str] = []
        for lane, (entries, gone) in zip(lanes, replies, strict=True):
            claimed += [Delivery(queue, e, p or None, c, lane.priority) for e, p, c in entries]
            deleted += gone
        return claimed, deleted

    async def start_recovered(self, consumer: str, delivery: Delivery) -> int:
        lane = self.keys.queue(delivery.queue, delivery.priority)
        return int(await self.aio.run(ops.start_recovered(lane, consumer, delivery.entry_id)))

    async def starts(self, delivery: Delivery) -> int:
        lane = self.keys.queue(delivery.queue, delivery.priority)
        return int(await self.aio.run(ops.starts(lane, delivery.entry_id)))

    async def promote(self, queue: str, now_ms: int, limit: int) -> tuple[int, int]:
        lanes = self.keys.queue(queue).lanes
        mode = self.storage_mode(queue)
        replies = await self.aio.run_many([ops.promote(lane, now_ms, limit, mode)
                                           for lane in lanes])
        due = [next_due for _moved, next_due in replies if next_due >= 0]
        return sum(moved for moved, _ in replies), min(due, default=-1)

    async def retire(self, queues: Sequence[str], consumer: str) -> None:
        await self.aio.run_many([ops.retire(lane, consumer) for q in queues
                                 if self.mode_of(q) != FAST
                                 for lane in self.keys.queue(q).lanes])

    async def heartbeat(self, name: str, info: bytes, now_ms: int, ttl_ms: int,
                        queues: Sequence[str] = ()) -> None:
        """The registry entry, and the TTL of the worker's running index in ``queues``,
        in one round trip."""
        await self.aio.run_many([ops.heartbeat(self.keys, name, info, now_ms, ttl_ms),
                                 *(ops.keep_running(self.keys.queue(q), name, ttl_ms)
                                   for q in queues)])

    async def leave(self, name: str) -> None:
        await self.aio.run(ops.leave(self.keys, name, clock_ms()))

    async def prune_consumers(self, queue: str, min_idle_ms: int) -> int:
        """Remove consumers that own nothing and were idle over min_idle_ms: dead workers'."""
        if self.mode_of(queue) == FAST:
            return 0  # no consumer group
        lanes = self.keys.queue(queue).lanes
        return sum(await self.aio.run_many([ops.prune(lane, min_idle_ms) for lane in lanes]))

    async def take_tokens(self, bucket: str, capacity: float, refill_per_ms: float,
                          wanted: int) -> tuple[int, int]:
        """A rate limit's token bucket, by the Redis server's clock (rate.lua)."""
        return await self.aio.run(ops.take_tokens(self.keys, bucket, capacity, refill_per_ms,
                                                  wanted))

    # -- events (core/events.py) ---------------------------------------------

    def _events_op(self, queue: str, after: str, count: int, block_ms: int | None) -> Op | None:
        keys = self.keys.queue(queue)
        if block_ms is None:
            return None if after == "$" else ops.events_range(keys, queue, after, count)
        return ops.events_read(keys, queue, after, count, block_ms)

    def events(self, queue: str, after: str, count: int, block_ms: int | None) -> list[Event]:
        """Up to ``count`` events after cursor ``after`` (XRANGE), or with ``block_ms``
        waiting that long for one (XREAD; "$": only new ones)."""
        op = self._events_op(queue, after, count, block_ms)
        return self.sync.run(op) if op is not None else []

    def last_event_cursor(self, queue: str) -> str:
        return self.sync.run(ops.events_last(self.keys.queue(queue)))

    async def alast_event_cursor(self, queue: str) -> str:
        return await self.aio.run(ops.events_last(self.keys.queue(queue)))

    async def aevents(self, queue: str, after: str, count: int,
                      block_ms: int | None) -> list[Event]:
        op = self._events_op(queue, after, count, block_ms)
        return await self.aio.run(op) if op is not None else []

    def read_events(self, queue: str, group: str, consumer: str, count: int,
                    block_ms: int | None, pending: bool = False) -> list[Event]:
        """Events of consumer group ``group`` (XREADGROUP; the group is created at the
        oldest kept event on first use): new ones, or with ``pending`` those delivered to
        ``consumer`` and not acknowledged yet. Acknowledge them with ack_events()."""
        keys = self.keys.queue(queue)
        skipped: list[str] = []
        op = ops.events_read_group(keys, queue, group, consumer, count, block_ms, pending,
                                   skipped)
        try:
            out = self.sync.run(op)
        except BrokerError as exc:
            if "NOGROUP" not in str(exc):
                raise
            with contextlib.suppress(BrokerError):  # BUSYGROUP: created meanwhile
                self.sync.run(ops.events_group_create(keys, group))
            out = self.sync.run(op)
        if skipped:  # pending entries trimmed away by MAXLEN: nothing left to deliver
            self.sync.run(ops.events_ack(keys, group, skipped))
        return out

    async def aread_events(self, queue: str, group: str, consumer: str, count: int,
                           block_ms: int | None, pending: bool = False) -> list[Event]:
        keys = self.keys.queue(queue)
        skipped: list[str] = []
        op = ops.events_read_group(keys, queue, group, consumer, count, block_ms, pending,
                                   skipped)
        try:
            out = await self.aio.run(op)
        except BrokerError as exc:
            if "NOGROUP" not in str(exc):
                raise
            with contextlib.suppress(BrokerError):
                await self.aio.run(ops.events_group_create(keys, group))
            out = await self.aio.run(op)
        if skipped:
            await self.aio.run(ops.events_ack(keys, group, skipped))
        return out

    def ack_events(self, queue: str, group: str, cursors: Sequence[str]) -> int:
        if not cursors:
            return 0
        return self.sync.run(ops.events_ack(self.keys.queue(queue), group, cursors))

    async def aack_events(self, queue: str, group: str, cursors: Sequence[str]) -> int:
        if not cursors:
            return 0
        return await self.aio.run(ops.events_ack(self.keys.queue(queue), group, cursors))

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
