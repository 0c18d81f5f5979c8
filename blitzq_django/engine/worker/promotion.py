"""Promotion: move due scheduled messages (delayed, ETA, retry backoff) onto their queues.

Any number of workers promote at once: the promote script is atomic, so each due
message moves once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ..errors import BlitzqError

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("blitzq.worker")

PROMOTE_LIMIT = 1000


def _ms() -> int:
    return int(time.time() * 1000)


async def promote_loop(worker: Worker) -> None:
    poll = worker.config.schedule_poll_interval
    while True:
        wait = poll
        try:
            now = _ms()
            for queue in worker.queues:
                _moved, next_due = await worker.broker.promote(queue, now, PROMOTE_LIMIT)
                if next_due >= 0:
                    wait = min(wait, max(0.0, (next_due - now) / 1000))
        except Exception as exc:  # this loop must outlive any error
            log.warning("promotion failed: %s", exc,
                        exc_info=not isinstance(exc, BlitzqError | OSError))
        if await worker.helper_wait(wait):
            return


async def promote_all_due(worker: Worker) -> int:
    """Promote what is due now on every queue; how many messages moved."""
    moved = 0
    for queue in worker.queues:
        moved += (await worker.broker.promote(queue, _ms(), PROMOTE_LIMIT))[0]
    return moved
