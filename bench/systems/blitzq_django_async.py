"""blitzq through Django: `manage.py runworker`, `@blitzq_task` ``async def`` tasks."""

from __future__ import annotations

from ._django import ASYNC, BULK_NOTE, CONC, VERSION, make

__all__ = ["ASYNC", "BULK_NOTE", "CONC", "VERSION"]
globals().update(make("async"))
