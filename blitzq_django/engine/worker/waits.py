"""The one way a worker part sleeps: until a timeout, or sooner once told to stop."""

from __future__ import annotations

import asyncio
import contextlib


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``, returning early once ``event`` is set; whether it is."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()


__all__ = ["wait_set"]
