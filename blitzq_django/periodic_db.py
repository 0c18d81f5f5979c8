"""Moved to ``blitzq_django.periodic.database``; this path is kept for the code and
settings that name it (``blitzq_django.periodic_db.to_schedule``, ``source``). It is
that very module (the same objects, so a monkeypatch here patches there), not a copy."""

import sys

from .periodic import database

sys.modules[__name__] = database
