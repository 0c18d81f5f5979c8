"""blitzq's bare engine Worker with ``def`` no-op tasks (its default thread pool)."""

from __future__ import annotations

from .blitzq import ASYNC, BULK_NOTE, CONC, VERSION, make

__all__ = ["ASYNC", "BULK_NOTE", "CONC", "VERSION"]
globals().update(make("def"))
