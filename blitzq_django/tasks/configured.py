"""Whether settings.TASKS names the BlitzQ ``django.tasks`` backend, read without
importing ``django.tasks`` (optional: Django 6, or the django-tasks backport on 5.2).

What the backend adds to the rest of blitzq goes through here, handed over from
``BlitzqConfig.ready()`` (apps.py): the queues of its ``QUEUES`` (runworker serves
them), a resolver that finds a task by importing its module when a message names it,
and the worker listener that sends its signals.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..engine import TaskSpec
from ..engine.core.names import name_ok
from ..engine.worker.listeners import Listener

#: Where the backend's module was, and is: a BACKEND path starting so is BlitzQ's.
_PATHS = ("blitzq_django.backend.", "blitzq_django.tasks.django_tasks.")

#: Task names the resolver found no task for (it imports a module per name it tries).
_unresolved: set[str] = set()


def _blitzq_task_backends() -> list[dict[str, Any]]:
    """The entries of settings.TASKS that use the BlitzQ backend."""
    tasks = getattr(django_settings, "TASKS", None)
    if not isinstance(tasks, dict):
        return []
    return [entry for entry in tasks.values() if isinstance(entry, dict)
            and _is_blitzq_backend(entry.get("BACKEND", ""))]


def _is_blitzq_backend(path: Any) -> bool:
    """``path`` names the BlitzQ backend, or a subclass of it (a project's own)."""
    path = str(path)
    if path.startswith(_PATHS):
        return True
    try:
        found = import_string(path)
        # lazy: cost (django.tasks, an optional dependency, imported only when named)
        from .django_tasks import BlitzQBackend
    except Exception:  # noqa: BLE001 - a BACKEND that does not import: Django reports it
        return False
    return isinstance(found, type) and issubclass(found, BlitzQBackend)


def uses_django_tasks() -> bool:
    """settings.TASKS names the BlitzQ backend (blitzq_django.backend.BlitzQBackend)."""
    return bool(_blitzq_task_backends())


def django_tasks_queues(merged: Any = None) -> list[str]:
    """The QUEUES of the BlitzQ backends of settings.TASKS (runworker serves them)."""
    queues: list[str] = []
    for entry in _blitzq_task_backends():
        names = entry.get("QUEUES", ["default"])
        if isinstance(names, list | tuple):  # invalid names: check blitzq.E102 says so
            queues += [q for q in names if isinstance(q, str) and name_ok(q)]
    return list(dict.fromkeys(queues))


def resolve(name: str) -> TaskSpec | None:
    """The registry's resolver: a ``django.tasks`` function of the BlitzQ backend in a
    module not imported yet (tasks.py modules are imported at startup; others are not)
    is imported when a message names it, once."""
    if name in _unresolved or not uses_django_tasks():
        return None
    try:
        # lazy: cost (django.tasks, an optional dependency)
        from .django_tasks import import_task
    except ImproperlyConfigured:  # neither django.tasks nor the django-tasks backport
        spec = None
    else:
        spec = import_task(name)
    if spec is None:
        if len(_unresolved) > 10_000:
            _unresolved.clear()
        _unresolved.add(name)
    return spec


def worker_listeners() -> list[Listener]:
    """The listener of the backend's django.tasks signals, when settings.TASKS names it."""
    if not uses_django_tasks():
        return []
    # lazy: cost (django.tasks, an optional dependency)
    from .django_tasks import DjangoTasksListener

    return [DjangoTasksListener()]


__all__ = ["django_tasks_queues", "resolve", "uses_django_tasks", "worker_listeners"]
