"""Revocations: the messages of this worker's queues that were cancelled while queued
or running (``client.cancel``; docs/cancel.md), and what the worker does about them.

The set ``ids`` holds (queue, message id) of every revocation that has not expired. It
is filled three ways: a load when the worker starts, each revocation pushed over the
namespace's pub/sub channel (one connection; about a millisecond after ``cancel()``),
and a re-read every ``SYNC_INTERVAL_S`` (``ZRANGEBYSCORE rv now +inf`` per queue), so a
revocation whose pub/sub message was lost (a dropped connection) still applies within
that interval. Revocations are never undone, so a read only adds to what pub/sub said
meanwhile; an id leaves the set when Redis no longer holds it (``REVOKE_TTL``).

What a revocation does:

- a message not started yet (at admission, or waiting for a slot) is settled
  ``cancelled`` without running: acked, recorded, waiters notified. Admission and the
  start of an attempt look the id up only while the set is not empty;
- a running ``async def`` attempt has its asyncio task cancelled: ``CancelledError`` at
  its next ``await``, and the attempt settles ``cancelled``;
- a running ``def`` attempt cannot be interrupted: ``current_task().cancelled`` turns
  True (its loops may stop early), and its outcome is recorded as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from ..brokers.base import Broker
from ..core.ids import now_ms
from ..core.states import HeldState
from ..errors import BlitzqError
from . import outcome
from .inflight import Held, InFlight, Revoked, Settle
from .waits import wait_set

log = logging.getLogger("blitzq.worker")

#: Seconds between two re-reads of the revocations: the longest a revocation whose
#: pub/sub message was lost waits to apply.
SYNC_INTERVAL_S = 2.0
#: How long the worker waits, when it starts, for its subscription before the first read.
SUBSCRIBE_WAIT_S = 2.0
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.1, 5.0


class Revocations:
    def __init__(self, *, broker: Broker, queues: Sequence[str], ids: Revoked,
                 inflight: InFlight, options: outcome.SettleOptions, settle: Settle,
                 interrupt: Callable[[Held], bool], helpers_stop: asyncio.Event) -> None:
        self._broker = broker
        self._queue_list = tuple(queues)
        self._queues = frozenset(queues)
        #: (queue, message id) of each unexpired revocation of this worker's queues. One
        #: set object for the worker's life (admission binds it once): changed in place.
        self.ids = ids
        self._inflight = inflight
        self._options = options
        self._settle = settle
        self._interrupt = interrupt  # the executor's: cancel a running `async def` attempt
        self._helpers_stop = helpers_stop
        self.interval = SYNC_INTERVAL_S
        self._listening = asyncio.Event()
        #: one set per read in progress (the periodic one and a resubscription's may
        #: overlap): what was pushed while it ran
        self._pushed_during: list[set[tuple[str, str]]] = []
        self._resync: asyncio.Future[None] | None = None

    # -- what is revoked ---------------------------------------------------------

    def on_revoked(self, queue: str, message_id: str) -> None:
        """A revocation pushed over pub/sub (or by the in-process broker)."""
        if queue not in self._queues:
            return
        key = (queue, message_id)
        for pushed in self._pushed_during:
            pushed.add(key)
        if key not in self.ids:
            self.ids.add(key)
            self.apply((key,))

    async def sync(self) -> None:
        """Re-read every unexpired revocation of the worker's queues."""
        pushed: set[tuple[str, str]] = set()
        self._pushed_during.append(pushed)
        try:
            found = await self._broker.revoked(self._queue_list, now_ms())
        finally:
            self._pushed_during.remove(pushed)
        found |= pushed
        new = found - self.ids
        if new or len(found) != len(self.ids):
            self.ids.intersection_update(found)
            self.ids.update(found)
        if new:
            log.info("revocations read: %d new", len(new))
            self.apply(new)

    # -- applying them -------------------------------------------------------------

    def apply(self, keys: Iterable[tuple[str, str]]) -> None:
        """Act on the held deliveries of newly revoked messages."""
        keys = set(keys)
        for held in self._inflight:
            message = held.message
            if message is not None and (held.delivery.queue, message.id) in keys:
                self._revoke(held)

    def _revoke(self, held: Held) -> None:
        message = held.message
        if held.state is HeldState.PREFETCHED:
            log.info("cancelled message %r on %r before it started", message.id,
                     held.delivery.queue)
            self._settle(held, outcome.cancelled(held.delivery, message, held.spec, now_ms(),
                                                 self._options))
        elif held.state is HeldState.RUNNING and not held.cancelled:
            held.cancelled = True  # current_task().cancelled; and the runner settles cancelled
            if self._interrupt(held):
                log.info("cancelled running message %r on %r", message.id,
                         held.delivery.queue)
            else:
                log.info("message %r on %r was cancelled while its thread runs: it cannot be "
                         "interrupted (current_task().cancelled is now True)", message.id,
                         held.delivery.queue)

    # -- the helper ------------------------------------------------------------------

    async def start(self) -> asyncio.Task[None]:
        """Listen, then read what is revoked already; returns the listening task."""
        listener = asyncio.create_task(self._listen(), name="blitzq-revocations-listen")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), SUBSCRIBE_WAIT_S)
        try:
            await self.sync()
        except (BlitzqError, OSError) as exc:
            log.warning("could not read revocations (retrying in %.1fs): %s", self.interval,
                        exc)
        return listener

    async def run(self, listener: asyncio.Task[None]) -> None:
        """Re-read every ``interval`` until the helpers stop; then stop listening."""
        try:
            while not await wait_set(self._helpers_stop, self.interval):
                try:
                    await self.sync()
                except Exception as exc:  # this loop must outlive any error
                    log.warning("revocations read failed: %s", exc,
                                exc_info=not isinstance(exc, BlitzqError | OSError))
        finally:
            listener.cancel()
            with contextlib.suppress(BaseException):
                await listener

    async def _listen(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            began = time.monotonic()
            try:
                await self._broker.listen_revocations(self.on_revoked, self._on_listening)
            except Exception as exc:  # noqa: BLE001 - resubscribe; the re-reads cover the gap
                log.warning("revocation channel lost, resubscribing in %.1fs: %s", backoff,
                            exc, exc_info=not isinstance(exc, BlitzqError | OSError))
            if time.monotonic() - began > BACKOFF_MAX_S:
                backoff = BACKOFF_MIN_S  # it had been listening fine: reconnect soon
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _on_listening(self) -> None:
        if self._listening.is_set():
            # Subscribed again after a loss: read now what was published meanwhile.
            self._resync = asyncio.ensure_future(self._sync_quietly())
        self._listening.set()

    async def _sync_quietly(self) -> None:
        with contextlib.suppress(Exception):
            await self.sync()
