"""Flusher: group commit of settlements.

Attempts hand their settlement over and go on; one flusher writes whatever has
accumulated while its previous write was in flight, many settlements per round
trip, each atomic on its own (ack + record + notification, or ack + retry, or
ack + dead letter).

Every settlement handed over ends in exactly one report to ``on_settled``:
written (True), refused because the lease is lost (False), or given up (None).

Long attempts: every START_EVENT_DELAY_S the flusher asks the worker (``starts``) for
the attempts running longer than that and not seen yet, and writes a settlement of
kind running for each, ownership-checked like any other: it lists the attempt in the
worker's running index (core/running.py), so every running task can be seen without
track_state, and writes its "started" event when events are on and no running record
was written at its start. An attempt that ends sooner (almost all of them) is never
listed, and has its "started" event written by its outcome's settlement, in the same
step: nothing is paid per message for either.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..brokers.base import Broker, Settlement
from ..core.ids import now_ms
from ..core.running import INDEX_DELAY_S
from ..errors import BrokerUnavailable

log = logging.getLogger("blitzq.worker")

MAX_PER_WRITE = 1000
#: An attempt still running this long after it started is listed in the running index
#: and gets its "started" event written on its own (within about twice this); a shorter
#: one has it written with its outcome (one item, not two).
START_EVENT_DELAY_S = INDEX_DELAY_S

#: Called every START_EVENT_DELAY_S: the settlements listing the long attempts due, and
#: whether an attempt is still running unlisted (then call again).
Starts = Callable[[], tuple[list[Settlement], bool]]
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.05, 2.0
MAX_REFUSALS = 5

#: Called with a settlement Redis keeps refusing and the error; returns the settlement to
#: write instead (a plain dead letter), or None to give the delivery up.
Fallback = Callable[[Settlement, BaseException], Settlement | None]


class Flusher:
    def __init__(self, broker: Broker, consumer: str,
                 on_settled: Callable[[Settlement, bool | None], None],
                 fallback: Fallback | None = None, starts: Starts | None = None,
                 record: Callable[[list[Any]], Awaitable[None]] | None = None) -> None:
        self._broker = broker
        self._consumer = consumer
        self._on_settled = on_settled
        self._fallback = fallback
        self._buffer: list[Settlement] = []
        #: workflow steps to record before their settlements are written (add_after)
        self._steps: list[tuple[Settlement, Any]] = []
        self._recording = 0
        self._record = record
        self._ready = asyncio.Event()
        self._closing = False
        self._writing = 0  # settlements taken from the buffer, not yet reported
        self._starts = starts
        self._next_scan = 0.0  # monotonic time of the next call of starts()
        self._watch = False  # an attempt runs unlisted (see Starts)
        self._timer: asyncio.TimerHandle | None = None  # wakes run() for the next look
        #: waiting with no deadline (nothing to write, no start to watch): wake() it when
        #: an attempt starts
        self.sleeping = False

    def wake(self) -> None:
        self._ready.set()

    def _look(self) -> None:
        self._timer = None
        self._ready.set()

    def _due_starts(self) -> list[Settlement]:
        """The settlements listing the attempts running past START_EVENT_DELAY_S (the
        worker is asked at most once per START_EVENT_DELAY_S)."""
        now = time.monotonic()
        if self._starts is None or self._closing or now < self._next_scan:
            return []
        self._next_scan = now + START_EVENT_DELAY_S
        due, self._watch = self._starts()
        return due

    def add(self, settlement: Settlement) -> None:
        self._buffer.append(settlement)
        self._ready.set()

    def add_after(self, settlement: Settlement, step: Any) -> None:
        """Write ``settlement`` once ``step`` (a workflow step's outcome) is recorded in
        its workflow and what follows it is enqueued (worker/workflow_steps.py), both in
        the same group commit as other steps': one round trip for their outcomes, one
        enqueue for what follows them all."""
        self._steps.append((settlement, step))
        self._ready.set()

    async def _record_steps(self) -> None:
        """Record the pending steps, then hand their settlements to the write. A batch
        that cannot reach Redis is tried again for as long as it takes (recording is
        idempotent); one refused otherwise is tried step by step, and a step refused
        MAX_REFUSALS times is settled without being recorded (logged: its workflow
        waits until cancelled)."""
        batch = self._steps[:MAX_PER_WRITE]
        del self._steps[:len(batch)]
        self._recording = len(batch)
        try:
            await self._record_batch(batch)
        finally:
            self._recording = 0

    async def _record_batch(self, batch: list[tuple[Settlement, Any]]) -> None:
        assert self._record is not None
        backoff = BACKOFF_MIN_S
        refusals = 0
        while True:
            try:
                await self._record([step for _, step in batch])
            except (BrokerUnavailable, OSError) as exc:
                log.warning("recording %d workflow steps failed, retrying in %.2fs: %s",
                            len(batch), backoff, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            except Exception as exc:  # noqa: BLE001 - refused by Redis (or a bad state)
                if len(batch) > 1:
                    for one in batch:
                        await self._record_batch([one])
                    return
                refusals += 1
                if refusals < MAX_REFUSALS:
                    log.warning("recording workflow step %r was refused, retrying in %.2fs: "
                                "%s", batch[0][0].message_id, backoff, exc)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                    continue
                # Its message is settled all the same: holding it back would only have it
                # delivered, refused and held back again for ever.
                log.error("recording workflow step %r was refused %d times, settling its "
                          "message without it: its workflow may wait (cancel it): %s",
                          batch[0][0].message_id, refusals, exc)
            self._buffer.extend(settlement for settlement, _ in batch)
            return

    @property
    def backlog(self) -> int:
        return len(self._buffer) + self._writing + len(self._steps) + self._recording

    async def run(self) -> None:
        """Write until closed and empty. Never drops a settlement on a Redis error."""
        while True:
            if self._steps:
                await self._record_steps()
            starts = self._due_starts()
            if not self._buffer and not starts:
                if self._closing:
                    if self._timer is not None:
                        self._timer.cancel()
                        self._timer = None
                    return
                self._ready.clear()
                if self._watch and not self._closing:
                    # Until the next write or the next look: one timer, kept across
                    # wake-ups (a wait_for each time the flusher catches up costs a task
                    # and a timer per batch)
                    if self._timer is None:
                        self._timer = asyncio.get_running_loop().call_later(
                            max(0.0, self._next_scan - time.monotonic()), self._look)
                    await self._ready.wait()
                else:
                    self.sleeping = True
                    try:
                        await self._ready.wait()
                    finally:
                        self.sleeping = False
                    self._next_scan = 0.0  # woken by a start, maybe: look at once
                continue
            batch = self._buffer[:MAX_PER_WRITE]
            del self._buffer[:len(batch)]
            if starts:  # before any outcome: a started event precedes its attempt's end
                batch[:0] = starts
            self._writing = len(batch)
            try:
                await self._write(batch)
            finally:
                self._writing = 0

    async def _write(self, batch: list[Settlement]) -> None:
        # One token per batch, kept across its retries: a batch that Redis applied but
        # whose reply was lost is answered from its receipt instead of run again.
        token = os.urandom(8).hex()
        backoff = BACKOFF_MIN_S
        refusals = 0
        while True:
            try:
                settled = await self._broker.settle(self._consumer, batch, now_ms(), token)
            except (BrokerUnavailable, OSError) as exc:
                # Unreachable: retry for as long as it takes (the leases are renewed meanwhile).
                log.warning("writing %d settlements failed, retrying in %.2fs: %s",
                            len(batch), backoff, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            except Exception as exc:  # noqa: BLE001 - refused by Redis, or not even encodable
                if len(batch) > 1:
                    # One bad settlement must not hold back the others: write them one by one.
                    log.warning("Redis refused a batch of %d settlements (%s); writing them "
                                "one by one", len(batch), exc)
                    for settlement in batch:
                        await self._write([settlement])
                    return
                refusals += 1
                if refusals < MAX_REFUSALS:
                    log.warning("Redis refused a settlement of message %r, retrying in %.2fs: "
                                "%s", batch[0].message_id, backoff, exc)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                    continue
                instead = self._fallback(batch[0], exc) if self._fallback else None
                if instead is not None and instead != batch[0]:
                    log.error("Redis refused the settlement of message %r %d times (%s): "
                              "dead-lettering it instead", batch[0].message_id, refusals, exc)
                    if await self._write_instead(instead):
                        return
                log.error("Redis refused the settlement of message %r %d times, giving it up "
                          "(redelivered after visibility_timeout): %s", batch[0].message_id,
                          refusals, exc)
                self._report(batch[0], None)
                return
            on_settled = self._on_settled
            for settlement, ok in zip(batch, settled, strict=True):
                try:  # _report(), inlined: this loop runs for every message
                    on_settled(settlement, ok)
                except Exception:
                    log.exception("handling the settlement of message %r failed",
                                  settlement.message_id)
            return

    async def _write_instead(self, instead: Settlement) -> bool:
        """Write the fallback (with the usual retries, but no fallback of its own)."""
        reports: list[bool | None] = []
        inner = Flusher(self._broker, self._consumer, lambda _s, ok: reports.append(ok))
        await inner._write([instead])
        if reports and reports[0] is not None:
            self._report(instead, reports[0])
            return True
        return False

    def _report(self, settlement: Settlement, ok: bool | None) -> None:
        try:
            self._on_settled(settlement, ok)
        except Exception:  # the flusher outlives a failing callback: others wait behind it
            log.exception("handling the settlement of message %r failed", settlement.message_id)

    def close(self) -> None:
        """Finish what is buffered, then stop."""
        self._closing = True
        self._ready.set()
