"""Task history: the engine's events, written to TaskRecord rows (docs/django.md).

``companion(settings)`` is what ``runworker`` starts beside its worker (see
``blitzq_django.serving.companions``): a HistoryWriter of the queues the settings name, in a
child process (``HISTORY_WRITER`` "process", the default: process.py) or on a thread,
or None when ``BLITZQ["HISTORY"]`` is "off" or events are off. ``manage.py
runhistory`` runs the same writer as a process of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..registry import declared_queues
from ..runtime import get_client
from . import process
from .writer import HistoryWriter

log = logging.getLogger("blitzq.history")


def history_queues(settings: dict[str, Any]) -> list[str]:
    """Every queue the project knows: QUEUES, declared task queues and ROUTES targets."""
    routed = sorted(set((settings.get("ROUTES") or {}).values()))
    return list(dict.fromkeys([*settings["QUEUES"], *sorted(declared_queues), *routed]))


def writer_for(settings: dict[str, Any], queues: list[str] | None = None, **options: Any
               ) -> Any:
    """A HistoryWriter on the process client, or None when history is off."""
    if settings["HISTORY"] == "off" or not settings["EVENTS"]:
        return None
    options.setdefault("keep_events", settings["EVENTS_MAXLEN"])
    return HistoryWriter(get_client(), queues or history_queues(settings),
                         settings["HISTORY"], **options)


def companion(settings: dict[str, Any]) -> Callable[[threading.Event], None] | None:
    """The history writer to run beside a worker, or None when history is off.

    ``HISTORY_WRITER`` "process": a thread that runs the writer as a child process and
    starts it again when it dies (process.py). "thread" (and the memory broker, whose
    events live in this process, and settings without a module to hand a child): the
    writer itself, built on its own thread (its first Redis round trips do not delay the
    worker's start)."""
    if settings["HISTORY"] == "off" or not settings["EVENTS"]:
        return None
    if (settings["HISTORY_WRITER"] == "process" and settings["BROKER"] != "memory"
            and process.can_run()):
        queues = history_queues(settings)
        return lambda stop: process.supervise(stop, queues)

    def run(stop: threading.Event) -> None:
        writer = writer_for(settings)
        if writer is not None:
            writer.run(stop)

    return run
