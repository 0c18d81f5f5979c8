"""Fetching: read deliveries into the in-flight table, and admit each one.

Admission decodes the message (large ones on a thread, so one huge message
cannot stall the loop), finds its task, and either offers it to a slot or
dead-letters it (malformed, unknown task, too many deliveries); one that expired
or was revoked (cancel) settles as such without running. Recovery admits its
claims the same way, ahead of everything fetched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ..brokers.base import Delivery
from ..core import deadletter as reasons
from ..core.message import Message, decode
from ..core.task import TaskSpec
from ..errors import BlitzqError, MessageDecodeError
from . import outcome, tasklog
from .execution import now_ms
from .inflight import PREFETCHED, Held

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("blitzq.worker")

FETCH_BACKOFF_MIN_S, FETCH_BACKOFF_MAX_S = 0.1, 5.0
#: Messages larger than this are decoded on a thread: decoding a few MiB takes long
#: enough to delay every other attempt on the loop.
DECODE_ON_THREAD_BYTES = 256 * 1024


class Intake:
    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._inflight = worker.inflight
        self._client = worker.client
        self._max_deliveries = worker.config.max_deliveries
        self._decoding: set[asyncio.Future[None]] = set()
        # Bound once: admit() runs for every message.
        self._hold = worker.inflight.admit
        self._find = worker.client.registry.find
        self._offer = worker.executor.offer
        self._stopping = worker.stopping_event
        self._revoked = worker.revocations.ids  # one set for the worker's life

    async def fetch_loop(self, queue: str) -> None:
        """Read ``queue`` (every lane of it, highest priority first) into the table."""
        worker, cfg, inflight = self._worker, self._worker.config, self._inflight
        block_ms = int((0.05 if cfg.burst else cfg.block_timeout) * 1000)
        slots, room = inflight.slots(queue), cfg.prefetch_of(queue)
        queues = (queue,)
        backoff = FETCH_BACKOFF_MIN_S
        quiet = 0
        while not worker.stopping:
            free = room - slots.held
            if free <= 0:
                await worker.wait_for_room(queue)
                continue
            try:
                deliveries = await worker.broker.fetch(queues, worker.name,
                                                       min(free, cfg.batch_size), block_ms)
            except (BlitzqError, OSError) as exc:
                log.warning("fetch from %r failed, retrying in %.1fs: %s", queue, backoff, exc)
                await worker.sleep(backoff)
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
                idle = (not deliveries and not len(inflight) and not self._decoding
                        and await worker.nothing_due())
                quiet = quiet + 1 if idle else 0
                if quiet >= 2:
                    return

    def admit(self, delivery: Delivery, first: bool = False) -> bool:
        """Take one delivery; False when this worker already holds that entry."""
        held = self._hold(delivery, time.monotonic())
        if held is None:
            return False
        if self._stopping.is_set():
            # Fetched or claimed as we were stopping: hand it straight back.
            worker = self._worker
            worker.settle(held, outcome.requeued(delivery, None, worker.policy))
            return True
        payload = delivery.payload
        if payload is not None and len(payload) > DECODE_ON_THREAD_BYTES:
            decoding = asyncio.ensure_future(self._decode_on_thread(held, first))
            self._decoding.add(decoding)
            decoding.add_done_callback(self._decoding.discard)
            return True
        try:
            if payload is None:
                raise MessageDecodeError("stream entry has no message field")
            message = decode(payload, self._client.max_message_size)
        except Exception as exc:  # noqa: BLE001 - whatever the bytes do, the entry ends somewhere
            self._malformed(held, exc)
            return True
        # _admit_message(), inlined: this runs for every message.
        spec = self._find(message.task)
        # Expired or revoked: no set lookup while nothing is revoked.
        if (message.expires_ms is not None or self._revoked) and self.dropped(held, message,
                                                                              spec):
            return True
        if spec is None or delivery.delivery_count > self._max_deliveries:
            self._reject(held, message, spec)
            return True
        held.message, held.spec = message, spec
        if spec.rate_limit is not None or spec.rate_key is not None:
            self._worker.gate.admit(held, first)  # runs once it has a token (ratelimit.py)
        else:
            self._offer(held, first)
        return True

    async def _decode_on_thread(self, held: Held, first: bool) -> None:
        loop = asyncio.get_running_loop()
        try:
            # Only a payload over DECODE_ON_THREAD_BYTES comes here: never None.
            message = await loop.run_in_executor(
                self._worker.pool, decode, held.delivery.payload,  # type: ignore[arg-type]
                self._client.max_message_size)
        except Exception as exc:  # noqa: BLE001 - whatever the bytes do, the entry ends somewhere
            if held.state is PREFETCHED and self._inflight.get(held.key) is held:
                self._malformed(held, exc)
            return
        # Requeued by a shutdown, or dropped after a lost lease, while it was decoded.
        if held.state is PREFETCHED and self._inflight.get(held.key) is held:
            self._admit_message(held, message, first)

    def _malformed(self, held: Held, exc: Exception) -> None:
        worker, delivery = self._worker, held.delivery
        tasklog.rejected(delivery, None, None, reasons.MALFORMED, str(exc), worker.name)
        worker.settle(held, outcome.rejected(delivery, reasons.MALFORMED, now_ms(),
                                             worker.policy,
                                             detail=f"{reasons.MALFORMED}: {exc}"))

    def _admit_message(self, held: Held, message: Message, first: bool) -> None:
        spec = self._find(message.task)
        if (message.expires_ms is not None or self._revoked) and self.dropped(held, message,
                                                                              spec):
            return
        if spec is None or held.delivery.delivery_count > self._max_deliveries:
            self._reject(held, message, spec)
            return
        held.message, held.spec = message, spec
        if spec.rate_limit is not None or spec.rate_key is not None:
            self._worker.gate.admit(held, first)
        else:
            self._offer(held, first)

    def dropped(self, held: Held, message: Message, spec: TaskSpec | None) -> bool:
        """Settle a message that must not start: expired (``expires``) or revoked
        (``cancel()``). True if it was; called at admission and again right before it
        starts (it may have waited for a slot meanwhile)."""
        worker = self._worker
        if message.expires_ms is not None and message.expires_ms <= now_ms():
            held.message = message
            tasklog.expired(held, message, now_ms() - message.expires_ms, worker.name)
            worker.settle(held, outcome.expired(held.delivery, message, spec, now_ms(),
                                                worker.policy))
            return True
        if self._revoked and (held.delivery.queue, message.id) in self._revoked:
            held.message = message
            log.info("cancelled message %r of %r before it started", message.id, message.task)
            worker.settle(held, outcome.cancelled(held.delivery, message, spec, now_ms(),
                                                  worker.policy))
            return True
        return False

    def _reject(self, held: Held, message: Message, spec: TaskSpec | None) -> None:
        """Dead-letter a decoded message that must not run: unknown task, too many deliveries."""
        worker, delivery = self._worker, held.delivery
        held.message = message
        if spec is None:
            tasklog.rejected(delivery, message, None, reasons.UNKNOWN_TASK,
                             f"no task {message.task!r} is registered in this worker",
                             worker.name)
            worker.settle(held, outcome.rejected(delivery, reasons.UNKNOWN_TASK, now_ms(),
                                                 worker.policy, message,
                                                 f"{reasons.UNKNOWN_TASK} {message.task!r}"))
            return
        tasklog.rejected(delivery, message, spec, reasons.MAX_DELIVERIES,
                         f"delivered {delivery.delivery_count} times (max_deliveries "
                         f"{self._max_deliveries}): a worker died or lost its lease running "
                         "it each time", worker.name)
        worker.settle(held, outcome.rejected(delivery, reasons.MAX_DELIVERIES, now_ms(),
                                             worker.policy, message))
