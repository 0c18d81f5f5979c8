"""Periodic tasks in Django: ``@periodic``, ``@blitzq_task(schedule=...)`` and
``BLITZQ["PERIODIC"]`` (docs/scheduling.md).

::

    from blitzq_django.periodic import periodic

    @periodic("0 3 * * *", tz="Europe/Berlin", retries=2)   # a task, run at 03:00 Berlin
    def nightly_report() -> None: ...

    @blitzq_task(queue="maintenance", schedule={"every": 300, "missed": "skip"})
    def sweep() -> None: ...

    BLITZQ = {"PERIODIC": {"cleanup": {"task": "shop.tasks.cleanup", "cron": "@daily",
                                       "kwargs": {"days": 30}}}}

Cron schedules run in ``tz`` (default ``settings.TIME_ZONE``). Schedules declared in
code live in ``code_schedules``; the client's registry (``conf.get_client()``) holds them
and those of ``BLITZQ["PERIODIC"]``. ``manage.py runscheduler`` (or ``runworker
--with-scheduler``) dispatches them; ``manage.py blitzq schedules`` shows them.

A source of schedules besides these (a database of schedules edited in the admin) is
added with ``add_source()``; ``notify_changed()`` after an edit makes every running
scheduler read its sources again within 2 seconds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from . import conf
from .engine.client.schedules import (
    SCHEDULE_OPTIONS,
    ScheduleRegistry,
    ScheduleSource,
    schedule_of,
)
from .engine.core.schedules import Schedule
from .engine.errors import BlitzqError, ConfigurationError
from .engine.scheduler import Scheduler

log = logging.getLogger("blitzq.scheduler")

#: Schedules declared in code (@periodic, @blitzq_task(schedule=...)), process-wide.
code_schedules = ScheduleRegistry()
#: More sources of schedules (a database): every scheduler started here reads them too.
_sources: list[ScheduleSource] = []


def default_tz() -> str:
    from django.conf import settings

    try:
        return getattr(settings, "TIME_ZONE", None) or "UTC"
    except ImproperlyConfigured:  # settings not configured (a script importing tasks)
        return "UTC"


def build(name: str, task: str, spec: Any, source: str) -> Schedule:
    """A Schedule from ``spec``: a cron string, seconds, a timedelta, or a dict of
    cron/every/schedule, tz, args, kwargs, queue, missed, catch_up, grace, enabled and
    message options (timeout, expires, headers, priority, retries...)."""
    if isinstance(spec, Mapping):
        options = {k: v for k, v in spec.items() if k != "task"}
        when = options.pop("schedule", None)
    else:
        options, when = {}, spec
    if options.get("cron") is not None or isinstance(when, str):
        options.setdefault("tz", default_tz())
    return schedule_of(name, task, when, source=source, **options)


def declare(task_name: str, spec: Any, *, name: str | None = None,
            where: str = "") -> Schedule:
    """Add a code schedule of ``task_name``; ImproperlyConfigured names where it is."""
    try:
        return code_schedules.add(build(name or task_name, task_name, spec, "code"))
    except ConfigurationError as exc:
        raise ImproperlyConfigured(f"{where}{': ' if where else ''}{exc}") from exc


def periodic(schedule: Any = None, /, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``@periodic(cron_or_seconds, tz=..., args=..., missed=..., name=..., **task_options)``:
    a task (as ``@blitzq_task``) that also runs on a schedule. ``cron=`` or ``every=`` may
    be given instead of the first argument."""
    from .decorators import blitzq_task

    if callable(schedule):
        raise TypeError("@periodic needs a schedule: @periodic('0 3 * * *'), "
                        "@periodic(every=60) or @periodic(cron='@daily', tz='Europe/Berlin')")
    own = {k: options.pop(k) for k in list(options) if k in SCHEDULE_OPTIONS}
    name = own.pop("name", None)

    def wrap(func: Callable[..., Any]) -> Any:
        task = blitzq_task(**options)(func)
        spec = {**own, "schedule": schedule} if schedule is not None else own
        declare(task.name, spec, name=name, where=f"@periodic on {task.name}")
        return task

    return wrap


