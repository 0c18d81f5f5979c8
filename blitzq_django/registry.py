"""What the code of this process declares: its tasks, their queues, its schedules.

``@blitzq_task`` adds to ``registry`` (and to ``declared_queues``, ``duplicate_tasks``
and, with ``schedule=``, to ``code_schedules``) when its module is imported; every
client built here and every worker started by runworker reads them. Below every
feature: a feature that knows more task names (the ``django.tasks`` backend, which
imports a task's module when a message names it) hands a resolver to
``registry.add_resolver()`` from ``BlitzqConfig.ready()``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from .engine import TaskRegistry, TaskSpec
from .engine.client.schedules import ScheduleRegistry, schedule_of
from .engine.core.schedules import Schedule
from .engine.errors import ConfigurationError

#: A resolver: a task name this process has not registered -> its spec, or None.
Resolver = Callable[[str], "TaskSpec | None"]


class DjangoRegistry(TaskRegistry):
    """The process registry. A name it has not registered is asked of each resolver
    (which remembers the names it failed on, if asking costs)."""

    def __init__(self) -> None:
        super().__init__()
        self._resolvers: list[Resolver] = []

    def add_resolver(self, resolver: Resolver) -> None:
        if resolver not in self._resolvers:
            self._resolvers.append(resolver)

    def find(self, name: str) -> TaskSpec | None:
        spec = self._specs.get(name)
        if spec is None and self._resolvers:
            spec = self._resolve(name)
        return spec

    def get(self, name: str) -> TaskSpec:
        spec = self.find(name)
        return spec if spec is not None else super().get(name)

    def _resolve(self, name: str) -> TaskSpec | None:
        for resolver in self._resolvers:
            spec = resolver(name)
            if spec is not None:
                return spec
        return None


#: The one registry of this process.
registry = DjangoRegistry()

#: Queues named by a task's ``queue=`` option (runworker serves them by default).
declared_queues: set[str] = set()

#: (name, module.qualname holding it, module.qualname refused): a second function
#: decorated under a name another one holds. Check blitzq.E020 reports each.
duplicate_tasks: list[tuple[str, str, str]] = []

#: Schedules declared in code (@periodic, @blitzq_task(schedule=...)), process-wide.
code_schedules = ScheduleRegistry()



def default_tz() -> str:
    """The time zone of a cron schedule that names none: settings.TIME_ZONE."""
    try:
        return getattr(django_settings, "TIME_ZONE", None) or "UTC"
    except ImproperlyConfigured:  # settings not configured (a script importing tasks)
        return "UTC"


def build_schedule(name: str, task: str, spec: Any, source: str) -> Schedule:
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


def declare_schedule(task_name: str, spec: Any, *, name: str | None = None,
                     where: str = "") -> Schedule:
    """Add a code schedule of ``task_name``; ImproperlyConfigured names where it is."""
    try:
        return code_schedules.add(build_schedule(name or task_name, task_name, spec, "code"))
    except ConfigurationError as exc:
        raise ImproperlyConfigured(f"{where}{': ' if where else ''}{exc}") from exc


__all__ = ["DjangoRegistry", "build_schedule", "code_schedules", "declare_schedule",
           "declared_queues", "default_tz", "duplicate_tasks", "registry"]
