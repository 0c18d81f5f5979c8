"""Periodic tasks, the dispatching side: the scheduler that enqueues each schedule's
occurrences (scheduler.py, on the broker's periodic store) and the promotion of due
delayed messages (promoting.py).

docs/scheduling.md tells the whole story; core/schedules.py holds the time rules. The
producer side (declaring schedules, their sources, what is known of them) is
engine/client/schedules.py.
"""

from .scheduler import Dispatch, Scheduler

__all__ = ["Dispatch", "Scheduler"]
