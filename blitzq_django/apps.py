"""The Django app, and the one place that wires blitzq's features together.

Lower code never imports a feature: each feature hands what it adds to the layer below
from ``ready()`` here (a settings rule, a client build hook, a queue source, a task
resolver). No Redis or DB I/O here.
"""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class BlitzqConfig(AppConfig):
    name = "blitzq_django"
    label = "blitzq_django"
    verbose_name = "BlitzQ"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # lazy: app loading (these modules import the models, or register checks)
        from . import checks, periodic, queues, registry, runtime, settings, workflows  # noqa: F401
        from .history import rules as history_rules
        from .periodic import database as periodic_database
        from .tasks import configured as django_tasks
        from .transactions import rules as transactions_rules

        # Each feature's own settings keys, checked with the rest (order: the ids').
        for rule in (history_rules.settings_problems, transactions_rules.settings_problems,
                     periodic.settings_problems):
            settings.add_rule(rule)

        # What a client built here holds: the schedules, the check of its queues; and
        # the process's client lists the database's schedules too.
        runtime.add_build_hook(periodic.attach_schedules)
        runtime.add_build_hook(queues.attach_check)
        runtime.add_build_hook(workflows.attach_on_commit)
        runtime.add_process_hook(periodic.attach_sources)

        # Queues named by features: runworker serves them, enqueue accepts them.
        queues.add_source(django_tasks.django_tasks_queues)
        queues.add_source(periodic.queues)

        # A django.tasks task in a module not imported yet is found by importing it.
        registry.registry.add_resolver(django_tasks.resolve)

        # Schedules stored in the database: read by every scheduler of this process,
        # which a save or delete of a row tells to read them again.
        periodic.add_source(periodic_database.source)
        periodic_database.connect()

        # Import every installed app's tasks.py so the registry knows every task
        # before a worker starts or a view enqueues.
        autodiscover_modules("tasks")

        if django_tasks.uses_django_tasks():
            # Imports django.tasks (or the backport), whose check of TASKS (and so our
            # backend's check()) is registered only once it is imported.
            # lazy: app loading (ready() wires the features once Django loaded the apps)
            from .tasks import django_tasks as backend  # noqa: F401
