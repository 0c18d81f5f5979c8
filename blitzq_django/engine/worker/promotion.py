"""Promotion: move due scheduled messages (delayed, ETA, retry backoff) onto their queues.

Any number of workers promote at once: the promote script is atomic, so each due
message moves once. The loop a worker runs beside its fetching is the scheduler's
``promote_forever`` (scheduler/promoting.py, which also holds ``PROMOTE_LIMIT``);
this module adds the one pass a burst worker makes before it calls itself done.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..brokers.base import Broker
from ..core.ids import now_ms
from ..scheduler.promoting import PROMOTE_LIMIT, promote_forever


async def promote_all_due(broker: Broker, queues: Sequence[str]) -> int:
    """Promote what is due now on every queue; how many messages moved."""
    moved = 0
    for queue in queues:
        moved += (await broker.promote(queue, now_ms(), PROMOTE_LIMIT))[0]
    return moved


__all__ = ["promote_all_due", "promote_forever"]
