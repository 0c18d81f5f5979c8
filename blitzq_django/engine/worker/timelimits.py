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

Who ends an attempt is decided once, by a claim both sides try to take: the thread when
the call returns, the loop when the deadline passes (taking the claim is one
``list.pop()``, atomic under the GIL, so the common path takes no lock). The loop raises
the exception only if it took the claim; a thread that finds the claim gone waits until
the exception is set, then clears it if it was not raised yet. So the exception is
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
import time
from collections.abc import Callable
from threading import get_ident
from time import monotonic
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
        self.active.discard(limit)
        if limit.stuck:
            self.stuck.discard(limit)
        return True

    def settle_expired(self) -> list[TimeLimit]:
        """Settle, as timed out, every attempt past its deadline whose thread still runs
        (the worker is stopping: they must not be requeued); returns them."""
        now = time.monotonic()
        expired = [limit for limit in self.active if limit.expired(now)]
        for limit in expired:
            limit.interrupt()
            self.finish(limit)
            limit.settle(limit.exceeded(None))
        return expired

    def close(self) -> None:
        """The worker returns: no more looks (an attempt requeued at the shutdown deadline
        is another worker's now)."""
        if self._ticking is not None:
            self._ticking.cancel()
            self._ticking = None
        self.active.clear()

    def _stuck(self, limit: TimeLimit) -> None:
        self.stuck.add(limit)
        self._on_stuck(limit)


class TimeLimit:
    """The limit of one attempt."""

    __slots__ = ("_owner", "timeout", "attempt", "_label", "settle", "settled", "stuck",
                 "_claim", "_state", "_ident", "_started", "_interrupted", "_raised")

    def __init__(self, owner: TimeLimits, timeout: float, attempt: Any, label: tuple[str, str],
                 settle: Callable[[TimeLimitExceeded], None]) -> None:
        self._owner = owner
        self.timeout = timeout
        self.attempt = attempt
        self._label = label
        self.settle = settle
        self.settled = False
        self.stuck = False  # its thread ran on past the grace
        self._claim = [True]  # popped by whoever ends the attempt: its thread or the loop
        self._state = _WAITING
        self._raised = False  # the loop has set the exception in the thread
        # Set before they are read: _ident, _started (monotonic time the thread began the
        # call) by call(), before the state says running; _interrupted (monotonic time the
        # exception was set) by interrupt().

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
                    try:
                        self._ident = get_ident()
                        self._started = monotonic()
                        self._state = _RUNNING  # (last: the loop reads the two above then)
                        outcome = (func(*args, **kwargs), None)
                    except BaseException as exc:  # noqa: BLE001 - re-raised below
                        outcome = (None, exc)
                try:
                    self._claim.pop()
                    interrupted = False
                except IndexError:  # the loop took the claim: the exception is (being) set
                    interrupted = True
                    self._clear()
                self._state = _DONE
                break
            except TimeLimitExceeded as exc:
                # Set as the call returned, raised here before _clear() could clear it.
                if outcome is None:
                    outcome = (None, exc)
        value, error = outcome
        if interrupted:
            raise self.exceeded(error)
        if error is not None:
            raise error
        return value

    def _clear(self) -> None:
        """The loop took the claim: once it has set the exception, clear it (raised
        already, if it landed in the call; or never)."""
        while not self._raised:
            time.sleep(0.0001)  # (noqa: sleep) the loop is between its claim and its raise
        clear_in_thread(self._ident)

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
        state = self._state
        return state == _INTERRUPTED or (state == _RUNNING
                                         and now >= self._started + self.timeout)

    def interrupt(self) -> None:
        """Raise TimeLimitExceeded in the thread, if it runs the attempt and has not
        returned (it takes the claim then)."""
        if self._state != _RUNNING:
            return
        try:
            self._claim.pop()
        except IndexError:  # the thread returned first
            return
        self._state = _INTERRUPTED
        self._interrupted = time.monotonic()
        raise_in_thread(self._ident, TimeLimitExceeded)
        self._raised = True
        log.warning("%s: past its time limit of %g s: TimeLimitExceeded raised in its "
                    "thread", self.label, self.timeout)

    def check(self, now: float) -> None:
        """The tick: interrupt it at its deadline; the grace over, its slot is lost."""
        state = self._state
        if state == _RUNNING and now >= self._started + self.timeout:
            self.interrupt()
        elif (state == _INTERRUPTED and not self.stuck
              and now >= self._interrupted + self._owner.grace):
            self.stuck = True
            self._owner._stuck(self)
