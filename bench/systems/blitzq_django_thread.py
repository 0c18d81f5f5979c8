"""Side row (not in the default sitting): blitzq-django with BLITZQ["HISTORY_WRITER"]
"thread", i.e. the history writer on a thread of the worker's process instead of the
child process runworker starts by default (to show what the placement costs)."""

from __future__ import annotations

from ._django import ASYNC, BULK_NOTE, CONC, VERSION, side_row

__all__ = ["ASYNC", "BULK_NOTE", "CONC", "VERSION"]
globals().update(side_row("def", {"HISTORY_WRITER": "thread"},
                          ("by a writer process",
                           "by a writer thread (HISTORY_WRITER 'thread', changed)")))
