"""Where schedules come from: a registry (declared in code) or any other source.

A *source* is anything with ``load() -> Iterable[Schedule]``: the scheduler reads each
of its sources at start and again when told the schedules changed (a publish on
``Keyspace.schedules_channel``, or a new ``schedules_version``; see
``Client.notify_schedules_changed``). ``ScheduleRegistry`` is the source of schedules
declared in code; a database of schedules (the Django admin) is another.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.schedules import Schedule
from ..errors import ConfigurationError


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
