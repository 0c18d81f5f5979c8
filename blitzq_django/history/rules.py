"""The settings rule of task history's own keys (blitzq.E012): HISTORY, HISTORY_WRITER,
HISTORY_RETENTION. apps.py hands it to ``settings.add_rule()``."""

from __future__ import annotations

import math
from typing import Any

from ..settings import Problem
from ..settings.schema import HISTORY_MODES, HISTORY_WRITERS


def settings_problems(merged: dict[str, Any], bad_type: set[str]) -> list[Problem]:
    found: list[Problem] = []
    if "HISTORY" not in bad_type and merged["HISTORY"] not in HISTORY_MODES:
        modes = ", ".join(map(repr, HISTORY_MODES))
        found.append(Problem("blitzq.E012", "HISTORY", f"BLITZQ['HISTORY'] must be one of "
                             f"{modes}, not {merged['HISTORY']!r:.40}.", "Default: 'all'."))
    if "HISTORY_WRITER" not in bad_type and merged["HISTORY_WRITER"] not in HISTORY_WRITERS:
        found.append(Problem("blitzq.E012", "HISTORY_WRITER", "BLITZQ['HISTORY_WRITER'] must "
                             f"be 'process' or 'thread', not {merged['HISTORY_WRITER']!r:.40}.",
                             "Default: 'process'."))
    retention = merged["HISTORY_RETENTION"]
    if "HISTORY_RETENTION" not in bad_type and not (
            math.isfinite(retention) and 0 < retention <= 36_500):
        found.append(Problem("blitzq.E012", "HISTORY_RETENTION", "BLITZQ['HISTORY_RETENTION'] "
                             f"must be a number of days over 0 and up to 36500, not "
                             f"{retention!r:.40}.", "Default: 14."))
    return found
