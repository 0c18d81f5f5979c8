"""Failure hooks: called once a failed attempt's or a dead letter's settlement is written.

A task's own hook runs first, then the worker's global ones; async hooks on the
loop, plain ones on the thread pool. Each is kept until it ends, so shutdown can
wait for the hooks of the last settlements.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..brokers.base import Settlement
from ..core.task import TaskRegistry

log = logging.getLogger("blitzq.worker")


class FailureHooks:
    def __init__(self, registry: TaskRegistry, pool: ThreadPoolExecutor,
                 on_failure: Sequence[Callable[[Any], Any]],
                 on_dead_letter: Sequence[Callable[[Any], Any]],
                 around_sync_call: Sequence[Callable[[], Any]] = ()) -> None:
        self._registry = registry
        # Called before and after each plain hook, as around a `def` task (Django: fresh
        # database connections).
        self._around = tuple(around_sync_call)
        self._pool = pool
        self._on_failure = tuple(on_failure)
        self._on_dead_letter = tuple(on_dead_letter)
        self.pending: set[asyncio.Future[Any]] = set()

    def call(self, settlement: Settlement) -> None:
        failure, letter = settlement.failure, settlement.letter
        spec = self._registry.find(failure.task if failure is not None else letter.task or "")
        calls: list[tuple[Callable[[Any], Any], Any]] = []
        if failure is not None:
            own = [spec.on_failure] if spec is not None and spec.on_failure else []
            calls += [(hook, failure) for hook in (*own, *self._on_failure)]
        if letter is not None:
            own = [spec.on_dead_letter] if spec is not None and spec.on_dead_letter else []
            calls += [(hook, letter) for hook in (*own, *self._on_dead_letter)]
        loop = asyncio.get_running_loop()
        for hook, value in calls:
            if asyncio.iscoroutinefunction(hook):
                running: asyncio.Future[Any] = loop.create_task(hook(value))
            else:
                running = loop.run_in_executor(self._pool, _safe_call, hook, value,
                                               self._around)
            self.pending.add(running)  # awaited at shutdown, so no hook is dropped
            running.add_done_callback(self._done)

    def _done(self, running: asyncio.Future[Any]) -> None:
        self.pending.discard(running)
        if not running.cancelled() and running.exception() is not None:
            log.error("failure hook raised", exc_info=running.exception())


def _safe_call(hook: Callable[[Any], Any], value: Any,
               around: Sequence[Callable[[], Any]] = ()) -> None:
    try:
        for call in around:
            call()
        try:
            hook(value)
        finally:
            for call in around:
                call()
    except Exception:
        log.exception("failure hook %r raised", hook)