# -- BLITZQ["PERIODIC"] ---------------------------------------------------------------


def settings_schedules(entries: Any) -> list[Schedule]:
    """The schedules of a BLITZQ["PERIODIC"] dict; raises ConfigurationError."""
    out = []
    for name, entry in entries.items():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("task"), str):
            raise ConfigurationError(f"schedule {name!r}: must be a dict with 'task' (a task "
                                     f"name) and 'cron' or 'every', got {entry!r:.80}")
        out.append(build(name, entry["task"], entry, "settings"))
    return out


def periodic_problems(entries: Any) -> list[tuple[str, str]]:
    """(message, hint) for each bad BLITZQ["PERIODIC"] entry (conf.problems, E015)."""
    found = []
    hint = ("For example {'cleanup': {'task': 'shop.tasks.cleanup', 'cron': '0 3 * * *', "
            "'tz': 'Europe/Berlin'}} or {'poll': {'task': '...', 'every': 60}}.")
    for name, entry in entries.items():
        try:
            settings_schedules({name: entry})
        except (BlitzqError, ImproperlyConfigured) as exc:
            found.append((f"BLITZQ['PERIODIC']: {exc}.", hint))
    return found


def schedules_for(merged: Mapping[str, Any]) -> ScheduleRegistry:
    """The registry of a client built from these settings: code schedules (live) and
    those of BLITZQ["PERIODIC"]."""
    registry = ScheduleRegistry(include=[code_schedules])
    for schedule in settings_schedules(merged.get("PERIODIC") or {}):
        if schedule.name in code_schedules:
            raise ConfigurationError(f"schedule {schedule.name!r} of BLITZQ['PERIODIC'] is also "
                                     "declared in code (@periodic / schedule=); rename one")
        registry.add(schedule)
    return registry


@checks.register("blitzq")
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """blitzq.E016: a schedule names a task that is not registered, or a BLITZQ["PERIODIC"]
    name is declared in code too."""
    if conf.problems():
        return []  # E015 and the other settings problems come first
    found: list[checks.CheckMessage] = []
    entries = conf.get_settings().get("PERIODIC") or {}
    for name in entries:
        if name in code_schedules:
            found.append(checks.Error(
                f"Schedule {name!r} of BLITZQ['PERIODIC'] is also declared in code.",
                hint="Give one of them another name.", obj=name, id="blitzq.E016"))
    schedules = [*code_schedules, *settings_schedules(entries)]
    for schedule in schedules:
        if conf.registry.find(schedule.task) is None:
            found.append(checks.Error(
                f"Schedule {schedule.name!r} runs task {schedule.task!r}, which is not "
                "registered.", hint="Check the task name (module.function, or its name=), "
                "and that its tasks.py is in an installed app.", obj=schedule.name,
                id="blitzq.E016"))
    return found


# -- running --------------------------------------------------------------------------


def add_source(source: ScheduleSource) -> None:
    """Have every scheduler started in this process read ``source`` too."""
    if source not in _sources:
        _sources.append(source)


def sources() -> list[ScheduleSource]:
    return [conf.get_client().schedule_registry, *_sources]


def extra_sources() -> list[ScheduleSource]:
    """The sources added with add_source (the same list: later additions are seen)."""
    return _sources


def notify_changed() -> int:
    """Make every running scheduler read its sources again (call after an edit)."""
    return conf.get_client().notify_schedules_changed()


def make_scheduler(**options: Any) -> Scheduler:
    return Scheduler(conf.get_client(), sources=sources(), **options)


class SchedulerThread:
    """A scheduler on a thread of its own (``runworker --with-scheduler``)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.thread = threading.Thread(target=self._run, name="blitzq-scheduler", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.scheduler.run(close_broker=True))
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
            log.exception("the scheduler thread stopped")

    def start(self) -> SchedulerThread:
        self.thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.scheduler.stop()
        self.thread.join(timeout)


__all__ = ["add_source", "code_schedules", "notify_changed", "periodic"]
