"""The producer side of periodic tasks: where schedules come from, how one is declared
(``@client.periodic``), and what is known of each (``Client.schedules()``). The
scheduler process that dispatches them is engine/scheduler/.

Where schedules come from: a registry (declared in code) or any other source.

A *source* is anything with ``load() -> Iterable[Schedule]``: the scheduler reads each
of its sources at start and again when told the schedules changed (a publish on
``Keyspace.schedules_channel``, or a new ``schedules_version``; see
``Client.notify_schedules_changed``). ``ScheduleRegistry`` is the source of schedules
declared in code; a database of schedules (the Django admin) is another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from ..core import schedules as rules
from ..core.ids import now_ms as clock_ms
from ..core.message import unpack
from ..core.record import Record
from ..core.schedules import Schedule
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..brokers.base import Broker
    from ..core.task import TaskRegistry


class ScheduleSource(Protocol):
    def load(self) -> Iterable[Schedule]: ...


class ScheduleRegistry:
    """Schedules by name; ``include`` adds the schedules of other registries (live)."""

    def __init__(self, include: Iterable[ScheduleRegistry] = ()) -> None:
        self._own: dict[str, Schedule] = {}
        self._include = list(include)

    def add(self, schedule: Schedule) -> Schedule:
        """Add ``schedule``; a second, different schedule of the same name is refused
        (the same one again, as a module imported twice declares it, is kept)."""
        existing = self.get(schedule.name)
        if existing is not None and existing != schedule:
            raise ConfigurationError(
                f"schedule {schedule.name!r} is declared twice ({existing.task} "
                f"{existing.describe()}, from {existing.source}; and {schedule.task} "
                f"{schedule.describe()}, from {schedule.source}): give one of them another "
                "name=")
        self._own[schedule.name] = schedule
        return schedule

    def remove(self, name: str) -> None:
        self._own.pop(name, None)

    def get(self, name: str) -> Schedule | None:
        found = self._own.get(name)
        if found is None:
            for other in self._include:
                found = other.get(name)
                if found is not None:
                    break
        return found

    def load(self) -> list[Schedule]:
        return list(self)

    def __iter__(self) -> Iterator[Schedule]:
        seen: set[str] = set()
        for schedule in self._own.values():
            seen.add(schedule.name)
            yield schedule
        for other in self._include:
            for schedule in other:
                if schedule.name not in seen:
                    seen.add(schedule.name)
                    yield schedule

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        return any(True for _ in self)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """What is known of one schedule: its definition, its last run and its next one.

    ``last_run_ms``: the latest occurrence handled (dispatched, or skipped as missed);
    ``last_dispatch_ms``/``last_message_id``: the latest occurrence dispatched and its
    message (``periodic:<name>:<ms>``); ``dispatched_at_ms``/``dispatched_by``: when and
    by which scheduler. ``outcome``: the state of the last message's record
    (``succeeded``, ``failed``, ``queued``...), ``dispatched`` when it has none (yet),
    ``skipped`` when the latest occurrence handled was skipped, ``never`` before any.
    """

    name: str
    task: str
    schedule: str  # "cron '0 3 * * *' Europe/Berlin", "every 60s"
    queue: str
    missed: str
    source: str
    enabled: bool
    next_run_ms: int | None
    last_run_ms: int | None = None
    last_dispatch_ms: int | None = None
    last_message_id: str | None = None
    dispatched_at_ms: int | None = None
    dispatched_by: str | None = None
    missed_runs: int = 0  # occurrences left out by the last dispatch's catch-up
    outcome: str = "never"

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


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


def periodic_decorator(task: Callable[..., Any], registry: ScheduleRegistry,
                       schedule: Any = None, **options: Any
                       ) -> Callable[[Callable[..., Any]], Any]:
    """``@client.periodic("0 3 * * *", tz="Europe/Berlin", args=(...))``: a task that also
    runs on a schedule. Task options (retries, timeout, queue...) go to the task; the
    schedule's own options (tz, args, kwargs, missed, catch_up, grace, name, cron, every)
    to the schedule. ``task`` is the task decorator (``Client.task``), ``registry`` where
    the schedule goes."""
    if callable(schedule):
        raise TypeError("@client.periodic needs a schedule: ('0 3 * * *'), (every=60) or "
                        "(cron='@daily', tz='Europe/Berlin')")
    own = {k: options.pop(k) for k in list(options) if k in SCHEDULE_OPTIONS}
    name = own.pop("name", None)

    def wrap(func: Callable[..., Any]) -> Any:
        made = task(**options)(func)
        declare(registry, made.name, schedule, name=name, **own)
        return made

    return wrap


#: keyword arguments of @periodic that belong to the schedule, not the task
SCHEDULE_OPTIONS = frozenset({"name", "cron", "every", "tz", "args", "kwargs", "missed",
                              "catch_up", "grace", "enabled"})


def infos(schedules: Iterable[Schedule], *, broker: Broker, registry: TaskRegistry,
          route: Callable[[str], str | None], default_queue: str,
          now_ms: int | None = None) -> list[ScheduleInfo]:
    """What is known of each schedule: a read per queue (claims and last dispatches), and
    one for the records of the last messages. A schedule's queue: its own, else where
    ``route`` sends its task, else the task's, else ``default_queue``."""
    now = clock_ms() if now_ms is None else now_ms
    store = broker.periodic
    by_queue: dict[str, list[Schedule]] = {}
    for schedule in schedules:
        spec = registry.find(schedule.task)
        queue = (schedule.queue or route(schedule.task)
                 or (spec.queue if spec is not None else default_queue))
        by_queue.setdefault(queue, []).append(schedule)
    out: list[ScheduleInfo] = []
    for queue, group in by_queue.items():
        handled, last = store.read(queue, [s.name for s in group])
        lasts = [_unpacked(blob) for blob in last]
        ids: list[str] = [d["id"] for d in lasts if d.get("id")]
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


def notify_changed(broker: Broker) -> int:
    """Tell every running scheduler to read its schedule sources again; the new version."""
    return broker.periodic.changed()
