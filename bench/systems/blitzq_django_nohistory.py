"""Side row (not in the default sitting): blitzq-django with BLITZQ["HISTORY"] "off", i.e.
without the history writer (process) that runworker starts by default (to show its cost)."""

from __future__ import annotations

import json
import os

from ._django import ASYNC, BULK_NOTE, CONC, VERSION, make

__all__ = ["ASYNC", "BULK_NOTE", "CONC", "VERSION"]
globals().update(make("def"))
SCALES, WEIGHT = True, False
_run_worker, _settings = run_worker, settings  # noqa: F821 (from make)


def run_worker() -> None:
    os.environ["BENCH_DJ_BLITZQ"] = json.dumps({"HISTORY": "off"})
    _run_worker()


def settings(workload: str) -> str:
    return _settings(workload).replace("HISTORY 'all' to SQLite by a writer process",
                                       "HISTORY 'off' (changed)")
