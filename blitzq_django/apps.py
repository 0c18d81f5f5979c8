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
        from . import checks, conf  # noqa: F401 - registers checks and the setting_changed hook

        # Import every installed app's tasks.py so the registry knows every task
        # before a worker starts or a view enqueues.
        autodiscover_modules("tasks")
