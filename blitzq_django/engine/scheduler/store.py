"""Where the scheduler's state lives: the broker's periodic store
(brokers/capabilities.py PeriodicStore; Redis: brokers/redis/periodic.py, memory:
brokers/memory_stores.py).

The one write that matters is ``claim``: it marks a schedule's occurrences handled and
dispatches them in one atomic step (periodic.lua on Redis; a lock in memory), so any
number of schedulers dispatch each occurrence once.
"""

from __future__ import annotations

from typing import Any

from ..brokers.capabilities import PeriodicStore


def store_of(broker: Any) -> PeriodicStore:
    return broker.periodic
