"""Time limits of `def` attempts: interrupt the thread at the deadline, recycle if it stays.

At the deadline of an attempt that still runs, ``TimeLimitExceeded`` is raised inside its
thread (``PyThreadState_SetAsyncExc``, the way Dramatiq's time limit works): the task may
catch it to clean up (``except``/``finally`` run), and the attempt fails with it, retried
per its policy. CPython looks for such an exception between bytecodes only, so a thread
blocked in one C call (``time.sleep(3600)``, a read without a timeout, a lock) gets it
when that call returns, if ever. If the thread still runs ``grace`` seconds after the
deadline, its slot is lost: the worker stops taking work and recycles itself (worker.py),
and the attempt is settled as timed out when the worker stops, never requeued (it ran, and
failed its limit), its thread's eventual result dropped. Work that must really stop at
its limit belongs in the process executor, which kills its child (docs/executors.md).

The states of one limit, moved under its lock by the loop and by the thread::

    waiting -> running -> done                  returned in time
    waiting -> running -> interrupted -> done   the exception was set; returned after

Only the loop moves ``running -> interrupted`` (and only while running); only the thread
moves to ``done``, clearing an exception set but not raised yet. So the exception is
raised in the task's call or in the few instructions of ``TimeLimit.call`` around it,
which catch it: never in the worker's own code after the task returned.

One timer per worker looks at the running limits every ``TICK_S`` while there are any
(so a limit is enforced up to a tick late): a timer per attempt cost the event loop a
heap entry and its cancellation per message. An attempt without a timeout pays nothing
of this (execution.py takes another path).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import platform
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import TimeLimitExceeded

log = logging.getLogger("blitzq.worker")

_WAITING, _RUNNING, _INTERRUPTED, _DONE = range(4)

#: How often the running limits are looked at (seconds), while there are any.
TICK_S = 0.1

if platform.python_implementation() == "CPython":
    # Two prototypes of one function: an exception class to raise, or NULL to clear.
    _raise_in = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
        ("PyThreadState_SetAsyncExc", ctypes.pythonapi))
    _clear_in = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
        ("PyThreadState_SetAsyncExc", ctypes.pythonapi))

    def raise_in_thread(ident: int, exc_type: type[BaseException]) -> bool:
        """Raise ``exc_type`` in the thread ``ident`` at its next bytecode."""
        return _raise_in(ident, exc_type) == 1

    def clear_in_thread(ident: int) -> None:
        """Forget an exception set by raise_in_thread() and not raised yet."""
        _clear_in(ident, None)
else:  # pragma: no cover - no such call: a limit only recycles the worker
    def raise_in_thread(ident: int, exc_type: type[BaseException]) -> bool:
        return False

    def clear_in_thread(ident: int) -> None:
        return None


class TimeLimits:
    """The time limits of one worker's running `def` attempts (loop side)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, grace: float,
                 on_stuck: Callable[[TimeLimit], None]) -> None:
        self.loop = loop
        #: seconds a thread may go on after the exception was set before its slot
        #: counts as lost
        self.grace = grace
        self._on_stuck = on_stuck
        self.active: set[TimeLimit] = set()
        #: limits whose thread still ran ``grace`` after the deadline (not settled yet)
        self.stuck: set[TimeLimit] = set()
        #: one lock for the state of every limit: the loop's tick and the task threads
        self.lock = threading.Lock()
        self._ticking: asyncio.TimerHandle | None = None

    def start(self, timeout: float, attempt: Any, label: tuple[str, str],
              settle: Callable[[TimeLimitExceeded], None]) -> TimeLimit:
        """The limit of ``attempt`` (the worker's Held), just handed to the threads;
        ``label`` (task name, message id) names it in logs; ``settle`` concludes it as
        timed out if the worker stops while its thread runs."""
        limit = TimeLimit(self, timeout, attempt, label, settle)
        self.active.add(limit)
        if self._ticking is None:
            self._ticking = self.loop.call_later(TICK_S, self._tick)
        return limit

    def _tick(self) -> None:
        now = time.monotonic()
        for limit in list(self.active):
            limit.check(now)
        self._ticking = self.loop.call_later(TICK_S, self._tick) if self.active else None

    def finish(self, limit: TimeLimit) -> bool:
        """Its thread returned (on the loop): False if the attempt was settled already."""
        if limit.settled:
            return False
        limit.settled = True
        self._forget(limit)
        return True

    def settle_expired(self) -> list[TimeLimit]:
        """Settle, as timed out, every attempt past its deadline whose thread still runs
        (the worker is stopping: they must not be requeued); returns them."""
        now = time.monotonic()
        expired = [limit for limit in self.active if limit.expired(now)]
        for limit in expired:
            limit.interrupt()
            limit.settled = True
            self._forget(limit)
            limit.settle(limit.exceeded(None))
        return expired

    def _forget(self, limit: TimeLimit) -> None:
        self.active.discard(limit)
        self.stuck.discard(limit)

    def _stuck(self, limit: TimeLimit) -> None:
        self.stuck.add(limit)
        self._on_stuck(limit)


