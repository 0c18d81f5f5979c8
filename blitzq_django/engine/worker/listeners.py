"""Listeners: optional observers told when an attempt starts and when a delivery settles.

::

    class Log(Listener):
        def started(self, event: Started) -> None: ...
        def settled(self, event: Settled) -> None: ...

    Worker(client, listeners=[Log()])

Zero cost when a worker has none: the worker then runs the plain Executor and its
plain settlement callback, and nothing of this module runs per message. With
listeners, the worker runs ``ObservedExecutor`` and wraps its settlement callback.

Where listeners run: on the worker's thread pool, never on the event loop, so a
listener may block (write to a database, send a request). They are called one event
at a time, in the order of the transitions (for one message: ``started`` before its
``settled``), by one job on the pool that drains a queue the loop fills: one thread
hop per batch of events, not per event. A listener that raises is logged; the
message is never affected (its settlement is already written when ``settled`` is
called). At shutdown the worker waits for the queued events, up to its
shutdown_timeout.

What is reported:

- ``started``: an attempt begins (once per attempt; never for a message settled
  without running: expired, cancelled before it started, rejected);
- ``settled``: a settlement was written (once per settlement; not when the lease was
  lost, since the message then runs again elsewhere). ``state`` is the record state it
  means: succeeded, failed, retrying, dead_lettered, cancelled, expired, queued
  (requeued at shutdown) or scheduled (deferred by a rate limit).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..brokers.base import Settlement
from ..core.ids import now_ms
from ..core.message import Message
from ..core.states import HeldState, RecordState, SettleKind
from .execution import Executor
from .inflight import Held, InFlight, Key

log = logging.getLogger("blitzq.worker")

# Bound once: read for every transition.
MARK_RUNNING, RUNNING = SettleKind.MARK_RUNNING, HeldState.RUNNING
SUCCEEDED = RecordState.SUCCEEDED
_WITH_DUE_TIME = frozenset({RecordState.RETRYING, RecordState.SCHEDULED})


# Not frozen: built for every transition a worker with listeners makes, and a frozen
# dataclass pays an object.__setattr__ per field. Treat them as read-only.
@dataclass(slots=True)
class Started:
    """An attempt begins."""

    message: Message
    worker: str  # the worker's name
    started_ms: int  # wall time, ms (when the worker handed the attempt to its slot)
    delivery_count: int  # > 1: the message was recovered after a lost lease

    @property
    def task(self) -> str:
        return self.message.task

    @property
    def attempt(self) -> int:
        return self.message.attempt


@dataclass(slots=True)
class Settled:
    """A delivery's settlement is written."""

    state: str  # the record state: succeeded, failed, retrying, dead_lettered, ...
    message_id: str
    queue: str
    task: str  # "" for an entry that is not a message
    attempt: int  # 0: unknown
    worker: str
    #: the decoded message; None for an entry that could not be decoded (malformed)
    message: Message | None
    #: succeeded: what the task returned (None when it did not run in this worker)
    result: Any = None
    #: failed, retrying, dead_lettered after an attempt: the exception it raised
    error: BaseException | None = None
    #: the Record of the failed attempt (error_type, error_message, traceback) or None
    failure: Any = None
    #: dead_lettered: the DeadLetter (its reason: "retries exhausted", "unknown task", ...)
    letter: Any = None
    #: retrying: when the next attempt is due (wall ms); scheduled: when it runs
    due_ms: int | None = None
    duration_ms: int | None = None  # an attempt that ran: how long


class Listener:
    """Base class: override what you need. Both methods run on the worker's thread pool."""

    def started(self, event: Started) -> None:
        """An attempt begins."""

    def settled(self, event: Settled) -> None:
        """A delivery's settlement is written."""


