"""Moved to ``blitzq_django.tasks.django_tasks``; this path is kept for the code and
settings that name it (settings.TASKS' ``"BACKEND":
"blitzq_django.backend.BlitzQBackend"``). It is that very module (the same objects, so a
monkeypatch here patches there), not a copy."""

import sys

from .tasks import django_tasks

sys.modules[__name__] = django_tasks
