"""The console log formats of the long-running commands: text, or JSON (one object a
line from python-json-logger, every ``extra`` field of a record as a key; a task's
fields among them: docs/observability.md)."""

from __future__ import annotations

import logging
import os

LOG_FORMATS = ("text", "json")
#: Names the format of child processes (the history writer, supervised workers) and is
#: the default of ``--log-format`` where a command has no setting of its own.
ENV = "BLITZQ_LOG_FORMAT"
JSON_FIELDS = "%(levelname)s %(name)s %(process)d %(message)s"


def json_formatter() -> logging.Formatter:
    """``time``, ``level``, ``logger``, ``process``, ``message``, ``exc_info`` (the
    traceback) and the record's extra fields."""
    from pythonjsonlogger.json import JsonFormatter  # lazy: cost (optional, JSON logs only)

    return JsonFormatter(JSON_FIELDS, rename_fields={"levelname": "level", "name": "logger"},
                         timestamp="time")


def from_environment() -> str | None:
    value = os.environ.get(ENV, "").strip().lower()
    return value if value in LOG_FORMATS else None


def formatter(log_format: str, text: str) -> logging.Formatter:
    return json_formatter() if log_format == "json" else logging.Formatter(text)


__all__ = ["ENV", "LOG_FORMATS", "formatter", "from_environment", "json_formatter"]
