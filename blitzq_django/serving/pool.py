"""Django in the worker's process pool (``executor="process"`` tasks, docs/executors.md).

Each child of the pool sets Django up once with the worker's settings module, and
closes stale database connections around each call, as around a request.
"""

from __future__ import annotations

import os
from typing import Any

import django
from django.db import close_old_connections


def process_pool_options(merged: dict[str, Any]) -> dict[str, Any]:
    """The Worker keywords of its process pool (executor="process" tasks): its size, the
    recycling, and Django set up in each child (``child_setup``) with stale database
    connections closed around each call, as around a request."""
    return {"processes": merged["PROCESS_POOL_SIZE"],
            "max_tasks_per_child": merged["PROCESS_MAX_TASKS_PER_CHILD"],
            "process_initializer": child_setup,
            "process_initargs": (os.environ.get("DJANGO_SETTINGS_MODULE"),),
            "process_around_call": close_old_connections}


def child_setup(settings_module: str | None) -> None:
    """Run once in each process-pool child: ``django.setup()`` with the worker's settings
    module, so process tasks see the settings, the apps and the ORM. (Settings made with
    ``settings.configure()`` in the worker cannot be passed on: the child needs
    DJANGO_SETTINGS_MODULE.)"""
    if settings_module:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings_module)
    django.setup()

