"""Periodic tasks: schedules, their sources, the scheduler and what is known of them.

docs/scheduling.md tells the whole story; core/schedules.py holds the time rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..client.schedules import ScheduleInfo, ScheduleRegistry, ScheduleSource
from ..core import schedules as rules
from ..core.message import unpack
from ..core.record import Record
from ..core.schedules import Schedule
from ..errors import ConfigurationError
from .scheduler import Dispatch, Scheduler
from .store import store_of

if TYPE_CHECKING:
    from ..client import Client

__all__ = ["Dispatch", "Schedule", "ScheduleInfo", "ScheduleRegistry", "ScheduleSource",
           "Scheduler", "declare", "infos", "schedule_of"]


def schedule_of(name: str, task: str, schedule: Any = None, *, cron: Any = None,
                every: Any = None, source: str = "code", **options: Any) -> Schedule:
    """A Schedule from the ways one may be written: ``schedule=`` a cron string (or
    nickname), a number of seconds or a timedelta (an interval); or ``cron=`` / ``every=``."""
    if schedule is not None:
        if cron is not None or every is not None:
            raise ConfigurationError(f"schedule {name!r}: give schedule=, cron= or every=, "
                                     "only one")
        if isinstance(schedule, str):
            cron = schedule
        elif isinstance(schedule, timedelta | int | float) and not isinstance(schedule, bool):
            every = schedule
        else:
            raise ConfigurationError(f"schedule {name!r}: schedule must be a cron expression "
                                     f"(str), seconds or a timedelta, got {schedule!r:.60}")
    return rules.build(name, task, cron=cron, every=every, source=source, **options)


def declare(registry: ScheduleRegistry, task_name: str, schedule: Any = None, *,
            name: str | None = None, **options: Any) -> Schedule:
    """Build a schedule of ``task_name`` (named ``name``, default the task's name) and add
    it to ``registry``."""
    return registry.add(schedule_of(name or task_name, task_name, schedule, **options))


def periodic_decorator(client: Client, schedule: Any = None, **options: Any
                       ) -> Callable[[Callable[..., Any]], Any]:
    """``@client.periodic("0 3 * * *", tz="Europe/Berlin", args=(...))``: a task that also
    runs on a schedule. Task options (retries, timeout, queue...) go to the task; the
    schedule's own options (tz, args, kwargs, missed, catch_up, grace, name, cron, every)
    to the schedule."""
    if callable(schedule):
        raise TypeError("@client.periodic needs a schedule: ('0 3 * * *'), (every=60) or "
                        "(cron='@daily', tz='Europe/Berlin')")
    own = {k: options.pop(k) for k in list(options) if k in SCHEDULE_OPTIONS}
    name = own.pop("name", None)

    def wrap(func: Callable[..., Any]) -> Any:
        task = client.task(**options)(func)
        declare(client.schedule_registry, task.name, schedule, name=name, **own)
        return task

    return wrap


#: keyword arguments of @periodic that belong to the schedule, not the task
SCHEDULE_OPTIONS = frozenset({"name", "cron", "every", "tz", "args", "kwargs", "missed",
                              "catch_up", "grace", "enabled"})


def infos(client: Client, schedules: Sequence[Schedule] | None = None,
          now_ms: int | None = None) -> list[ScheduleInfo]:
    """What is known of each schedule (default: the client's registry): a read per queue
    (claims and last dispatches), and one for the records of the last messages."""
    import time

    now = int(time.time() * 1000) if now_ms is None else now_ms
    chosen = list(client.schedule_registry if schedules is None else schedules)
    store = store_of(client.broker)
    by_queue: dict[str, list[Schedule]] = {}
    for schedule in chosen:
        spec = client.registry.find(schedule.task)
        queue = (schedule.queue or client.route(schedule.task)
                 or (spec.queue if spec is not None else client.default_queue))
        by_queue.setdefault(queue, []).append(schedule)
    out: list[ScheduleInfo] = []
    for queue, group in by_queue.items():
        handled, last = store.read(queue, [s.name for s in group])
        lasts = [_unpacked(blob) for blob in last]
        ids = [d.get("id") for d in lasts if d.get("id")]
        records = dict(zip(ids, store.records(queue, ids), strict=True))
        for schedule, done, info in zip(group, handled, lasts, strict=True):
            message_id = info.get("id")
            outcome = "never"
            if message_id:
                blob = records.get(message_id)
                outcome = Record.from_bytes(blob).state if blob else "dispatched"
            if done is not None and (not message_id or done > info.get("o", done)):
                outcome = "skipped"  # the latest occurrence handled was not dispatched
            base = now if done is None else max(done, now)
            out.append(ScheduleInfo(
                name=schedule.name, task=schedule.task, schedule=schedule.describe(),
                queue=queue, missed=schedule.missed, source=schedule.source,
                enabled=schedule.enabled,
                next_run_ms=_next_run(schedule, base) if schedule.enabled else None,
                last_run_ms=done, last_dispatch_ms=info.get("o") if message_id else None,
                last_message_id=message_id, dispatched_at_ms=info.get("at"),
                dispatched_by=info.get("by"), missed_runs=int(info.get("missed") or 0),
                outcome=outcome))
    return sorted(out, key=lambda i: i.name)


def _next_run(schedule: Schedule, after_ms: int) -> int | None:
    try:
        return schedule.next_after(after_ms)
    except Exception:  # noqa: BLE001 - observability: a schedule that cannot say is "none"
        return None


def _unpacked(blob: bytes | None) -> dict[str, Any]:
    if not blob:
        return {}
    try:
        value = unpack(blob)
    except Exception:  # noqa: BLE001 - observability: a bad blob is "nothing known"
        return {}
    return value if isinstance(value, dict) else {}


def notify_changed(client: Client) -> int:
    """Tell every running scheduler to read its schedule sources again; the new version."""
    return store_of(client.broker).changed()