class TimeLimit:
    """The limit of one attempt."""

    __slots__ = ("_owner", "_lock", "timeout", "attempt", "_label", "settle", "settled",
                 "_state", "_ident", "_started", "_interrupted", "_stuck")

    def __init__(self, owner: TimeLimits, timeout: float, attempt: Any, label: tuple[str, str],
                 settle: Callable[[TimeLimitExceeded], None]) -> None:
        self._owner = owner
        self._lock = owner.lock
        self.timeout = timeout
        self.attempt = attempt
        self._label = label
        self.settle = settle
        self.settled = False
        self._state = _WAITING
        self._ident = 0
        self._started = 0.0  # monotonic time the thread began the call
        self._interrupted = 0.0  # monotonic time the exception was set
        self._stuck = False

    @property
    def label(self) -> str:
        name, message_id = self._label
        return f"task {name} (message {message_id!r})"

    # -- in the task's thread ----------------------------------------------------------

    def call(self, func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """``func(*args, **kwargs)`` under the limit (in the thread that runs it)."""
        outcome: tuple[Any, BaseException | None] | None = None
        while True:
            try:
                if outcome is None:
                    outcome = self._call(func, args, kwargs)
                interrupted = self._disarm()
                break
            except TimeLimitExceeded as exc:
                # Set as the call returned, raised here before _disarm() could clear it.
                if outcome is None:
                    outcome = (None, exc)
        value, error = outcome
        if interrupted:
            raise self.exceeded(error)
        if error is not None:
            raise error
        return value

    def _call(self, func: Callable[..., Any], args: Any,
              kwargs: Any) -> tuple[Any, BaseException | None]:
        try:
            with self._lock:
                self._ident = threading.get_ident()
                self._started = time.monotonic()
                self._state = _RUNNING
            return func(*args, **kwargs), None
        except BaseException as exc:  # noqa: BLE001 - re-raised by call()
            return None, exc

    def _disarm(self) -> bool:
        with self._lock:
            interrupted = self._state == _INTERRUPTED
            self._state = _DONE
            if interrupted:
                clear_in_thread(self._ident)  # set and not raised yet: it never will be
        return interrupted

    def exceeded(self, error: BaseException | None) -> TimeLimitExceeded:
        """What the attempt fails with: the exception raised in the task (its traceback
        shows where it was), else a new one, after whatever the task did instead."""
        text = f"task exceeded its time limit of {self.timeout:g} s"
        if isinstance(error, TimeLimitExceeded):
            error.args = (text,)
            return error
        exceeded = TimeLimitExceeded(text)
        exceeded.__context__ = error
        return exceeded

    # -- on the loop -------------------------------------------------------------------

    def expired(self, now: float) -> bool:
        with self._lock:
            return self._state == _INTERRUPTED or (
                self._state == _RUNNING and now >= self._started + self.timeout)

    def interrupt(self) -> None:
        """Raise TimeLimitExceeded in the thread, if it runs the attempt and was not told."""
        with self._lock:
            if self._state != _RUNNING:
                return
            self._state = _INTERRUPTED
            self._interrupted = time.monotonic()
            raise_in_thread(self._ident, TimeLimitExceeded)
        log.warning("%s: past its time limit of %g s: TimeLimitExceeded raised in its "
                    "thread", self.label, self.timeout)

    def check(self, now: float) -> None:
        """The tick: interrupt it at its deadline; the grace over, its slot is lost."""
        with self._lock:
            state = self._state
            due = state == _RUNNING and now >= self._started + self.timeout
            stuck = (state == _INTERRUPTED and not self._stuck
                     and now >= self._interrupted + self._owner.grace)
        if due:
            self.interrupt()
        elif stuck:
            self._stuck = True
            self._owner._stuck(self)
