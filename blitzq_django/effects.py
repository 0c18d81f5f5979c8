"""Moved to ``blitzq_django.transactions.effects``; this path is kept for the code and
settings that name it (``blitzq_django.effects.prune``). It is that very module (the
same objects, so a monkeypatch here patches there), not a copy."""

import sys

from .transactions import effects

sys.modules[__name__] = effects