class Notifier:
    """Calls the worker's listeners on its thread pool, one event after another.

    Events are queued on the loop (an object and a deque append per transition); one
    job on the pool drains the queue, so listeners see the transitions in the order
    they happened (an attempt's start before its outcome) at the cost of one thread
    hop per batch, not per event. A slow listener delays the events behind it, never
    the tasks (it holds one pool thread)."""

    def __init__(self, *, name: str, listeners: Sequence[Listener], pool: ThreadPoolExecutor,
                 inflight: InFlight) -> None:
        self._name = name
        self._listeners = tuple(listeners)
        self._pool = pool
        self._inflight = inflight
        #: delivery key -> (value, error) of its attempt, until its settlement is written
        self._outcomes: dict[Key, tuple[Any, BaseException | None]] = {}
        #: message id -> the starts of its next attempts, held back until the settlement
        #: of the attempt before is told: a retry due at once (fast mode, no delay) may be
        #: fetched and started before the flusher reports the write that re-queued it
        self._settling: dict[str, list[Started]] = {}
        self._queue: deque[tuple[Callable[[Listener, Any], None], Any]] = deque()
        #: the drain job, while one runs; True while one is due at the end of this loop
        #: iteration (the events of one iteration go in one job)
        self._job: asyncio.Future[None] | bool | None = None

    # -- from the executor (on the loop) -------------------------------------------

    def started(self, held: Held) -> None:
        event = Started(held.message, self._name, held.started_ms or now_ms(),
                        held.delivery.delivery_count)
        waiting = self._settling.get(held.message.id)
        if waiting is not None:
            waiting.append(event)
        else:
            self._emit(_call_started, event)

    def concluded(self, held: Held, value: Any, error: BaseException | None) -> None:
        self._outcomes[held.key] = (value, error)
        self._settling.setdefault(held.message.id, [])

    # -- from the flusher (on the loop) ---------------------------------------------

    def wrap(self, on_settled: Callable[[Settlement, bool | None], None]
             ) -> Callable[[Settlement, bool | None], None]:
        """The worker's settlement callback, followed by the listeners' ``settled``."""
        inflight, outcomes = self._inflight, self._outcomes

        def settled(settlement: Settlement, ok: bool | None) -> None:
            if settlement.kind == MARK_RUNNING:  # a running record: the attempt goes on
                on_settled(settlement, ok)
                return
            key = settlement.delivery.key
            held = inflight.get(key)
            value, error = outcomes.pop(key, (None, None))
            on_settled(settlement, ok)
            if ok:  # not: the lease was lost, or the settlement given up (not written)
                self._emit(_call_settled, self._event(
                    settlement, held.message if held is not None else None, value, error))
            for later in self._settling.pop(settlement.message_id, ()):
                self._emit(_call_started, later)

        return settled

    def _event(self, settlement: Settlement, message: Message | None, value: Any,
               error: BaseException | None) -> Settled:
        letter = settlement.letter
        failure = settlement.failure
        if message is not None:
            queue = message.queue
        elif letter is not None:
            queue = letter.queue
        else:
            queue = settlement.delivery.queue
        due = settlement.due_ms if settlement.state in _WITH_DUE_TIME else None
        return Settled(settlement.state, settlement.message_id, queue,
                       settlement.task or (message.task if message is not None else ""),
                       settlement.attempt or (message.attempt if message is not None else 0),
                       self._name, message, value if settlement.state == SUCCEEDED else None,
                       error if failure is not None else None, failure, letter, due,
                       settlement.duration_ms)

    # -- the drain job -------------------------------------------------------------------

    def _emit(self, call: Callable[[Listener, Any], None], event: Any) -> None:
        self._queue.append((call, event))
        if self._job is None:
            self._job = True
            asyncio.get_running_loop().call_soon(self._start_job)

    def _start_job(self) -> None:
        job = asyncio.get_running_loop().run_in_executor(self._pool, self._run)
        self._job = job
        job.add_done_callback(self._job_done)

    def _job_done(self, job: asyncio.Future[None]) -> None:
        # On the loop, as every _emit: an event queued after the job found the queue
        # empty is drained by the next job.
        self._job = None
        if not job.cancelled() and job.exception() is not None:
            log.error("listener job failed", exc_info=job.exception())
        if self._queue and not job.cancelled():
            self._start_job()

    def _run(self) -> None:
        queue, listeners = self._queue, self._listeners
        while queue:
            call, event = queue.popleft()
            for listener in listeners:
                try:
                    call(listener, event)
                except Exception:
                    log.exception("listener %r raised on the %s event of message %r",
                                  listener, type(event).__name__.lower(),
                                  getattr(event, "message_id", None) or event.message.id)

    async def drain(self, timeout: float) -> None:
        """Wait until every queued event is handled, up to ``timeout`` (at shutdown)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._job is not None and loop.time() < deadline:
            job = self._job
            if isinstance(job, asyncio.Future):
                await asyncio.wait({job}, timeout=deadline - loop.time())
            await asyncio.sleep(0)  # a due job starts, a done one may start the next


def _call_started(listener: Listener, event: Any) -> None:
    listener.started(event)


def _call_settled(listener: Listener, event: Any) -> None:
    listener.settled(event)


class ObservedExecutor(Executor):
    """The Executor of a worker with listeners: tells them each attempt's start and keeps
    its value or error for its settlement. (A worker without listeners runs the plain
    Executor: not one instruction of this is on its path.)"""

    def __init__(self, *, notifier: Notifier, **parts: Any) -> None:
        super().__init__(**parts)
        self._notifier = notifier

    def _launch(self, held: Held) -> None:
        super()._launch(held)
        # Dropped (expired, revoked) before it began: settling, and no start time. An
        # eager `async def` attempt may have ended already: it has its start time.
        if held.state is RUNNING or held.started_ms:
            self._notifier.started(held)

    def _conclude(self, held: Held, error: BaseException | None, value: Any,
                  started: int) -> None:
        if held.state is RUNNING:
            self._notifier.concluded(held, value, error)
        super()._conclude(held, error, value, started)


__all__ = ["Listener", "Notifier", "ObservedExecutor", "Settled", "Started"]
