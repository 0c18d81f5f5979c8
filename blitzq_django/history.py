"""Placeholder until the history companion lands (issue 8)."""

from typing import Any


def companion(settings: dict[str, Any]) -> None:
    return None
