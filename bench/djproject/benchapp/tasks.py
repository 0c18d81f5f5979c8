"""The bench tasks as a Django project defines them: @blitzq_task, `def` and `async def`.

Bodies are bench/common.py's (a process-local counter, flushed to the accounting DB).
"""

from __future__ import annotations

import sys

from blitzq_django.decorators import blitzq_task

from ... import common as c

Q = c.QUEUE

noop_def = blitzq_task(name="noop_def", queue=Q)(c.noop_sync)
sleep_def = blitzq_task(name="sleep_def", queue=Q)(c.sleep_sync)
lat_def = blitzq_task(name="lat_def", queue=Q)(c.lat_sync)
noop_async = blitzq_task(name="noop_async", queue=Q)(c.noop_async)
sleep_async = blitzq_task(name="sleep_async", queue=Q)(c.sleep_async)
lat_async = blitzq_task(name="lat_async", queue=Q)(c.lat_async)


@blitzq_task(name="modules_def", queue=Q)
def modules_def(t: float = 0.0) -> None:
    """Record how many modules the worker process has imported, then count as done."""
    c.note("modules", len(sys.modules))
    c.tick()


TASKS = {
    "def": {"noop": noop_def, "sleep": sleep_def, "lat": lat_def, "modules": modules_def},
    "async": {"noop": noop_async, "sleep": sleep_async, "lat": lat_async,
              "modules": modules_def},
}
