"""Flusher: group commit of settlements.

Attempts hand their settlement over and go on; one flusher writes whatever has
accumulated while its previous write was in flight, many settlements per round
trip, each atomic on its own (ack + record + notification, or ack + retry, or
ack + dead letter).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ..brokers.base import Broker, Settlement
from ..errors import BlitzqError, BrokerUnavailable

log = logging.getLogger("blitzq.worker")

MAX_PER_WRITE = 1000
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.05, 2.0
MAX_REFUSALS = 5


class Flusher:
    def __init__(self, broker: Broker, consumer: str,
                 on_settled: Callable[[Settlement, bool | None], None]) -> None:
        self._broker = broker
        self._consumer = consumer
        self._on_settled = on_settled
        self._buffer: list[Settlement] = []
        self._ready = asyncio.Event()
        self._closing = False

    def add(self, settlement: Settlement) -> None:
        self._buffer.append(settlement)
        self._ready.set()

    @property
    def backlog(self) -> int:
        return len(self._buffer)

    async def run(self) -> None:
        """Write until closed and empty. Never drops a settlement on a Redis error."""
        backoff = BACKOFF_MIN_S
        refusals = 0
        while True:
            if not self._buffer:
                if self._closing:
                    return
                self._ready.clear()
                await self._ready.wait()
                continue
            batch = self._buffer[:MAX_PER_WRITE]
            try:
                settled = await self._broker.settle(self._consumer, batch, int(time.time() * 1000))
            except (BlitzqError, OSError) as exc:
                # Redis unreachable: retry for as long as it takes. Redis refusing the write
                # (a key of the wrong type, say) will not heal: give the batch up after a few
                # tries; its messages stay pending and are redelivered after the lease expires.
                if not isinstance(exc, BrokerUnavailable | OSError):
                    refusals += 1
                    if refusals >= MAX_REFUSALS:
                        log.error("Redis refused %d settlements %d times, giving them up "
                                  "(redelivered after visibility_timeout): %s",
                                  len(batch), refusals, exc)
                        del self._buffer[:len(batch)]
                        for settlement in batch:
                            self._on_settled(settlement, None)
                        refusals = 0
                        continue
                log.warning("writing %d settlements failed, retrying in %.2fs: %s",
                            len(batch), backoff, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            backoff = BACKOFF_MIN_S
            refusals = 0
            del self._buffer[:len(batch)]
            for settlement, ok in zip(batch, settled, strict=True):
                self._on_settled(settlement, ok)

    def close(self) -> None:
        """Finish what is buffered, then stop."""
        self._closing = True
        self._ready.set()
