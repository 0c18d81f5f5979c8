"""Fetching: read deliveries into the in-flight table, and admit each one.

Admission decodes the message (large ones on a thread, so one huge message
cannot stall the loop), finds its task, and either offers it to a slot (through the
rate gate when its task has a rate limit) or dead-letters it (malformed, unknown
task, too many deliveries); one that expired or was revoked (cancel) settles as
such without running (the executor's ``dropped``). Recovery admits its claims the
same way, ahead of everything fetched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..brokers.base import Broker, Delivery, Settlement
from ..core import deadletter as reasons
from ..core.ids import now_ms
from ..core.message import Message, decode
from ..core.states import HeldState
from ..core.task import TaskSpec
from ..errors import BlitzqError, MessageDecodeError
from . import outcome, tasklog
from .config import WorkerConfig
from .inflight import Held, InFlight, Key, Revoked, Settle
from .waits import wait_set

log = logging.getLogger("blitzq.worker")

PREFETCHED = HeldState.PREFETCHED
FETCH_BACKOFF_MIN_S, FETCH_BACKOFF_MAX_S = 0.1, 5.0
#: Messages larger than this are decoded on a thread: decoding a few MiB takes long
#: enough to delay every other attempt on the loop.
DECODE_ON_THREAD_BYTES = 256 * 1024


class Intake:
    def __init__(self, *, broker: Broker, name: str, config: WorkerConfig, inflight: InFlight,
                 options: outcome.SettleOptions, settle: Settle,
                 find: Callable[[str], TaskSpec | None], offer: Callable[[Held, bool], None],
                 limit: Callable[[Held, bool], None],
                 dropped: Callable[[Held, Message, TaskSpec | None], bool],
                 revoked: Revoked, max_message_size: int, pool: ThreadPoolExecutor,
                 room: asyncio.Event, stopping: asyncio.Event,
                 nothing_due: Callable[[], Awaitable[bool]],
                 ran_here: Callable[[Key], tuple[Settlement, Any] | None]) -> None:
        self._broker = broker
        self._name = name
        self._config = config
        self._inflight = inflight
        self._options = options
        self._settle = settle
        self._max_deliveries = config.max_deliveries
        self._max_message_size = max_message_size
        self._pool = pool  # decodes the large messages
        self._room = room  # set when a slot's delivery is settled (or at a stop)
        self._nothing_due = nothing_due  # burst mode: whether anything is left to do
        self._admitting: set[asyncio.Future[None]] = set()
        # Bound once: admit() runs for every message.
        self._hold = inflight.admit
        self._find = find  # the task registry's
        self._offer = offer  # the executor's: to a slot
        self._limit = limit  # the rate gate's: to a slot once a token is taken
        self._dropped = dropped  # the executor's: settle an expired or revoked one
        self._stopping = stopping
        self._revoked = revoked  # one set for the worker's life
        #: the worker's: the refused settlement of an attempt of an entry that ran here
        self._ran_here = ran_here

    async def fetch_loop(self, queue: str) -> None:
        """Read ``queue`` (every lane of it, highest priority first) into the table."""
        cfg, inflight, stopping = self._config, self._inflight, self._stopping
        block_ms = int((0.05 if cfg.burst else cfg.block_timeout) * 1000)
        slots, room = inflight.slots(queue), cfg.prefetch_of(queue)
        queues = (queue,)
        backoff = FETCH_BACKOFF_MIN_S
        quiet = 0
        while not stopping.is_set():
            free = room - slots.held
            if free <= 0:
                await self._wait_for_room(slots.held, room)
                continue
            try:
                deliveries = await self._broker.fetch(queues, self._name,
                                                      min(free, cfg.batch_size), block_ms)
            except (BlitzqError, OSError) as exc:
                log.warning("fetch from %r failed, retrying in %.1fs: %s", queue, backoff, exc)
                await wait_set(stopping, backoff)
                backoff = min(backoff * 2, FETCH_BACKOFF_MAX_S)
                continue
            backoff = FETCH_BACKOFF_MIN_S
            for delivery in deliveries:
                self.admit(delivery)
            if deliveries:
                # Let the attempts just started take their first step before the next
                # fetch is sent: sending it through redis.asyncio takes about 0.1 ms, which
                # each of them waited for (fetch reply to task start, median: 0.17 ms
                # without this pass, 0.08 ms with it, on Python 3.11).
                await asyncio.sleep(0)
            if cfg.burst:
                # Done when idle twice in a row: another promoter may have moved a message
                # onto the queue between our empty fetch and our own promotion.
                idle = (not deliveries and not len(inflight) and not self._admitting
                        and await self._nothing_due())
                quiet = quiet + 1 if idle else 0
                if quiet >= 2:
                    return

    async def _wait_for_room(self, held: int, room: int) -> None:
        """Until the queue has room for more deliveries (or the worker stops)."""
        self._room.clear()
        if held < room:
            return
        await self._room.wait()

    def admit(self, delivery: Delivery, first: bool = False) -> bool:
        """Take one delivery; False when this worker already holds that entry."""
        held = self._hold(delivery, time.monotonic())
        if held is None:
            return False
        if delivery.delivery_count > 1:
            ran = self._ran_here(delivery.key)
            if ran is not None:
                # It ran here already and its settlement was refused (a pause outlived its
                # lease), then came back to this worker: write that outcome, not a rerun.
                settlement, held.message = ran
                log.info("entry %r on %r already ran here; its outcome is written now, it "
                         "does not run again", delivery.entry_id, delivery.queue)
                self._settle(held, settlement._replace(delivery=delivery))
                return True
        if self._stopping.is_set():
            # Fetched or claimed as we were stopping: hand it straight back.
            self._settle(held, outcome.requeued(delivery, None, self._options))
            return True
        payload = delivery.payload
        if payload is not None and len(payload) > DECODE_ON_THREAD_BYTES:
            decoding = asyncio.ensure_future(self._decode_on_thread(held, first))
            self._admitting.add(decoding)
            decoding.add_done_callback(self._admitting.discard)
            return True
        try:
            if payload is None:
                raise MessageDecodeError("stream entry has no message field")
            message = decode(payload, self._max_message_size)
        except Exception as exc:  # noqa: BLE001 - whatever the bytes do, the entry ends somewhere
            self._malformed(held, exc)
            return True
        # _admit_message(), inlined: this runs for every message.
        spec = self._find(message.task)
        # Expired or revoked: no set lookup while nothing is revoked.
        if (message.expires_ms is not None or self._revoked) and self._dropped(held, message,
                                                                               spec):
            return True
        if spec is None or delivery.delivery_count > self._max_deliveries:
            self._refuse_or_check(held, message, spec, first)
            return True
        held.message, held.spec = message, spec
        if spec.rate_limit is not None or spec.rate_key is not None:
            self._limit(held, first)  # runs once it has a token (ratelimit.py)
        else:
            self._offer(held, first)
        return True

    async def _decode_on_thread(self, held: Held, first: bool) -> None:
        loop = asyncio.get_running_loop()
        try:
            # Only a payload over DECODE_ON_THREAD_BYTES comes here: never None.
            message = await loop.run_in_executor(
                self._pool, decode, held.delivery.payload,  # type: ignore[arg-type]
                self._max_message_size)
        except Exception as exc:  # noqa: BLE001 - whatever the bytes do, the entry ends somewhere
            if held.state is PREFETCHED and self._inflight.get(held.key) is held:
                self._malformed(held, exc)
            return
        # Requeued by a shutdown, or dropped after a lost lease, while it was decoded.
        if held.state is PREFETCHED and self._inflight.get(held.key) is held:
            self._admit_message(held, message, first)

    def _malformed(self, held: Held, exc: Exception) -> None:
        delivery = held.delivery
        tasklog.rejected(delivery, None, None, reasons.MALFORMED, str(exc), self._name)
        self._settle(held, outcome.rejected(delivery, reasons.MALFORMED, now_ms(),
                                            self._options,
                                            detail=f"{reasons.MALFORMED}: {exc}"))

    def _admit_message(self, held: Held, message: Message, first: bool) -> None:
        spec = self._find(message.task)
        if (message.expires_ms is not None or self._revoked) and self._dropped(held, message,
                                                                               spec):
            return
        if spec is None or held.delivery.delivery_count > self._max_deliveries:
            self._refuse_or_check(held, message, spec, first)
            return
        held.message, held.spec = message, spec
        self._to_slot(held, first)

    def _to_slot(self, held: Held, first: bool) -> None:
        if held.spec.rate_limit is not None or held.spec.rate_key is not None:
            self._limit(held, first)
        else:
            self._offer(held, first)

    def _refuse_or_check(self, held: Held, message: Message, spec: TaskSpec | None,
                         first: bool) -> None:
        """An unknown task is dead-lettered; a delivery past max_deliveries is, once its
        counted starts show that it killed its worker that often (``_count_starts``)."""
        if spec is None:
            self._reject(held, message, spec)
            return
        held.message, held.spec = message, spec
        counting = asyncio.ensure_future(self._count_starts(held, first))
        self._admitting.add(counting)  # (burst mode: not idle while it is counted)
        counting.add_done_callback(self._admitting.discard)

    async def _count_starts(self, held: Held, first: bool) -> None:
        # Poison detection counts the times the message started, not the times it was
        # delivered: a worker that died holding it unstarted (prefetched, waiting for a
        # slot) was not killed by it. Its first delivery counts as started (nothing
        # records that start: it is every message's path); each later start is counted
        # before it runs (execution.py, _launch_recovered).
        delivery = held.delivery
        try:
            started = 1 + await self._broker.starts(delivery)
        except (BlitzqError, OSError) as exc:
            started = delivery.delivery_count - 1  # cannot tell: as if each delivery started
            log.warning("could not read the starts of entry %r on %r; counting each of its"
                        " %d deliveries as one: %s", delivery.entry_id, delivery.queue,
                        started, exc)
        if held.state is not PREFETCHED or self._inflight.get(held.key) is not held:
            return  # requeued by a shutdown, or dropped after a lost lease, meanwhile
        if started >= self._max_deliveries:
            self._reject(held, held.message, held.spec, started)
        else:
            self._to_slot(held, first)

    def _reject(self, held: Held, message: Message, spec: TaskSpec | None,
                started: int = 0) -> None:
        """Dead-letter a decoded message that must not run: unknown task, too many deliveries."""
        delivery = held.delivery
        held.message = message
        if spec is None:
            tasklog.rejected(delivery, message, None, reasons.UNKNOWN_TASK,
                             f"no task {message.task!r} is registered in this worker",
                             self._name)
            self._settle(held, outcome.rejected(delivery, reasons.UNKNOWN_TASK, now_ms(),
                                                self._options, message,
                                                f"{reasons.UNKNOWN_TASK} {message.task!r}"))
            return
        tasklog.rejected(delivery, message, spec, reasons.MAX_DELIVERIES,
                         f"started {started} times, delivered {delivery.delivery_count} "
                         f"times (max_deliveries {self._max_deliveries}): a worker died or "
                         "lost its lease running it each time", self._name)
        self._settle(held, outcome.rejected(delivery, reasons.MAX_DELIVERIES, now_ms(),
                                            self._options, message))
