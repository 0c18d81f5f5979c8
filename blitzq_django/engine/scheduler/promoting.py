"""Promotion of due scheduled messages, woken at once by an earlier new one.

Workers and schedulers both run ``promote_forever``: it moves due messages (delayed, ETA,
retry backoff) onto their queues with promote.lua (atomic: any number may run it), then
sleeps until the earliest remaining one is due, at most ``poll`` seconds. A delayed
message enqueued meanwhile that becomes the earliest of its lane's schedule is published
on the queue's wake channel by enqueue.lua (``QueueKeys.wake_channel``): the promoter
wakes and sleeps again until that one is due, so a short delay is not late by a poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from ..core.ids import now_ms
from ..errors import BlitzqError

log = logging.getLogger("blitzq.worker")

PROMOTE_LIMIT = 1000


async def wait_first(stop: asyncio.Event, wake: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``, returning early on ``wake``; True when ``stop`` is set."""
    if not stop.is_set() and not wake.is_set() and seconds > 0:
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
    return stop.is_set()


async def listen_wakeups(broker: Any, queues: Sequence[str], wake: asyncio.Event) -> None:
    """Set ``wake`` at each publish on the wake channels of ``queues`` (the memory
    broker's store never does: it polls), until cancelled; a lost connection is retried
    (polling covers the gap)."""
    store = broker.periodic
    while True:
        try:
            await store.listen_wakeups(queues, wake.set)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - polling goes on; listen again later
            log.debug("wake-up listener: %s", exc)
        await asyncio.sleep(1.0)  # back off before subscribing again


async def promote_forever(broker: Any, queues: Sequence[str], stop: asyncio.Event,
                          poll: float = 0.5) -> None:
    """Promote due messages of ``queues`` until ``stop`` is set."""
    wake = asyncio.Event()
    listener = asyncio.create_task(listen_wakeups(broker, queues, wake),
                                   name="blitzq-wakeups")
    try:
        while True:
            wait = poll
            wake.clear()  # before reading: a publish from here on wakes the next sleep
            try:
                now = now_ms()
                for queue in queues:
                    _moved, next_due = await broker.promote(queue, now, PROMOTE_LIMIT)
                    if next_due >= 0:
                        wait = min(wait, max(0.0, (next_due - now) / 1000))
            except Exception as exc:  # this loop must outlive any error
                log.warning("promotion failed: %s", exc,
                            exc_info=not isinstance(exc, BlitzqError | OSError))
            if await wait_first(stop, wake, wait):
                return
    finally:
        listener.cancel()
        with contextlib.suppress(BaseException):
            await listener
