"""Moved to ``blitzq_django.tasks.decorators``; this path is kept for the code and settings
that name it (``from blitzq_django.decorators import blitzq_task``). It is that very
module (the same objects, so a monkeypatch here patches there), not a copy."""

import sys

from .tasks import decorators

sys.modules[__name__] = decorators
