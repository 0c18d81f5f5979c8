"""Settings of a producer process in tests/django/test_queues.py: the test project's, but
naming a queue the worker's settings (testproject.settings) never name ("reports"),
with the BlitzQ django.tasks backend accepting any queue name (QUEUES [])."""

from testproject.settings import *  # noqa: F403

BLITZQ = {**BLITZQ, "QUEUES": ["default", "reports"]}  # noqa: F405
TASKS = {"default": {"BACKEND": "blitzq_django.backend.BlitzQBackend", "QUEUES": []}}
