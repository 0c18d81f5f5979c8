"""Moved to ``blitzq_django.transactions.outbox``; this path is kept for the code and
settings that name it (``blitzq_django.outbox.Relay``, ``relay_from_settings``). It is
that very module (the same objects, so a monkeypatch here patches there), not a copy."""

import sys

from .transactions import outbox

sys.modules[__name__] = outbox
