"""Side row (not in the default sitting): blitzq-django with BLITZQ["HISTORY"] "off", i.e.
without the history writer (process) that runworker starts by default (to show its cost)."""

from __future__ import annotations

from ._django import ASYNC, BULK_NOTE, CONC, VERSION, side_row

__all__ = ["ASYNC", "BULK_NOTE", "CONC", "VERSION"]
globals().update(side_row("def", {"HISTORY": "off"},
                          ("HISTORY 'all' to SQLite by a writer process",
                           "HISTORY 'off' (changed)")))
