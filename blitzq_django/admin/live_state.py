"""The task page's "Now, in Redis" block: what the engine knows of the message right now
(``client.inspect()``: running with its worker, scheduled with its due time, a final
record...), its latest progress report, and when nothing is known, why
(``client.explain_missing()``, told what the history row knows)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..engine.core import record as states
from ..engine.core.ids import now_ms
from ..engine.core.record import Record
from ..models import TaskRecord
from ..web.common import age, client, from_ms, record_context


def _ms(when: dt.datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def _in(ms: int | None) -> str:
    """How far ahead a time in ms since the epoch is: '59 s', '3 min', 'now'."""
    if ms is None:
        return ""
    seconds = (ms - now_ms()) / 1000
    if seconds <= 0:
        return "now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def live_context(row: TaskRecord) -> dict[str, Any]:
    """What the page shows of ``row``'s message now. Raises what the engine raises when
    Redis cannot be asked (the caller shows that)."""
    engine = client()
    found = engine.inspect(row.task_id, queue=row.queue)
    if found is None:
        absence = engine.explain_missing(row.task_id, queue=row.queue, task=row.task_name,
                                         state=row.state, finished_ms=_ms(row.finished_at))
        return {"state": "", "missing": True, "why": absence.text, "why_code": absence.reason}
    live = record_context(found) or {}
    live["running"] = found.state == states.RUNNING
    live["scheduled"] = found.due_ms is not None
    live["due"] = from_ms(found.due_ms)
    live["due_in"] = _in(found.due_ms)
    live["running_for"] = age(found.started_ms) if live["running"] else ""
    live["progress"] = _progress(engine, found)
    return live


def _progress(engine: Any, found: Record) -> dict[str, Any] | None:
    """The latest progress report (docs/progress.md), for display; None without one."""
    report = engine.progress(found.id, queue=found.queue)
    if report is None:
        return None
    fraction = report.fraction
    return {"done": _number(report.done),
            "total": None if report.total is None else _number(report.total),
            "fraction": fraction, "percent": None if fraction is None else round(fraction * 100),
            "note": report.note or "", "when": from_ms(report.time_ms)}


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
