"""Leases: renew what this worker holds, recover what dead workers held.

Renewal covers every held delivery, settling ones included, until its settlement
is written. Recovery claims entries idle past the visibility timeout whatever the
worker's load: claims are admitted ahead of everything fetched, so under any
backlog an orphan starts at the next free slot, within about
``visibility_timeout + recovery_interval`` of its worker's death. An entry the
worker already holds (its own, idle because the process was paused) comes back
from a claim but is not run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from ..brokers.base import Broker, Delivery
from ..core.states import HeldState
from ..errors import BlitzqError
from .config import WorkerConfig
from .inflight import Held, InFlight

log = logging.getLogger("blitzq.worker")

BACKOFF_MIN_S, BACKOFF_MAX_S = 0.1, 5.0
#: Consumers are pruned every this many recovery rounds (each round is one script per
#: queue; pruning reads the group's consumer list, so less often is enough).
PRUNE_EVERY_ROUNDS = 4


class LeaseKeeper:
    def __init__(self, *, broker: Broker, name: str, queues: Sequence[str],
                 config: WorkerConfig, inflight: InFlight, wake: asyncio.Event,
                 admit: Callable[[Delivery, bool], bool], fill_slots: Callable[[], None],
                 wake_fetcher: Callable[[], None], beat: Callable[[], Awaitable[None]],
                 check_memory: Callable[[], None], stopping: asyncio.Event,
                 helpers_stop: asyncio.Event) -> None:
        self._broker = broker
        self._name = name
        self._queues = tuple(queues)
        self._config = config
        self._inflight = inflight
        #: set to renew at once (a waiting delivery's lease is older than the visibility
        #: timeout: the executor sets it)
        self._wake = wake
        self._admit = admit  # the intake's: recovered claims, ahead of everything fetched
        self._fill_slots = fill_slots  # the executor's: after a renewal
        self._wake_fetcher = wake_fetcher
        self._beat = beat  # the worker's registry entry, written with each renewal
        self._check_memory = check_memory
        self._stopping = stopping
        self._helpers_stop = helpers_stop
        self._rounds = 0

    async def run(self) -> None:
        cfg, stopping = self._config, self._stopping
        next_recovery = time.monotonic() + min(cfg.recovery_s, 1.0)
        backoff = 0.0
        while True:
            if backoff:
                wait = backoff
            elif stopping.is_set():
                wait = cfg.heartbeat_s  # no recovery while stopping: renew only
            else:
                wait = min(cfg.heartbeat_s, max(0.0, next_recovery - time.monotonic()))
            if await self._wait(wait):
                return
            self._check_memory()
            try:
                await self.renew()
                await self._beat()
                if not stopping.is_set() and time.monotonic() >= next_recovery:
                    next_recovery = time.monotonic() + cfg.recovery_s
                    await self.recover()
                backoff = 0.0
            except Exception as exc:  # this loop must outlive any error: leases depend on it
                backoff = min(max(backoff * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
                log.warning("lease upkeep failed, retrying in %.1fs: %s", backoff, exc,
                            exc_info=not isinstance(exc, BlitzqError | OSError))

    async def _wait(self, seconds: float) -> bool:
        """Sleep until due or woken; True as soon as the helpers are told to stop."""
        stop = self._helpers_stop
        if not self._wake.is_set() and not stop.is_set():
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
            try:
                await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
        self._wake.clear()
        return stop.is_set()

    async def renew(self) -> None:
        held = self._inflight.renewable()
        if not held:
            return
        sent = time.monotonic()
        lost = {d.key for d in await self._broker.renew(self._name,
                                                        [h.delivery for h in held])}
        for h in held:
            if h.key not in lost:
                h.since = sent
            elif self._inflight.get(h.key) is h:
                self._lost(h)
        self._fill_slots()

    def _lost(self, held: Held) -> None:
        held.lost = True
        delivery = held.delivery
        if held.state is HeldState.PREFETCHED:
            # Another worker owns it now: running it here too would run it twice.
            self._inflight.remove(held.key)
            log.warning("lease lost before start; left to its new owner (entry %r on %r)",
                        delivery.entry_id, delivery.queue)
            self._wake_fetcher()
        elif held.state is HeldState.RUNNING:
            log.warning("lease lost; message may be executed again (entry %r on %r)",
                        delivery.entry_id, delivery.queue)
        # settling: the settlement's own reply tells whether it was written

    async def recover(self) -> None:
        cfg = self._config
        idle_ms = int(cfg.visibility_timeout * 1000)
        for queue in self._queues:
            claimed, deleted = await self._broker.recover(queue, self._name, idle_ms,
                                                          cfg.prefetch_count)
            for entry_id in deleted:
                log.error("entry %r on %r was deleted while pending; nothing to recover",
                          entry_id, queue)
            now = time.monotonic()
            for delivery in claimed:
                if self._admit(delivery, True):  # first: ahead of everything fetched
                    log.warning("recovered %r on %r (delivery %d)", delivery.entry_id, queue,
                                delivery.delivery_count)
                    continue
                # An entry this worker holds (idle while the process was paused, or taken
                # by a worker that died since): it runs or waits here already, so it is not
                # run again; the claim made its lease ours again.
                held = self._inflight.get(delivery.key)
                if held is not None:
                    held.lost, held.since = False, now
                log.info("lease of held entry %r on %r taken back", delivery.entry_id, queue)
        self._rounds += 1
        if self._rounds % PRUNE_EVERY_ROUNDS == 0:
            await self._prune()

    async def _prune(self) -> None:
        """Drop consumers of dead workers: idle ones that own nothing."""
        cfg = self._config
        # Only consumers that own nothing are removed, so nothing is ever lost: a live one
        # removed by mistake (before Redis 7.2 an empty read does not reset its idle time)
        # is recreated by its next read.
        min_idle_ms = int(max(2 * cfg.visibility_timeout, 3 * cfg.block_timeout) * 1000)
        for queue in self._queues:
            with contextlib.suppress(BlitzqError, OSError):
                removed = await self._broker.prune_consumers(queue, min_idle_ms)
                if removed:
                    log.info("removed %d idle consumers of dead workers from %r", removed, queue)
