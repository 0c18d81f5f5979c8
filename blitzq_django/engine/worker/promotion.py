"""Promotion: move due scheduled messages (delayed, ETA, retry backoff) onto their queues.

Any number of workers promote at once: the promote script is atomic, so each due
message moves once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ..scheduler.promoting import promote_forever

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("blitzq.worker")

PROMOTE_LIMIT = 1000


def _ms() -> int:
    return int(time.time() * 1000)


async def promote_loop(worker: Worker) -> None:
    """Until the helpers stop: sleep until the earliest scheduled message is due (at most
    schedule_poll_interval), woken at once by a new earlier one (scheduler/promoting.py)."""
    await promote_forever(worker.broker, worker.queues, worker.helpers_stop,
                          worker.config.schedule_poll_interval)


async def promote_all_due(worker: Worker) -> int:
    """Promote what is due now on every queue; how many messages moved."""
    moved = 0
    for queue in worker.queues:
        moved += (await worker.broker.promote(queue, _ms(), PROMOTE_LIMIT))[0]
    return moved
