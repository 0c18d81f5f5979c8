"""The test project's settings with the BlitzQ django.tasks backend (for a runworker
subprocess in tests/django/test_tasks_backend.py)."""

from testproject.settings import *  # noqa: F403

TASKS = {"default": {"BACKEND": "blitzq_django.backend.BlitzQBackend"}}
