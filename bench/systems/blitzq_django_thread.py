"""Side row (not in the default sitting): blitzq-django with BLITZQ["HISTORY_WRITER"]
"thread", i.e. the history writer on a thread of the worker's process instead of the
child process runworker starts by default (to show what the placement costs)."""

from __future__ import annotations

import json
import os

from ._django import ASYNC, BULK_NOTE, CONC, VERSION, make

__all__ = ["ASYNC", "BULK_NOTE", "CONC", "VERSION"]
globals().update(make("def"))
SCALES, WEIGHT = True, False
_run_worker, _settings = run_worker, settings  # noqa: F821 (from make)


def run_worker() -> None:
    os.environ["BENCH_DJ_BLITZQ"] = json.dumps({"HISTORY_WRITER": "thread"})
    _run_worker()


def settings(workload: str) -> str:
    return _settings(workload).replace("by a writer process",
                                       "by a writer thread (HISTORY_WRITER 'thread', changed)")
