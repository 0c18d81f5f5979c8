"""The console log of the long-running commands (runworker, runscheduler, runhistory,
runoutbox): like django-tasks-db, the "blitzq" logger prints to stderr unless the
project configured logging itself.

Its format is text, or JSON (``--log-format json``, else ``$BLITZQ_LOG_FORMAT``, else
``BLITZQ["LOG_FORMAT"]``): one object a line from python-json-logger, with ``time``,
``level``, ``logger``, ``process``, ``message``, the traceback as ``exc_info``, and every
``extra`` field of the record as a key (a task's ``task_name``, ``task_id``, ``queue``,
``attempt``...: docs/observability.md). ``--log-format`` sets ``$BLITZQ_LOG_FORMAT`` for
the command's child processes (the history writer, supervised workers). A project whose
LOGGING gives blitzq a handler chooses the format there
(``pythonjsonlogger.json.JsonFormatter``); asking for JSON then says so.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from ..engine import logformat
from ..engine.logformat import LOG_FORMATS
from ..settings import user_settings

LOG_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
              "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}
VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_log_format_argument(parser: Any) -> None:
    parser.add_argument(
        "--log-format", choices=LOG_FORMATS, type=str.lower, default=None,
        help="format of the console log: text, or one JSON object a line with a task's "
             "fields as keys (default: BLITZQ['LOG_FORMAT'], 'text')")


def _setting() -> str:
    """BLITZQ["LOG_FORMAT"], or "text" while it is missing or wrong (``check`` says so)."""
    try:
        value = user_settings().get("LOG_FORMAT", "text")
    except Exception:  # noqa: BLE001 - a broken BLITZQ is reported by the command itself
        return "text"
    return value if value in LOG_FORMATS else "text"


def configure_logging(verbosity: int, level: str | None = None,
                      log_format: str | None = None) -> None:
    """Level from ``--log-level`` when given, else from ``--verbosity`` (INFO at 1);
    format from ``--log-format``, else ``$BLITZQ_LOG_FORMAT``, else the setting."""
    logger = logging.getLogger("blitzq")
    if log_format:
        os.environ[logformat.ENV] = log_format  # for its child processes
    chosen = log_format or logformat.from_environment() or _setting()
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logformat.formatter(chosen, TEXT_FORMAT))
        logger.addHandler(handler)
    elif chosen == "json" and not _ours_are_json(logger):
        sys.stderr.write("blitzq: the JSON log format applies to blitzq's own console "
                         "handler, and the project's LOGGING configures logging itself: set "
                         "a pythonjsonlogger.json.JsonFormatter there "
                         "(docs/observability.md).\n")
    logger.setLevel(LOG_LEVELS[level] if level else VERBOSITY_LEVELS.get(verbosity, logging.INFO))


def _ours_are_json(logger: logging.Logger) -> bool:
    """The handlers already write JSON (a second call in one process, or the project's
    own JsonFormatter): nothing to say."""
    handlers = logger.handlers or logging.getLogger().handlers
    return all(type(h.formatter).__name__ == "JsonFormatter" for h in handlers)
