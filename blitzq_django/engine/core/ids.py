"""The one clock and the one id helper of the project (pure: no I/O).

Every timestamp the engine stores or compares is milliseconds since the epoch from
``now_ms()``; every message id is ``new_id()``. Code that needs a clock imports it
from here, so a test or a reader finds one definition, not ten.
"""

from __future__ import annotations

import os
import time

__all__ = ["new_id", "now_ms"]


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (the unit of every stored time)."""
    return int(time.time() * 1000)


def new_id() -> str:
    """A random 128-bit message id in hex (like uuid4().hex, at a third of the cost)."""
    return os.urandom(16).hex()
