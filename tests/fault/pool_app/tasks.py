"""The tasks of the pool tests: each body notes ``start`` and ``done`` in the ledger."""

from __future__ import annotations

import time

from blitzq_django.decorators import blitzq_task

from ..app import note


@blitzq_task(name="pool.sleep")
def sleep(seconds: float) -> float:
    note("start")
    time.sleep(seconds)  # a `def` task: on a thread of the worker
    note("done")
    return seconds


@blitzq_task(name="pool.stuck", timeout=1, retries=0)
def stuck(seconds: float = 3600) -> None:
    """Blocks in one C call past its time limit: the interrupt cannot land until it returns."""
    note("start")
    try:
        time.sleep(seconds)
    finally:
        note("cleanup")
