"""The console log of the long-running commands (runworker, runscheduler, runhistory,
runoutbox): like django-tasks-db, the "blitzq" logger prints to stderr unless the
project configured logging itself."""

from __future__ import annotations

import logging
import sys

LOG_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
              "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}
VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


def configure_logging(verbosity: int, level: str | None = None) -> None:
    """Level from ``--log-level`` when given, else from ``--verbosity`` (INFO at 1)."""
    logger = logging.getLogger("blitzq")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: "
                                               "%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(LOG_LEVELS[level] if level else VERBOSITY_LEVELS.get(verbosity, logging.INFO))
