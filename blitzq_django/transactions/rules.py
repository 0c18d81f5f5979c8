"""The settings rule of the outbox's and effects' own keys (blitzq.E013):
OUTBOX_DATABASES, EFFECTS_RETENTION. apps.py hands it to ``settings.add_rule()``."""

from __future__ import annotations

import math
from typing import Any

from ..settings import Problem


def settings_problems(merged: dict[str, Any], bad_type: set[str]) -> list[Problem]:
    """E013: OUTBOX_DATABASES not a non-empty list of aliases, EFFECTS_RETENTION out of range."""
    found = []
    aliases = merged["OUTBOX_DATABASES"]
    if "OUTBOX_DATABASES" not in bad_type and not (
            aliases and all(isinstance(a, str) and a for a in aliases)):
        found.append(Problem("blitzq.E013", "OUTBOX_DATABASES", "BLITZQ['OUTBOX_DATABASES'] "
                             f"must be a non-empty list of database aliases, not "
                             f"{aliases!r:.60}.", "Default: ['default']."))
    days = merged["EFFECTS_RETENTION"]
    if "EFFECTS_RETENTION" not in bad_type and not (math.isfinite(days) and 0 < days <= 36_500):
        found.append(Problem("blitzq.E013", "EFFECTS_RETENTION", "BLITZQ['EFFECTS_RETENTION'] "
                             f"must be a number of days over 0 and up to 36500, not "
                             f"{days!r:.40}.", "Default: 7."))
    return found

