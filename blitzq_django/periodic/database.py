"""Schedules stored in the database (``PeriodicSchedule`` rows, edited in the admin).

``DatabaseSource`` is a schedule source (``load()``) added to every scheduler at app
ready (``apps.py``): it reads every row, paused ones included (as disabled schedules, so
a scheduler that saw a schedule paused does not owe its missed runs when it is resumed).
A save or delete of a row (the admin, the ORM) calls ``notify_changed()`` once
its transaction commits: running schedulers read the rows again at once (a publish), or
within 2 s (the version key) if they missed it. Nothing polls the table per row.

``to_schedule()`` is the one conversion from a row to an engine ``Schedule``; the admin
form validates with it, so what the form accepts is what a scheduler loads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.db.models.signals import post_delete, post_save

from ..engine.core import schedules as rules
from ..engine.core.schedules import Schedule
from ..engine.errors import BlitzqError, ConfigurationError
from ..models import PeriodicSchedule
from . import default_tz, notify_changed

log = logging.getLogger("blitzq.scheduler")

SOURCE = "db"


class ScheduleSourceUnavailable(BlitzqError):
    """The database could not be read: the scheduler keeps the schedules it has and
    tries again."""


def to_schedule(row: PeriodicSchedule | Any) -> Schedule:
    """The engine Schedule of a row (or of anything with its attributes, like a form's
    cleaned data); ConfigurationError names the schedule and the field."""
    cron = (row.cron or "").strip() or None
    tz = (row.timezone or "").strip() or None
    if cron is not None and tz is None:
        tz = default_tz()
    return rules.build(row.name, row.task, cron=cron, every=row.every, tz=tz,
                       args=row.args if row.args is not None else [],
                       kwargs=row.kwargs if row.kwargs is not None else {},
                       queue=(row.queue or "").strip() or None, missed=row.missed,
                       catch_up=row.catch_up, enabled=bool(row.enabled), source=SOURCE,
                       priority=row.priority or None)


def next_runs(schedule: Schedule, after_ms: int, count: int = 3) -> list[int]:
    """The ``count`` occurrences after ``after_ms`` (the engine's schedule maths)."""
    found: list[int] = []
    cursor: int | None = after_ms
    while cursor is not None and len(found) < count:
        cursor = schedule.next_after(cursor)
        if cursor is not None:
            found.append(cursor)
    return found


class DatabaseSource:
    """Every ``PeriodicSchedule`` row as an engine schedule. A row that no longer builds
    (edited by hand, an option refused since) is left out with an error in the log."""

    def load(self) -> list[Schedule]:
        out: list[Schedule] = []
        try:
            for row in self._rows():
                try:
                    out.append(to_schedule(row))
                except ConfigurationError as exc:
                    log.error("database schedule %r is invalid and not dispatched: %s",
                              row.name, exc)
        except DatabaseError as exc:
            if not self._table_exists():
                if not self._warned:
                    self._warned = True
                    log.warning("no database schedules: the table %s does not exist (run "
                                "manage.py migrate blitzq_django to use them)",
                                PeriodicSchedule._meta.db_table)
                return []
            raise ScheduleSourceUnavailable(
                f"the database schedules could not be read: {type(exc).__name__}: {exc}"
            ) from exc
        return out

    _warned = False

    def _table_exists(self) -> bool:
        """False when the table is known missing (not migrated); True when that cannot be
        told (the database is down): the load is then tried again."""
        try:
            with connection.cursor() as cursor:
                names = connection.introspection.table_names(cursor)
        except DatabaseError:
            return True
        finally:
            if not connection.in_atomic_block:
                close_old_connections()
        return PeriodicSchedule._meta.db_table in names

    def _rows(self) -> Iterator[PeriodicSchedule]:
        # Called on a scheduler's worker thread: no connection is kept beyond
        # CONN_MAX_AGE (and none is closed inside a caller's transaction).
        if not connection.in_atomic_block:
            close_old_connections()
        try:
            yield from list(PeriodicSchedule.objects.all().order_by("name"))
        finally:
            if not connection.in_atomic_block:
                close_old_connections()

    def __repr__(self) -> str:
        return "DatabaseSource()"


#: The source added to every scheduler started in this process (apps.py).
source = DatabaseSource()


def notify() -> None:
    """Tell running schedulers the rows changed; a failure (Redis down) is logged."""
    try:
        notify_changed()
    except (BlitzqError, OSError, ImproperlyConfigured) as exc:
        log.warning("database schedules changed, but the schedulers could not be told "
                    "(they read them again at their next start or change): %s: %s",
                    type(exc).__name__, exc)


def notify_on_commit(using: str | None = None) -> None:
    transaction.on_commit(notify, using=using)


def _changed(sender: Any, instance: PeriodicSchedule, using: str, **kwargs: Any) -> None:
    notify_on_commit(using)


def connect() -> None:
    post_save.connect(_changed, sender=PeriodicSchedule, dispatch_uid="blitzq_schedule_saved")
    post_delete.connect(_changed, sender=PeriodicSchedule,
                        dispatch_uid="blitzq_schedule_deleted")
