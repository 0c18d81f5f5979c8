"""The Django app: system checks and task autodiscovery. No Redis or DB I/O here."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class BlitzqConfig(AppConfig):
    name = "blitzq_django"
    label = "blitzq_django"
    verbose_name = "BlitzQ"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the checks (periodic: the schedules', blitzq.E016) and the
        # setting_changed hook.
        from . import checks, conf, periodic, periodic_db  # noqa: F401

        # Schedules stored in the database: read by every scheduler of this process,
        # which a save or delete of a row tells to read them again.
        periodic.add_source(periodic_db.source)
        periodic_db.connect()

        # Import every installed app's tasks.py so the registry knows every task
        # before a worker starts or a view enqueues.
        autodiscover_modules("tasks")

        from . import signals

        if signals.uses_django_tasks():
            # Imports django.tasks (or the backport), whose check of TASKS (and so our
            # backend's check()) is registered only once it is imported.
            from . import backend  # noqa: F401
