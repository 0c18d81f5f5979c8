"""The admin: task history, workflows, dead letters, the queue overview and periodic
schedules.

History pages read ``TaskRecord`` rows; the dead-letter and queue pages read Redis
through the engine (the ``DeadLetter`` and ``QueueOverview`` models have no table and
exist only to carry these pages and their permissions). Everything shown from task
data is redacted (BLITZQ["REDACT"]) and escaped.
"""

from __future__ import annotations

from . import dead_letters, history, queues, schedules, workflows

__all__ = ["dead_letters", "history", "queues", "schedules", "workflows"]
