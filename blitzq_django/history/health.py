"""Whether each queue's task history is complete, and what it lacks when it is not.

Two things make a history incomplete, and both are counted per queue by the broker's
history store (on Redis a hash, ``QueueKeys.history_health``, ``bq:{ns:queue}:hh``, that
every process reads):

* **lost** events: trimmed from the events stream before the writer read them (the
  stream's hard cap, ``EVENTS_HARD_MAXLEN``, reached while the writer was behind or
  down). Counted by ``events_read.lua``, the writer's read; before Redis 7, which keeps
  no stream counters, each such trim is counted as a **gap** of unknown size.
* **unwritable** events: read, but refused by the database (or by the writer's own
  conversion) even alone in their transaction: recorded here with the last one's task,
  kind and error, logged at ERROR, and acknowledged so the rest goes on.

The admin's history list shows a banner while either happened within
``HISTORY_RETENTION`` days, and ``/metrics`` exports both counts and the events each
queue's writer has not read yet (docs/django.md, docs/metrics.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..engine import Client
from ..engine.core import events as ev
from ..engine.core.ids import now_ms

log = logging.getLogger("blitzq.history")

#: The events consumer group of the writers (writer.py): its lag is what they have not
#: read yet.
GROUP = "blitzq-history"
#: Most characters of the last unwritable event's description kept.
LAST_MAX = 1000


@dataclass(frozen=True)
class Health:
    """What one queue's history lacks (all 0 / None: nothing)."""

    queue: str
    lost: int = 0
    lost_last_ms: int | None = None
    unwritable: int = 0
    unwritable_last_ms: int | None = None
    unwritable_last: str = ""
    #: Events the writer has not read yet (None: unknown, e.g. no writer ever read).
    unread: int | None = None
    #: Trims of events the writer had not read, of a size Redis before 7 cannot count.
    gaps: int = 0

    @property
    def complete(self) -> bool:
        return not self.lost and not self.unwritable and not self.gaps


def record_unwritable(client: Client, queue: str, event: ev.Event, exc: BaseException) -> None:
    """Count one event the database refused, keep its description as the last one."""
    text = (f"task {event.id} ({event.task or 'unknown task'}), event {event.kind} "
            f"{event.cursor}: {type(exc).__name__}: {exc}")[:LAST_MAX]
    client.broker.history.add_unwritable(queue, now_ms(), text)


def read(client: Client, queues: Iterable[str]) -> list[Health]:
    """The health of each queue's history."""
    store = client.broker.history
    return [_health(queue, *store.health(queue, GROUP)) for queue in queues]


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _health(queue: str, fields: dict[str, str], unread: int | None) -> Health:
    return Health(queue=queue, lost=_int(fields.get("lost")) or 0,
                  gaps=_int(fields.get("gaps")) or 0,
                  lost_last_ms=_int(fields.get("lost_last_ms")),
                  unwritable=_int(fields.get("unwritable")) or 0,
                  unwritable_last_ms=_int(fields.get("unwritable_last_ms")),
                  unwritable_last=fields.get("unwritable_last", ""), unread=unread)


def problems(found: Iterable[Health], since_ms: int) -> list[str]:
    """One sentence per queue whose history lost or could not write events after
    ``since_ms`` (older ones: their rows have been pruned by now)."""
    out = []
    for h in found:
        parts = []
        if (h.lost or h.gaps) and (h.lost_last_ms or 0) >= since_ms:
            counted = [f"{h.lost} events"] if h.lost else []
            if h.gaps:  # Redis before 7 keeps no stream counters
                counted.append(f"{h.gaps} run(s) of events Redis before 7 cannot count")
            parts.append(f"{' and '.join(counted)} were trimmed from its events stream "
                         f"before the history writer read them (the last at "
                         f"{_when(h.lost_last_ms)}; EVENTS_HARD_MAXLEN reached while the "
                         "writer was behind or down): their tasks' rows are missing or not "
                         "in their final state")
        if h.unwritable and (h.unwritable_last_ms or 0) >= since_ms:
            parts.append(f"{h.unwritable} events could not be written (the last at "
                         f"{_when(h.unwritable_last_ms)}: {h.unwritable_last})")
        if parts:
            out.append(f"The task history of queue {h.queue!r} is incomplete: "
                       + "; ".join(parts) + ".")
    return out


def _when(ms: int | None) -> str:
    if ms is None:
        return "an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
