"""Process-executor tasks of tests/django/test_process_executor.py (a child process imports
this module by name, after django.setup())."""

from __future__ import annotations

import os
from typing import Any

from blitzq_django.decorators import blitzq_task
from blitzq_django.serving import pool


def setup_child(settings_module: str | None, database: str) -> None:
    """The glue's initializer, then the test database of the test process (pytest-django
    names it per process): the ORM of the child and of the test see the same rows."""
    pool.child_setup(settings_module)
    from django.db import connections

    connections["default"].settings_dict["NAME"] = database


@blitzq_task(executor="process", retries=0)
def orm_in_child(username: str) -> dict[str, Any]:
    from django.apps import apps
    from django.conf import settings
    from django.contrib.auth.models import User

    User.objects.create(username=username)
    return {"pid": os.getpid(), "apps_ready": apps.ready,
            "settings": os.environ.get("DJANGO_SETTINGS_MODULE"),
            "root_urlconf": settings.ROOT_URLCONF,
            "users": User.objects.filter(username=username).count()}
