"""Execution: run attempts in the slots, and turn each into its settlement.

`async def` tasks run on the event loop (started eagerly on 3.12+), `def` tasks on
the worker's task threads (threads.py). Whatever an attempt does, ``_conclude`` hands exactly one
settlement over and gives the slot back (in a ``finally``): an outcome that
cannot be built becomes a dead letter made of safe strings. A message that must not
start (expired, revoked) settles as such without running (``dropped``), at admission
and again right before it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..brokers.base import Broker
from ..client.context import TaskContext, _current
from ..core.ids import now_ms
from ..core.message import Message
from ..core.states import HeldState
from ..core.task import TaskSpec
from ..errors import BlitzqError, TimeLimitExceeded
from ..progress import ProgressReporter
from . import outcome, tasklog
from .flusher import Flusher
from .inflight import Held, InFlight, Revoked, Settle
from .processes import ProcessPool
from .threads import TaskThreads
from .timelimits import TimeLimits

log = logging.getLogger("blitzq.worker")


if sys.version_info >= (3, 12):
    def _start_task(coro: Any) -> asyncio.Task[Any]:
        # Eager: a task that never awaits anything finishes without a loop round trip.
        return asyncio.Task(coro, loop=asyncio.get_running_loop(), eager_start=True)
else:
    # (No eager start here: a first step outside any task would break asyncio.timeout()
    # and current_task() in task code.)
    def _start_task(coro: Any) -> asyncio.Task[Any]:
        return asyncio.get_running_loop().create_task(coro)


#: What an async attempt interrupted by cancel() concludes with.
_REVOKED = asyncio.CancelledError("revoked")
RUNNING = HeldState.RUNNING  # bound once: compared for every attempt


class Executor:
    def __init__(self, *, broker: Broker, name: str, inflight: InFlight,
                 options: outcome.SettleOptions, settle: Settle, flusher: Flusher,
                 revoked: Revoked, threads: TaskThreads, time_limits: TimeLimits,
                 processes: ProcessPool, around_sync_call: Sequence[Callable[[], Any]],
                 lease_s: float, renew_soon: Callable[[], None],
                 wake_fetcher: Callable[[], None], stopping: asyncio.Event,
                 helpers_stop: asyncio.Event) -> None:
        self._broker = broker
        self._name = name
        self._inflight = inflight
        self._options = options
        self._settle = settle
        self._flusher = flusher
        self._revoked = revoked  # one set for the worker's life
        self._threads = threads
        self._time_limits = time_limits
        self._processes = processes
        self._hooks = tuple(around_sync_call)
        self._lease_s = lease_s
        #: the lease keeper's wake-up: confirm the leases of what waited too long
        self._renew_soon = renew_soon
        self._wake_fetcher = wake_fetcher  # room for another delivery
        self._stopping = stopping
        self._helpers_stop = helpers_stop
        self._progress: ProgressReporter | None = None
        #: whether success lines are on (tasklog.py): the logger's level, read once a
        #: second rather than once per success (a call: ~1 % of a no-op task)
        self.log_successes = tasklog.successes_on()
        self._watch_successes(asyncio.get_running_loop())

    def _watch_successes(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._helpers_stop.is_set():
            self.log_successes = tasklog.successes_on()
            loop.call_later(tasklog.SUCCESS_LEVEL_READ_S, self._watch_successes, loop)

    def _reporter(self) -> ProgressReporter:
        """The worker's progress writer (engine/progress.py), on this (its) loop."""
        reporter = self._progress
        if reporter is None:
            reporter = self._progress = ProgressReporter(self._broker,
                                                         asyncio.get_running_loop())
        return reporter

    async def drain_progress(self, timeout: float) -> None:
        """Write the last progress reports, up to ``timeout`` (at shutdown)."""
        if self._progress is not None:
            with contextlib.suppress(Exception):
                await self._progress.drain(timeout)

    # -- slots -----------------------------------------------------------------

    def offer(self, held: Held, first: bool = False) -> None:
        """A decoded delivery: run it now if a slot is free, else it waits (first: ahead
        of every other waiting one, as a recovered orphan does)."""
        inflight = self._inflight
        slots = held.slots
        if (not first and inflight.running < inflight.concurrency
                and slots.running < slots.cap and not slots.waiting):
            # inflight.start(), inlined (can_start_now() too): it is not in a line
            held.state = RUNNING
            inflight.running += 1
            slots.running += 1
            if held.delivery.delivery_count > 1:
                _start_task(self._launch_recovered(held))
            else:
                self._launch(held)
            return
        inflight.wait_for_slot(held, first)
        self.fill_slots()

    def fill_slots(self) -> None:
        """Start waiting deliveries while slots are free."""
        if self._stopping.is_set():
            return
        inflight = self._inflight
        while inflight.waiting:
            held = inflight.next_ready()
            if held is None:
                return
            if time.monotonic() - held.since > self._lease_s:
                # Held so long (a paused process, a stalled loop) that its lease may be gone
                # to another worker: confirm it first rather than run it twice.
                self._renew_soon()
                return
            inflight.start(held)
            if held.delivery.delivery_count > 1:
                _start_task(self._launch_recovered(held))
            else:
                self._launch(held)

    def dropped(self, held: Held, message: Message, spec: TaskSpec | None) -> bool:
        """Settle a message that must not start: expired (``expires``) or revoked
        (``cancel()``). True if it was; called at admission and again right before it
        starts (it may have waited for a slot meanwhile)."""
        if message.expires_ms is not None and message.expires_ms <= now_ms():
            held.message = message
            tasklog.expired(held, message, now_ms() - message.expires_ms, self._name)
            self._settle(held, outcome.expired(held.delivery, message, spec, now_ms(),
                                               self._options))
            return True
        if self._revoked and (held.delivery.queue, message.id) in self._revoked:
            held.message = message
            log.info("cancelled message %r of %r before it started", message.id, message.task)
            self._settle(held, outcome.cancelled(held.delivery, message, spec, now_ms(),
                                                 self._options))
            return True
        return False

    async def _launch_recovered(self, held: Held) -> None:
        """Start a recovered delivery (it holds its slot) once its start is counted.

        Poison detection (fetching.py) counts starts, not deliveries: a message this
        worker held without starting when it died was not what killed it.
        """
        delivery = held.delivery
        try:
            owned = await self._broker.start_recovered(self._name, delivery) > 0
        except (BlitzqError, OSError) as exc:
            # Started uncounted: a poison message may then run once more than
            # max_deliveries, never less.
            log.warning("could not count the start of recovered entry %r on %r; starting it"
                        " anyway: %s", delivery.entry_id, delivery.queue, exc)
            owned = True
        if held.state is not RUNNING or self._inflight.get(held.key) is not held:
            return  # settled meanwhile (requeued at shutdown)
        if not owned or held.lost:
            # Another worker owns it now: running it here too would run it twice.
            self._inflight.remove(held.key)
            log.warning("lease lost before start; left to its new owner (entry %r on %r)",
                        delivery.entry_id, delivery.queue)
            self._wake_fetcher()
            self.fill_slots()
            return
        if self._stopping.is_set():
            self._conclude_requeued(held)
            return
        self._launch(held)

    # -- running ---------------------------------------------------------------

    def _launch(self, held: Held) -> None:
        """Run the attempt of ``held``, which already took its slot."""
        message, spec, delivery = held.message, held.spec, held.delivery
        # It may have expired, or been revoked, while it waited for its slot.
        if ((message.expires_ms is not None or self._revoked)
                and self.dropped(held, message, spec)):
            return
        worker = self._name
        reporter = self._progress or self._reporter()  # here, on the worker's loop

        def context() -> TaskContext:
            return TaskContext(id=message.id, name=spec.name, queue=message.queue,
                               attempt=message.attempt,
                               max_attempts=spec.retry.with_overrides(message.policy).max_attempts,
                               delivery_count=delivery.delivery_count, worker=worker,
                               headers=message.headers,
                               idempotency_key=message.idempotency_key, _flag=held,
                               _progress=reporter)

        timeout = message.timeout or spec.timeout
        if self._options.track_state:
            self._flusher.add(outcome.running(delivery, message, now_ms(), self._options))
        elif self._flusher.sleeping:
            # to list it in the running index (and write its "started" event) if it runs
            # long (flusher.py)
            self._flusher.wake()
        if spec.is_async:
            runner = _start_task(self._run_async(held, context, timeout))
            if not runner.done():  # an eager runner that never suspended is already settled
                held.runner = runner
        elif spec.executor == "process":  # a child process (processes.py)
            self._processes.run(held, context, timeout, self._conclude)
        else:
            self._run_thread(held, context, timeout)

    async def _run_async(self, held: Held, context: Callable[[], TaskContext],
                         timeout: float | None) -> None:
        message, spec = held.message, held.spec
        started = held.started_ms = now_ms()
        token = _current.set(context)
        error: BaseException | None = None
        value: Any = None
        try:
            if timeout is None:
                value = await spec.func(*message.args, **message.kwargs)
            else:
                began = time.monotonic()
                async with asyncio.timeout(timeout) as deadline:
                    value = await spec.func(*message.args, **message.kwargs)
                if deadline.expired() or time.monotonic() - began > timeout:
                    # It swallowed the cancellation, or blocked the loop past the deadline.
                    raise TimeoutError(f"task exceeded its timeout of {timeout} s")
        except asyncio.CancelledError as exc:
            if held.cancelled:
                # Revoked by cancel() while it ran (revocations.py): recorded cancelled,
                # never requeued, even when a shutdown cancels it too.
                error = _REVOKED
            elif self._stopping.is_set():
                # Cancelled by a shutdown past its deadline: back on the queue for another
                # worker.
                self._conclude_requeued(held)
                return
            else:
                # Raised by the task's own code (an awaited future was cancelled), not by
                # the worker: it fails the attempt like any error, and the slot comes back.
                error = exc
        except BaseException as exc:  # SystemExit from task code fails the attempt, not the worker
            error = exc
        finally:
            _current.reset(token)
            held.runner = None
        if error is _REVOKED:
            self._conclude_cancelled(held, started)
            return
        self._conclude(held, error, value, started)

    def _run_thread(self, held: Held, context: Callable[[], TaskContext],
                    timeout: float | None) -> None:
        if timeout:
            self._run_thread_limited(held, context, timeout)
            return
        message = held.message

        def conclude(error: BaseException | None, value: Any, took: float) -> None:
            self._conclude(held, error, value, held.started_ms or now_ms())

        self._threads.submit(self._thread_call(held, context, held.spec.func, message.args,
                                               message.kwargs), conclude)

    def _run_thread_limited(self, held: Held, context: Callable[[], TaskContext],
                            timeout: float) -> None:
        """_run_thread with a time limit: TimeLimitExceeded is raised in the thread at the
        deadline, and a thread that does not return makes the worker recycle
        (timelimits.py)."""
        message, spec = held.message, held.spec
        limits = self._time_limits

        def settle(exceeded: TimeLimitExceeded) -> None:  # the worker stops; it still runs
            self._conclude(held, exceeded, None, held.started_ms or now_ms())

        limit = limits.start(timeout, held, (spec.name, message.id), settle)

        def conclude(error: BaseException | None, value: Any, took: float) -> None:
            if not limits.finish(limit):
                return  # settled as timed out when the worker stopped: the result is dropped
            if error is None and took > timeout:
                # Returned late without the interrupt (the loop was too busy to send it):
                # the attempt failed all the same.
                error, value = limit.exceeded(None), None
            self._conclude(held, error, value, held.started_ms or now_ms())

        self._threads.submit(self._thread_call(held, context, limit.call,
                                               (spec.func, message.args, message.kwargs), {}),
                             conclude)

    def _thread_call(self, held: Held, context: Callable[[], TaskContext],
                     func: Callable[..., Any], args: Sequence[Any],
                     kwargs: dict[str, Any]) -> Callable[[], Any]:
        """What a task thread runs for ``held``: ``func(*args, **kwargs)`` (the task, or
        its time limit around it) in the attempt's context, between the around-call
        hooks (Django: fresh database connections)."""
        hooks = self._hooks

        def call() -> Any:
            held.started_ms = now_ms()
            token = _current.set(context)
            try:
                if not hooks:
                    return func(*args, **kwargs)
                for hook in hooks:
                    hook()
                try:
                    return func(*args, **kwargs)
                finally:
                    for hook in hooks:
                        hook()
            finally:
                _current.reset(token)

        return call

    def interrupt(self, held: Held) -> bool:
        """Cancel the running ``async def`` attempt of ``held``, revoked by cancel() (the
        caller set ``held.cancelled``): it settles cancelled. False if it has no asyncio
        task to cancel (a ``def`` attempt on a thread)."""
        runner = held.runner
        if runner is None:
            return False
        runner.cancel("revoked")
        runner.add_done_callback(lambda task: self._interrupted(held, task))
        return True

    def _interrupted(self, held: Held, task: asyncio.Task[None]) -> None:
        # Cancelled before its coroutine took a first step (no eager start before 3.12):
        # the coroutine never ran, so nothing in it concluded the attempt.
        if held.state is RUNNING and held.runner is task:
            held.runner = None
            self._conclude_cancelled(held, 0)

    # -- concluding ------------------------------------------------------------

    def _conclude(self, held: Held, error: BaseException | None, value: Any,
                  started: int) -> None:
        """Hand over the attempt's settlement and give its slot back, whatever happens."""
        if held.state is not RUNNING:
            return  # requeued at shutdown while its thread ran on: the outcome is not ours
        if self._progress is not None and self._progress_first(
                held, self._conclude_now, held, error, value, started):
            return
        self._conclude_now(held, error, value, started)

    def _progress_first(self, held: Held, then: Callable[..., None], *args: Any) -> bool:
        """True when ``then(*args)`` will run once the attempt's last progress report is
        written: a follower told the outcome reads that report with it."""
        assert self._progress is not None
        write = self._progress.before_outcome(held.message.queue, held.message.id)
        if write is None or write.done():
            return False
        write.add_done_callback(lambda _: then(*args))
        return True

    def _conclude_now(self, held: Held, error: BaseException | None, value: Any,
                      started: int) -> None:
        if held.state is not RUNNING:
            return
        try:
            options, message = self._options, held.message
            finished = now_ms()
            try:
                if error is None:
                    settlement = outcome.succeeded(held.delivery, message, held.spec, value,
                                                   started, finished, options)
                else:
                    settlement = outcome.failed(held.delivery, message, held.spec, error,
                                                started, finished, options)
            except Exception as exc:  # noqa: BLE001 - settling must be total
                detail = f"{type(exc).__name__}: {outcome.describe(exc)}"
                tasklog.unsettleable(held, exc, detail, self._name)
                settlement = outcome.unsettleable(held.delivery, message, detail, finished,
                                                  options)
            else:
                # The exception object exists only here: its log line carries it (exc_info).
                if settlement.failure is not None:
                    tasklog.failed(held, settlement, error, started, finished, self._name)
                elif self.log_successes:
                    tasklog.succeeded(held, started, finished, self._name)
            self._settle(held, settlement)
        finally:
            if held.state is RUNNING:  # settle() failed before taking it: never leak the slot
                self._inflight.settling(held)
            if self._inflight.waiting:
                self.fill_slots()

    def _conclude_cancelled(self, held: Held, started: int) -> None:
        """An async attempt interrupted by cancel(): recorded cancelled; its slot comes back."""
        if held.state is not RUNNING:
            return
        if self._progress is not None and self._progress_first(
                held, self._conclude_cancelled, held, started):
            return
        try:
            message = held.message
            try:
                settlement = outcome.cancelled(held.delivery, message, held.spec, now_ms(),
                                               self._options, started)
            except Exception as exc:  # noqa: BLE001 - settling must be total
                settlement = outcome.unsettleable(held.delivery, message,
                                                  f"{type(exc).__name__}: "
                                                  f"{outcome.describe(exc)}", now_ms(),
                                                  self._options)
            self._settle(held, settlement)
        finally:
            if held.state is RUNNING:
                self._inflight.settling(held)
            if self._inflight.waiting:
                self.fill_slots()

    def _conclude_requeued(self, held: Held) -> None:
        try:
            self._settle(held, outcome.requeued(held.delivery, held.message, self._options))
        finally:
            if held.state is RUNNING:
                self._inflight.settling(held)
