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
code live in ``code_schedules`` (``blitzq_django.registry``, below the decorator that
fills it); the client's registry (``get_client()``) holds them and those of
``BLITZQ["PERIODIC"]``, through the build hook ``attach_schedules`` that apps.py hands to
the runtime. ``database.py`` holds the schedules stored in the database. ``manage.py
runscheduler`` (or ``runworker --with-scheduler``) dispatches them; ``manage.py blitzq
schedules`` shows them.

A source of schedules besides these (a database of schedules edited in the admin) is
added with ``add_source()``; ``notify_changed()`` after an edit makes every running
scheduler read its sources again within 2 seconds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from ..engine import Client
from ..engine.client.schedules import SCHEDULE_OPTIONS, ScheduleRegistry, ScheduleSource
from ..engine.core.schedules import Schedule
from ..engine.errors import BlitzqError, ConfigurationError
from ..engine.scheduler import Scheduler
from ..registry import build_schedule as build
from ..registry import code_schedules, default_tz, registry
from ..registry import declare_schedule as declare
from ..runtime import get_client
from ..settings import Problem, get_settings, problems
from ..tasks.decorators import blitzq_task

if TYPE_CHECKING:
    from ..tasks.decorators import TaskDecorator

log = logging.getLogger("blitzq.scheduler")

#: More sources of schedules (a database): every scheduler started here reads them too.
_sources: list[ScheduleSource] = []


def periodic(schedule: Any = None, /, **options: Any) -> TaskDecorator:
    """A task (as ``@blitzq_task``) that also runs on a schedule, dispatched by
    ``manage.py runscheduler``: ``@periodic("0 3 * * *", tz="Europe/Berlin")``,
    ``@periodic(every=60)``. Every option of ``@blitzq_task`` is accepted too.

    Args:
        schedule (str | float | timedelta | None): A cron expression (or nickname such as
            ``"@daily"``), or an interval in seconds or a timedelta; instead, ``cron=``
            or ``every=``.

    Keyword Args:
        cron (str): Five fields ``minute hour day-of-month month day-of-week``, or a
            nickname (``@hourly``, ``@daily``, ``@weekly`` ...). Default: none.
        every (float | timedelta): An interval (at least 0.01 s), aligned on the epoch.
            Default: none.
        tz (str): The IANA time zone of a cron schedule. Default: ``settings.TIME_ZONE``.
        args (list): Fixed positional arguments of every run. Default: ``()``.
        kwargs (dict): Fixed keyword arguments of every run. Default: ``{}``.
        missed (str): What to do about occurrences missed while no scheduler ran:
            ``"skip"``, ``"run_once"`` or ``"run_all"``. Default: ``"run_once"``.
        catch_up (int): ``run_all`` runs at most this many missed occurrences (the most
            recent). Default: ``100``.
        grace (float): Seconds: with ``skip``, an occurrence reached at most this late
            still runs. Default: ``10``.
        name (str): The schedule's name (one name, one schedule). Default: the task's
            name.
        enabled (bool): A disabled schedule is listed but not dispatched. Default:
            ``True``.
    """
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

    return wrap  # type: ignore[return-value]  # blitzq_task's overloads, applied


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
    """(message, hint) for each bad BLITZQ["PERIODIC"] entry (settings_problems, E015)."""
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


def settings_problems(merged: dict[str, Any], bad_type: set[str]) -> list[Problem]:
    """The settings rule of BLITZQ["PERIODIC"] (blitzq.E015), added by apps.py."""
    if "PERIODIC" in bad_type or not merged["PERIODIC"]:
        return []
    return [Problem("blitzq.E015", "PERIODIC", message, hint)
            for message, hint in periodic_problems(merged["PERIODIC"])]


def queues(merged: dict[str, Any]) -> list[str]:
    """The queues the schedules name (code and BLITZQ["PERIODIC"]): runworker serves them."""
    try:
        schedules = [*code_schedules, *settings_schedules(merged.get("PERIODIC") or {})]
    except BlitzqError:  # check blitzq.E015 reports a bad entry
        schedules = list(code_schedules)
    return sorted({s.queue for s in schedules if s.queue})


def attach_schedules(client: Client, merged: dict[str, Any]) -> None:
    """Build hook: a client built from these settings holds their schedules."""
    client.schedule_registry = schedules_for(merged)


def attach_sources(client: Client, merged: dict[str, Any]) -> None:
    """Process hook: ``client.schedules()`` (blitzq schedules) lists the database's too."""
    client.schedule_sources = extra_sources()


@checks.register("blitzq")
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """blitzq.E016: a schedule names a task that is not registered, or a BLITZQ["PERIODIC"]
    name is declared in code too."""
    if problems():
        return []  # E015 and the other settings problems come first
    found: list[checks.CheckMessage] = []
    entries = get_settings().get("PERIODIC") or {}
    for name in entries:
        if name in code_schedules:
            found.append(checks.Error(
                f"Schedule {name!r} of BLITZQ['PERIODIC'] is also declared in code.",
                hint="Give one of them another name.", obj=name, id="blitzq.E016"))
    schedules = [*code_schedules, *settings_schedules(entries)]
    for schedule in schedules:
        if registry.find(schedule.task) is None:
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
    return [get_client().schedule_registry, *_sources]


def extra_sources() -> list[ScheduleSource]:
    """The sources added with add_source (the same list: later additions are seen)."""
    return _sources


def notify_changed() -> int:
    """Make every running scheduler read its sources again (call after an edit)."""
    return get_client().notify_schedules_changed()


def make_scheduler(**options: Any) -> Scheduler:
    return Scheduler(get_client(), sources=sources(), **options)


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


__all__ = ["add_source", "code_schedules", "default_tz", "notify_changed", "periodic"]
