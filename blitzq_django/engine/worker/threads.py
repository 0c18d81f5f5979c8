"""The threads that run `def` attempts.

A general-purpose pool (``loop.run_in_executor``) costs a ``concurrent`` future, an
asyncio future chained to it and a wake-up of the loop (a write to its self-pipe) per
call; for short tasks that hand-off costs more than the task. Here a job is a tuple
on a ``SimpleQueue`` and a finished one a tuple on a deque: the thread that finds the
deque without a pending wake-up asks the loop for one drain, which concludes every
attempt finished since. So a burst of short tasks costs one wake-up, not one each.

Threads start as jobs need them, up to ``size``: the first with the first job, more
while jobs wait and every thread is in a call (checked a millisecond after a job found
no thread; jobs are counted on the loop alone, and a job is out until its conclusion
is drained, so the check runs as long as there may be too few). They are daemon
threads: an attempt still running at exit was requeued by the worker, which then does
not wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

log = logging.getLogger("blitzq.worker")

#: Called on the loop with (error or None, return value, seconds the call took).
#: How long a job may wait for a thread before more threads start (seconds).
GROW_AFTER = 0.001

Conclude = Callable[[BaseException | None, Any, float], None]


class TaskThreads:
    def __init__(self, size: int, loop: asyncio.AbstractEventLoop,
                 name: str = "blitzq-task") -> None:
        self.size = size
        self._loop = loop
        self._name = name
        self._jobs: SimpleQueue[tuple[Callable[[], Any], Conclude] | None] = SimpleQueue()
        self._finished: deque[tuple[Conclude, BaseException | None, Any, float]] = deque()
        self._drain_asked = False  # set by a thread, cleared by the drain on the loop
        self._threads: list[_Thread] = []
        self._out = 0  # jobs submitted and not yet concluded (loop only)
        self._closed = False
        self._grow_soon = False  # a _grow() is scheduled

    @property
    def running(self) -> int:
        """Calls in progress now (read after shutdown: threads still in a task)."""
        return sum(1 for thread in self._threads if thread.busy)

    def submit(self, call: Callable[[], Any], conclude: Conclude) -> None:
        """Run ``call()`` on a thread; ``conclude`` then runs on the loop. (Loop only.)"""
        self._out += 1
        self._jobs.put((call, conclude))
        if self._out > len(self._threads) and not self._grow_soon:
            if not self._threads:
                self._start(1)
            elif len(self._threads) < self.size:
                self._grow_soon = True
                self._loop.call_later(GROW_AFTER, self._grow)

    def _grow(self) -> None:
        """More threads, if jobs wait and every thread is in a call: short calls need few
        threads (each one more contends for the GIL, and a thread that only waits for
        the GIL to take the next job is not busy), blocking calls one each. At most
        twice as many each time, so 100 blocked calls have 100 threads within ~10 ms."""
        self._grow_soon = False
        if self._closed:
            return
        waiting = self._jobs.qsize()
        if waiting and all(thread.busy for thread in self._threads):
            self._start(min(waiting, len(self._threads), self.size - len(self._threads)))
        if self._out > len(self._threads) and len(self._threads) < self.size:
            self._grow_soon = True
            self._loop.call_later(GROW_AFTER, self._grow)

    def _start(self, count: int) -> None:
        for _ in range(count):
            thread = _Thread(self, f"{self._name}-{len(self._threads)}")
            self._threads.append(thread)
            thread.start()

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit after their call (its result is dropped)."""
        self._closed = True
        for _ in self._threads:
            self._jobs.put(None)

    # -- in the threads ----------------------------------------------------------------

    def _serve(self, thread: _Thread) -> None:
        get, finished = self._jobs.get, self._finished
        while True:
            job = get()
            if job is None or self._closed:
                return
            call, conclude = job
            thread.busy = True
            began = time.monotonic()
            try:
                value, error = call(), None
            except BaseException as exc:  # noqa: BLE001 - SystemExit fails the attempt, not the worker
                value, error = None, exc
            took = time.monotonic() - began
            thread.busy = False
            finished.append((conclude, error, value, took))
            if not self._drain_asked:
                self._drain_asked = True
                try:
                    self._loop.call_soon_threadsafe(self._drain)
                except RuntimeError:  # the loop is closed: the worker has returned
                    return

    # -- on the loop -----------------------------------------------------------------

    def _drain(self) -> None:
        # Cleared before reading: a job finished from here on asks for another drain.
        self._drain_asked = False
        finished = self._finished
        while finished:
            conclude, error, value, took = finished.popleft()
            self._out -= 1
            try:
                conclude(error, value, took)
            except Exception:  # concluding is total (execution.py); never lose the rest
                log.exception("concluding a thread attempt failed")


class _Thread(threading.Thread):
    def __init__(self, owner: TaskThreads, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._owner = owner
        self.busy = False

    def run(self) -> None:
        self._owner._serve(self)
