"""Worker: lifecycle of one worker process's event loop.

fetch (XREADGROUP, at most `concurrency` unacked) -> execute (async tasks on the
loop, `def` tasks on a bounded thread pool) -> settle (group commit). Beside it
run the lease keeper (renew + recover) and the promoter (due scheduled messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..brokers.base import RUNNING, Delivery, Settlement
from ..client import Client
from ..context import TaskContext, _current
from ..core import deadletter as reasons
from ..core import record as states
from ..core.message import decode
from ..core.task import TaskSpec
from ..errors import BlitzqError, MessageDecodeError
from . import outcome
from .config import WorkerConfig
from .flusher import Flusher

log = logging.getLogger("blitzq.worker")

FETCH_BACKOFF_MIN_S, FETCH_BACKOFF_MAX_S = 0.1, 5.0
PROMOTE_LIMIT = 1000
HELPER_STOP_S = 2.0


_STATE_COUNTERS = {
    states.SUCCEEDED: "succeeded",
    states.FAILED: "failed",
    states.RETRYING: "retried",
    states.DEAD_LETTERED: "dead_lettered",
    states.QUEUED: "requeued",
}


if sys.version_info >= (3, 12):
    def _start_task(coro: Any) -> asyncio.Task[Any]:
        # Eager: a task that never awaits anything finishes without a loop round trip.
        return asyncio.Task(coro, loop=asyncio.get_running_loop(), eager_start=True)
else:
    def _start_task(coro: Any) -> asyncio.Task[Any]:
        return asyncio.get_running_loop().create_task(coro)


def _ms() -> int:
    return int(time.time() * 1000)


class Stats:
    """What a worker settled, by outcome."""

    __slots__ = ("succeeded", "failed", "retried", "dead_lettered", "requeued", "lost_leases")

    def __init__(self) -> None:
        self.succeeded = self.failed = self.retried = self.dead_lettered = 0
        self.requeued = self.lost_leases = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


class Worker:
    def __init__(
        self,
        client: Client,
        config: WorkerConfig | None = None,
        *,
        around_sync_call: Sequence[Callable[[], Any]] = (),
        on_failure: Sequence[Callable[[Any], Any]] = (),
        on_dead_letter: Sequence[Callable[[Any], Any]] = (),
        **options: Any,
    ) -> None:
        self.client = client
        self.broker = client.broker
        self.config = config or WorkerConfig(**options)
        self.queues: tuple[str, ...] = self.config.queues or tuple(
            sorted(client.registry.queues() | {client.default_queue}))
        self.name = self.config.name
        #: called in the worker thread before and after every `def` task (Django closes
        #: stale DB connections here, as around a request)
        self.around_sync_call = tuple(around_sync_call)
        #: global failure hooks, after each task's own: called with the failed attempt's
        #: Record / the DeadLetter once the settlement is written
        self.on_failure = tuple(on_failure)
        self.on_dead_letter = tuple(on_dead_letter)
        self._settled_count = 0
        self.stats = Stats()
        self._policy = outcome.Policy(client.store_results, client.track_state, self.name)
        self._active: dict[tuple[str, str], Delivery] = {}
        # Handed to the flusher to be acked: no longer renewed (the ack may land first,
        # and a renewal that finds it acked is not a lost lease).
        self._settling: set[tuple[str, str]] = set()
        self._running = 0  # attempts executing (bounded by concurrency)
        self._threads: dict[tuple[str, str], tuple[Delivery, Any]] = {}  # thread attempts
        self._pool_threads_running = 0
        self._threads_lock = threading.Lock()
        self._helpers_stop = asyncio.Event()
        self._waiting: deque[tuple[Delivery, Any, TaskSpec]] = deque()  # prefetched, not started
        self._runners: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self._slot_free = asyncio.Event()
        self._stopping = asyncio.Event()
        self._forced = False
        self._stop_requested = False
        #: stopped by max_tasks or max_memory_mb (a supervisor should start a new one)
        self.recycled = False
        self._pool: ThreadPoolExecutor | None = None
        self._flusher: Flusher | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hooks: set[asyncio.Future[Any]] = set()

    # -- lifecycle -----------------------------------------------------------

    async def run(self, *, install_signal_handlers: bool = False,
                  close_broker: bool = False) -> Stats:
        """Serve until stopped (or drained, in burst mode).

        ``close_broker`` closes the broker's connections of this loop at the end: right
        for a loop of the worker's own, wrong where other code on the loop shares them.
        """
        self._loop = asyncio.get_running_loop()
        self._pool = ThreadPoolExecutor(self.config.thread_count, thread_name_prefix="blitzq")
        self._flusher = Flusher(self.broker, self.name, self._settled)
        if install_signal_handlers:
            self._install_signals()
        await self.broker.prepare(self.queues)
        if self._stop_requested:
            self._begin_stop()
        log.info("worker %s serving %s (concurrency %d)", self.name, ",".join(self.queues),
                 self.config.concurrency)
        flushing = asyncio.create_task(self._flusher.run(), name="blitzq-flusher")
        helpers = [asyncio.create_task(self._keep_leases(), name="blitzq-leases")]
        if self.config.promote:
            helpers.append(asyncio.create_task(self._promote_loop(), name="blitzq-promoter"))
        try:
            await self._fetch_loop()
            await self._drain()
        finally:
            self._helpers_stop.set()  # they return at their next wake-up ...
            _done, pending = await asyncio.wait(helpers, timeout=HELPER_STOP_S)
            for helper in pending:  # ... or are cancelled while stuck in a Redis call
                helper.cancel()
            self._flusher.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(flushing, self.config.shutdown_timeout)
            if self._hooks:  # failure hooks of the last settlements
                await asyncio.wait(self._hooks, timeout=self.config.shutdown_timeout)
            with contextlib.suppress(Exception):
                await self.broker.retire(self.queues, self.name)
            # Threads still running were requeued by _drain; do not wait for them here.
            self._pool.shutdown(wait=False, cancel_futures=True)
            if close_broker:
                with contextlib.suppress(Exception):
                    await self.broker.aclose()
            log.info("worker %s stopped: %s", self.name, self.stats.as_dict())
        return self.stats

    @property
    def forced(self) -> bool:
        """A second signal asked to exit without waiting for running attempts."""
        return self._forced

    def stop(self) -> None:
        """Stop fetching, finish (or requeue) what is running, then return from run().

        Safe from any thread, and before run() has started (it then returns at once).
        """
        self._stop_requested = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._begin_stop)

    def _begin_stop(self) -> None:
        self._stopping.set()
        self._slot_free.set()  # the fetch loop may be waiting for a free slot

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if self._stopping.is_set():
                log.warning("second %s: forcing exit", signal.Signals(signum).name)
                self._forced = True
                self._slot_free.set()
                return
            log.info("%s: stopping gracefully (again to force)", signal.Signals(signum).name)
            self._begin_stop()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)

    async def _drain(self) -> None:
        """Wait for running attempts up to shutdown_timeout; requeue what is left."""
        while self._waiting:  # prefetched but never started: back on the queue at once
            delivery, message, _spec = self._waiting.popleft()
            self._settle(outcome.requeued(delivery, message, self._policy))
        deadline = time.monotonic() + self.config.shutdown_timeout
        while self._active and not self._forced and time.monotonic() < deadline:
            self._slot_free.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slot_free.wait(), deadline - time.monotonic())
        for runner in list(self._runners.values()):
            runner.cancel()  # the runner requeues its own message
        if self._runners:
            await asyncio.gather(*self._runners.values(), return_exceptions=True)
        for key, (delivery, message) in list(self._threads.items()):
            # A thread cannot be interrupted: hand its message to another worker now.
            log.warning("requeued message %s while its thread still runs after "
                        "shutdown_timeout; it may be executed twice", message.id)
            del self._threads[key]
            self._settle(outcome.requeued(delivery, message, self._policy))

    @property
    def threads_left(self) -> int:
        """Thread attempts still running after run() returned (their messages were requeued)."""
        return self._pool_threads_running

    # -- fetching ------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        cfg = self.config
        block_ms = int((0.05 if cfg.burst else cfg.block_timeout) * 1000)
        backoff = FETCH_BACKOFF_MIN_S
        quiet = 0
        while not self._stopping.is_set():
            free = cfg.prefetch_count - len(self._active)
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            try:
                deliveries = await self.broker.fetch(self.queues, self.name,
                                                     min(free, cfg.batch_size), block_ms)
            except (BlitzqError, OSError) as exc:
                log.warning("fetch failed, retrying in %.1fs: %s", backoff, exc)
                await self._sleep(backoff)
                backoff = min(backoff * 2, FETCH_BACKOFF_MAX_S)
                continue
            backoff = FETCH_BACKOFF_MIN_S
            for delivery in deliveries:
                self._start(delivery)
            if cfg.burst:
                # Done when idle twice in a row: another promoter may have moved a message
                # onto the queue between our empty fetch and our own promotion.
                idle = not deliveries and not self._active and await self._nothing_due()
                quiet = quiet + 1 if idle else 0
                if quiet >= 2:
                    return

    async def _nothing_due(self) -> bool:
        if self._flusher is not None and self._flusher.backlog:
            return False
        if not self.config.promote:
            return True
        moved = 0
        for queue in self.queues:
            moved += (await self.broker.promote(queue, _ms(), PROMOTE_LIMIT))[0]
        return moved == 0

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # -- executing -----------------------------------------------------------

    def _start(self, delivery: Delivery) -> None:
        """Take one delivery: reject it, or run its attempt."""
        key = (delivery.queue, delivery.entry_id)
        self._active[key] = delivery
        if self._stopping.is_set():
            # Fetched as we were stopping: hand it straight back.
            self._settle(outcome.requeued(delivery, None, self._policy))
            return
        try:
            if delivery.payload is None:
                raise MessageDecodeError("stream entry has no message field")
            message = decode(delivery.payload, self.client.max_message_size)
        except MessageDecodeError as exc:
            log.error("dead-lettering malformed message %s on %s: %s",
                      delivery.entry_id, delivery.queue, exc)
            self._settle(outcome.rejected(delivery, reasons.MALFORMED, _ms(), self._policy,
                                          detail=f"{reasons.MALFORMED}: {exc}"))
            return
        spec = self.client.registry.find(message.task)
        if spec is None:
            log.error("dead-lettering message %s: unknown task %r", message.id, message.task)
            self._settle(outcome.rejected(delivery, reasons.UNKNOWN_TASK, _ms(), self._policy,
                                          message, f"{reasons.UNKNOWN_TASK} {message.task!r}"))
            return
        if delivery.delivery_count > self.config.max_deliveries:
            log.error("dead-lettering message %s: delivered %d times", message.id,
                      delivery.delivery_count)
            self._settle(outcome.rejected(delivery, reasons.MAX_DELIVERIES, _ms(), self._policy,
                                          message))
            return
        if self._running >= self.config.concurrency:
            self._waiting.append((delivery, message, spec))  # prefetched: runs when a slot frees
            return
        self._launch(delivery, message, spec)

    def _launch(self, delivery: Delivery, message: Any, spec: TaskSpec) -> None:
        self._running += 1
        worker = self.name

        def context() -> TaskContext:
            return TaskContext(id=message.id, name=spec.name, queue=message.queue,
                               attempt=message.attempt,
                               max_attempts=spec.retry.with_overrides(message.policy).max_attempts,
                               delivery_count=delivery.delivery_count, worker=worker)

        timeout = message.timeout or spec.timeout
        if self._policy.track_state:
            self._settle(outcome.running(delivery, message, _ms(), self._policy))
        if spec.is_async:
            runner = _start_task(self._run_async(delivery, message, spec, context, timeout))
            if not runner.done():  # an eager runner that never suspended is already settled
                self._runners[(delivery.queue, delivery.entry_id)] = runner
        else:
            self._run_thread(delivery, message, spec, context, timeout)

    async def _run_async(self, delivery: Delivery, message: Any, spec: TaskSpec,
                         context: Callable[[], TaskContext], timeout: float | None) -> None:
        key = (delivery.queue, delivery.entry_id)
        started = _ms()
        token = _current.set(context)
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
        except asyncio.CancelledError:
            if not self._stopping.is_set():
                raise
            self._settle(outcome.requeued(delivery, message, self._policy))
        except BaseException as exc:  # SystemExit from task code fails the attempt, not the worker
            self._settle(outcome.failed(delivery, message, spec, exc, started, _ms(), self._policy))
        else:
            self._settle(outcome.succeeded(delivery, message, spec, value, started, _ms(),
                                           self._policy))
        finally:
            _current.reset(token)
            self._runners.pop(key, None)
            self._attempt_done()

    def _run_thread(self, delivery: Delivery, message: Any, spec: TaskSpec,
                    context: Callable[[], TaskContext], timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        times = [0, 0.0]  # started ms, and monotonic start: set in the thread, when it runs
        hooks = self.around_sync_call

        key = (delivery.queue, delivery.entry_id)
        self._threads[key] = (delivery, message)
        with self._threads_lock:
            self._pool_threads_running += 1

        def call() -> Any:
            try:
                return run()
            finally:
                # Counted down in the thread itself: after shutdown no loop runs `done`.
                with self._threads_lock:
                    self._pool_threads_running -= 1

        def run() -> Any:
            times[0], times[1] = _ms(), time.monotonic()
            token = _current.set(context)
            try:
                for hook in hooks:
                    hook()
                return spec.func(*message.args, **message.kwargs)
            finally:
                for hook in hooks:
                    hook()
                _current.reset(token)

        def done(future: Any) -> None:
            if self._threads.pop(key, None) is None:
                return  # requeued at shutdown while it ran: its outcome is no longer ours
            finished, started = _ms(), times[0] or _ms()
            error = future.exception()
            if timeout and times[1] and time.monotonic() - times[1] > timeout:
                # The thread kept its slot until it returned; the attempt still failed.
                error = TimeoutError(f"task exceeded its timeout of {timeout} s")
            if error is not None:
                self._settle(outcome.failed(delivery, message, spec, error, started, finished,
                                            self._policy))
            else:
                self._settle(outcome.succeeded(delivery, message, spec, future.result(),
                                               started, finished, self._policy))
            self._attempt_done()

        assert self._pool is not None
        loop.run_in_executor(self._pool, call).add_done_callback(done)

    def _attempt_done(self) -> None:
        """An attempt gave its slot back: start a prefetched message, if one waits."""
        self._running -= 1
        if self._waiting and not self._stopping.is_set():
            self._launch(*self._waiting.popleft())

    # -- settling ------------------------------------------------------------

    def _settle(self, settlement: Settlement) -> None:
        assert self._flusher is not None
        if settlement.kind != RUNNING:
            self._settling.add((settlement.delivery.queue, settlement.delivery.entry_id))
        self._flusher.add(settlement)

    def _settled(self, settlement: Settlement, ok: bool | None) -> None:
        """Called by the flusher once a settlement is written (True), refused because the
        lease was lost (False), or given up after Redis refused it (None)."""
        if settlement.kind == RUNNING:
            return  # the delivery goes on; only its "running" record was written
        key = (settlement.delivery.queue, settlement.delivery.entry_id)
        self._active.pop(key, None)
        self._settling.discard(key)
        self._slot_free.set()
        if ok is None:
            return
        if not ok:
            self.stats.lost_leases += 1
            log.warning("lease lost; message may be executed again (message %s, entry %s): "
                        "its settlement was not written", settlement.message_id, key[1])
            return
        counter = _STATE_COUNTERS.get(settlement.state)
        if counter is not None:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        if settlement.failure is not None or settlement.letter is not None:
            self._call_hooks(settlement)
        self._settled_count += 1
        recycle = self.config.max_tasks and self._settled_count >= self.config.max_tasks
        if recycle and not self._stopping.is_set():
                log.info("worker %s settled %d messages (max_tasks): recycling", self.name,
                         self._settled_count)
                self.recycled = True
                self._begin_stop()

    def _call_hooks(self, settlement: Settlement) -> None:
        spec = self.client.registry.find(settlement.failure.task if settlement.failure else
                                         settlement.letter.task or "")
        calls: list[tuple[Callable[[Any], Any], Any]] = []
        if settlement.failure is not None:
            own = [spec.on_failure] if spec is not None and spec.on_failure else []
            calls += [(hook, settlement.failure) for hook in (*own, *self.on_failure)]
        if settlement.letter is not None:
            own = [spec.on_dead_letter] if spec is not None and spec.on_dead_letter else []
            calls += [(hook, settlement.letter) for hook in (*own, *self.on_dead_letter)]
        loop = asyncio.get_running_loop()
        for hook, value in calls:
            if asyncio.iscoroutinefunction(hook):
                running: asyncio.Future[Any] = loop.create_task(hook(value))
            else:
                assert self._pool is not None
                running = loop.run_in_executor(self._pool, _safe_call, hook, value)
            self._hooks.add(running)  # awaited at shutdown, so no hook is dropped
            running.add_done_callback(self._hook_done)

    def _hook_done(self, running: asyncio.Future[Any]) -> None:
        self._hooks.discard(running)
        if not running.cancelled() and running.exception() is not None:
            log.error("failure hook raised", exc_info=running.exception())

    # -- leases and recovery --------------------------------------------------

    async def _keep_leases(self) -> None:
        cfg = self.config
        next_recovery = time.monotonic() + min(cfg.recovery_s, 1.0)
        backoff = 0.0
        while True:
            wait = backoff or min(cfg.heartbeat_s, max(0.0, next_recovery - time.monotonic()))
            if await self._helper_wait(wait):
                return
            self._check_memory()
            try:
                await self._renew()
                if time.monotonic() >= next_recovery and not self._stopping.is_set():
                    next_recovery = time.monotonic() + cfg.recovery_s
                    await self._recover()
                backoff = 0.0
            except Exception as exc:  # this loop must outlive any error: leases depend on it
                backoff = min(max(backoff * 2, FETCH_BACKOFF_MIN_S), FETCH_BACKOFF_MAX_S)
                log.warning("lease upkeep failed, retrying in %.1fs: %s", backoff, exc,
                            exc_info=not isinstance(exc, BlitzqError | OSError))

    async def _helper_wait(self, seconds: float) -> bool:
        """Sleep, or return True as soon as the helpers are told to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._helpers_stop.wait(), seconds)
        return self._helpers_stop.is_set()

    def _check_memory(self) -> None:
        if not self.config.max_memory_mb or self._stopping.is_set():
            return
        rss = resident_mb()
        if rss > self.config.max_memory_mb:
            log.warning("worker %s uses %.0f MiB (max_memory_mb %d): recycling",
                        self.name, rss, self.config.max_memory_mb)
            self.recycled = True
            self._begin_stop()

    async def _renew(self) -> None:
        deliveries = [d for k, d in self._active.items() if k not in self._settling]
        if not deliveries:
            return
        lost = set(await self.broker.renew(self.name, deliveries))
        for d in deliveries:
            key = (d.queue, d.entry_id)
            if d.entry_id in lost and key in self._active and key not in self._settling:
                log.warning("lease lost; message may be executed again (entry %s on %s)",
                            d.entry_id, d.queue)

    async def _recover(self) -> None:
        idle_ms = int(self.config.visibility_timeout * 1000)
        for queue in self.queues:
            free = self.config.prefetch_count - len(self._active)
            if free <= 0:
                return
            claimed, deleted = await self.broker.recover(queue, self.name, idle_ms, free)
            for entry_id in deleted:
                log.error("entry %s on %s was deleted while pending; nothing to recover",
                          entry_id, queue)
            for delivery in claimed:
                log.warning("recovered %s on %s (delivery %d)", delivery.entry_id, queue,
                            delivery.delivery_count)
                self._start(delivery)

    # -- promotion -------------------------------------------------------------

    async def _promote_loop(self) -> None:
        poll = self.config.schedule_poll_interval
        while True:
            wait = poll
            try:
                now = _ms()
                for queue in self.queues:
                    _moved, next_due = await self.broker.promote(queue, now, PROMOTE_LIMIT)
                    if next_due >= 0:
                        wait = min(wait, max(0.0, (next_due - now) / 1000))
            except Exception as exc:  # this loop must outlive any error
                log.warning("promotion failed: %s", exc,
                            exc_info=not isinstance(exc, BlitzqError | OSError))
            if await self._helper_wait(wait):
                return


def _safe_call(hook: Callable[[Any], Any], value: Any) -> None:
    try:
        hook(value)
    except Exception:
        log.exception("failure hook %r raised", hook)


def resident_mb() -> float:
    """Current resident set size of this process in MiB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
