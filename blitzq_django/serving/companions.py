"""Services that run beside a worker inside ``runworker`` (the history writer, the
outbox relay): each in its own daemon thread, started before the worker and stopped
after it, so the worker's hot path never waits on the database. (The history
companion's thread only watches the writer's own process, by default: history/process.py.)

A companion is a callable ``(stop: threading.Event) -> None`` that loops until
``stop`` is set; it must catch and log its own errors and keep going (the worker
does not depend on it). ``COMPANIONS`` lists the factories: each gets the merged
settings and returns a companion, or None when it has nothing to do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

log = logging.getLogger("blitzq")

Companion = Callable[[threading.Event], None]
#: Dotted paths of factories ``(settings: dict) -> Companion | None``.
COMPANIONS: tuple[str, ...] = (
    "blitzq_django.history.companion",
    "blitzq_django.outbox.companion",
)


class Running:
    """The companions of one runworker process."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, settings: dict[str, Any], only: set[str] | None = None,
              without: frozenset[str] = frozenset()) -> Running:
        for path in COMPANIONS:
            name = path.rsplit(".", 2)[-2]
            if (only is not None and name not in only) or name in without:
                continue
            companion = import_string(path)(settings)
            if companion is None:
                continue
            thread = threading.Thread(target=self._guarded, args=(name, companion),
                                      name=f"blitzq-{name}", daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def _guarded(self, name: str, companion: Companion) -> None:
        try:
            companion(self.stop_event)
        except Exception:
            log.exception("the %s companion stopped on an error", name)

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout)
