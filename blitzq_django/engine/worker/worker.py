"""Worker: the lifecycle of one worker process's event loop, and the parts it wires.

fetch and admit (fetching.py) -> run in the slots (execution.py) -> settle (group
commit, flusher.py). Beside them run the lease keeper (renew + recover, leases.py)
and the promoter (due scheduled messages, promotion.py). What the worker holds is
one table (inflight.py); failure hooks run once their settlement is written
(hooks.py).

The worker composes: each part gets what it uses as keyword arguments (the broker,
the table, a ``settle`` callable, an event, another part's bound method), never the
worker, and parts never reach each other through it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import importlib.metadata
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..brokers.base import Settlement
from ..client import Client
from ..core import deadletter as reasons
from ..core.ids import now_ms
from ..core.registry import WorkerInfo
from ..core.states import HeldState, RecordState, SettleKind
from ..errors import BlitzqError, BrokerUnavailable
from . import outcome, supervision
from .config import WorkerConfig
from .execution import Executor
from .fetching import Intake
from .flusher import START_EVENT_DELAY_S, Flusher
from .hooks import FailureHooks
from .inflight import Held, InFlight, Revoked, Settle
from .leases import LeaseKeeper
from .listeners import Listener, Notifier, ObservedExecutor
from .processes import DEFAULT_MAX_TASKS_PER_CHILD, ProcessPool
from .promotion import promote_all_due, promote_forever
from .ratelimit import RateGate
from .revocations import Revocations
from .threads import TaskThreads
from .timelimits import TimeLimit, TimeLimits
from .waits import wait_set
from .workflow_steps import StepRecorder, is_step, step_of

log = logging.getLogger("blitzq.worker")

HELPER_STOP_S = 2.0
REGISTRY_MIN_TTL_S = 5.0  # a registry entry outlives at least this many seconds
#: How many refused settlements (run here, lease lost before they were written) are kept
#: to be written if this worker recovers the same entry later (``_refused``).
REFUSED_KEPT = 10_000
STARTUP_BACKOFF_MIN_S, STARTUP_BACKOFF_MAX_S = 0.5, 10.0

# Bound once: read for every settlement.
MARK_RUNNING, REQUEUE = SettleKind.MARK_RUNNING, SettleKind.REQUEUE

_STATE_COUNTERS: dict[str, str] = {
    RecordState.SUCCEEDED: "succeeded",
    RecordState.FAILED: "failed",
    RecordState.RETRYING: "retried",
    RecordState.DEAD_LETTERED: "dead_lettered",
    RecordState.QUEUED: "requeued",
    RecordState.CANCELLED: "cancelled",
    RecordState.EXPIRED: "expired",
}


class Stats:
    """What a worker settled, by outcome."""

    __slots__ = ("succeeded", "failed", "retried", "dead_lettered", "requeued", "lost_leases",
                 "cancelled", "expired")

    def __init__(self) -> None:
        self.succeeded = self.failed = self.retried = self.dead_lettered = 0
        self.requeued = self.lost_leases = 0
        self.cancelled = self.expired = 0  # cancel() / expires: settled without running on

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


class Worker:
    # Built in run() (_build): they belong to its loop.
    pool: ThreadPoolExecutor
    time_limits: TimeLimits
    flusher: Flusher
    executor: Executor
    gate: RateGate
    intake: Intake
    revocations: Revocations
    leases: LeaseKeeper
    hooks: FailureHooks
    _settle: Settle  # settle(), traced when the client is instrumented

    def __init__(
        self,
        client: Client,
        config: WorkerConfig | None = None,
        *,
        around_sync_call: Sequence[Callable[[], Any]] = (),
        on_failure: Sequence[Callable[[Any], Any]] = (),
        on_dead_letter: Sequence[Callable[[Any], Any]] = (),
        listeners: Sequence[Listener] = (),
        processes: int | None = None,
        max_tasks_per_child: int = DEFAULT_MAX_TASKS_PER_CHILD,
        process_initializer: Callable[..., Any] | None = None,
        process_initargs: tuple[Any, ...] = (),
        process_around_call: Callable[[], Any] | None = None,
        **options: Any,
    ) -> None:
        self.client = client
        self.broker = client.broker
        self.config = config or WorkerConfig(**options)
        self.queues: tuple[str, ...] = self.config.queues or tuple(
            sorted(client.known_queues()))
        self.name = self.config.name
        #: called in the worker thread before and after every `def` task (Django closes
        #: stale DB connections here, as around a request)
        self.around_sync_call = tuple(around_sync_call)
        #: global failure hooks, after each task's own: called with the failed attempt's
        #: Record / the DeadLetter once the settlement is written
        self._on_failure, self._on_dead_letter = tuple(on_failure), tuple(on_dead_letter)
        #: observers of each attempt's start and each settlement (listeners.py); none: the
        #: plain executor and settlement callback run, at no cost
        self.listeners = tuple(listeners)
        self.notifier: Notifier | None = None
        #: the children of executor="process" tasks (processes.py): ``processes`` of them
        #: (None: one per CPU), started on the first such task. The initializer runs once
        #: in each child, ``process_around_call`` before and after each call there; both
        #: must be importable module-level functions.
        self.processes = ProcessPool(processes, max_tasks_per_child=max_tasks_per_child,
                                     initializer=process_initializer,
                                     initargs=process_initargs,
                                     around_call=process_around_call)
        self.settle_options = _settle_options(client, self.name)
        self._start_with_outcome = self.settle_options.start_with_outcome
        #: every delivery this worker holds (see inflight.py)
        self.inflight = InFlight(self.config.concurrency, self.config.queue_concurrency)
        self._revoked: Revoked = set()  # filled by the revocations, read by the others
        self.stats = Stats()
        #: delivery key -> (settlement, message) of an attempt that ran here and whose
        #: settlement was refused (lease lost: a pause, a stalled loop). Should this worker
        #: recover that entry later, it writes this outcome instead of running it again.
        self._refused: collections.OrderedDict[Any, tuple[Settlement, Any]] = \
            collections.OrderedDict()
        self._settled_count = 0
        self._started_ms = now_ms()
        self.threads: TaskThreads | None = None  # `def` attempts; built in run()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._init_stopping()

    def _init_stopping(self) -> None:
        self.helpers_stop = asyncio.Event()
        self._room = asyncio.Event()  # set when the fetch loop may read more
        self._renew_now = asyncio.Event()  # set when the leases must be renewed at once
        self._stopping = asyncio.Event()
        self._forced = self._stop_requested = False
        self._signalled_at: float | None = None  # monotonic time of the first stop signal
        #: stopped by max_tasks or max_memory_mb (a supervisor should start a new one)
        self.recycled = False
        #: recycled because a `def` task's thread ran on past its time limit and grace: a
        #: slot is lost for good, so a process of its own starts afresh (cli.py)
        self.lost_slot = False

    # -- lifecycle -----------------------------------------------------------

    async def run(self, *, install_signal_handlers: bool = False,
                  close_broker: bool = False) -> Stats:
        """Serve until stopped (or drained, in burst mode).

        ``close_broker`` closes the broker's connections of this loop at the end: right
        for a loop of the worker's own, wrong where other code on the loop shares them.
        """
        self._build(asyncio.get_running_loop())
        if install_signal_handlers:
            self._install_signals()
        if self._stop_requested:
            self._begin_stop()
        flushing = helpers = None
        try:
            if not await self._prepare():
                return self.stats
            supervision.notify_ready()
            log.info("worker %s serving %s (concurrency %d)", self.name, ",".join(self.queues),
                     self.config.concurrency)
            await self.beat()
            flushing = asyncio.create_task(self.flusher.run(), name="blitzq-flusher")
            helpers = [asyncio.create_task(self.leases.run(), name="blitzq-leases")]
            if self.config.promote:
                # Until the helpers stop: sleeps until the earliest scheduled message is
                # due (at most schedule_poll_interval), woken by a new earlier one.
                helpers.append(asyncio.create_task(promote_forever(
                    self.broker, self.queues, self.helpers_stop,
                    self.config.schedule_poll_interval), name="blitzq-promoter"))
            # Revocations (cancel): listening, and what is revoked already, before fetching.
            listener = await self.revocations.start()
            helpers.append(asyncio.create_task(self.revocations.run(listener),
                                               name="blitzq-revocations"))
            # One fetch loop per queue: a cluster refuses reads across queues' hash tags,
            # and each queue reads within its own prefetch, whatever the others hold.
            await asyncio.gather(*(self.intake.fetch_loop(queue) for queue in self.queues))
            await self._drain()
        finally:
            await self._shut_down(flushing, helpers or [], close_broker)
        return self.stats

    # -- composition ---------------------------------------------------------------

    def _build(self, loop: asyncio.AbstractEventLoop) -> None:
        """Build the parts, each given what it uses; they belong to ``loop``."""
        self._loop = loop
        cfg = self.config
        self.pool = ThreadPoolExecutor(cfg.thread_count, thread_name_prefix="blitzq")
        self.threads = TaskThreads(cfg.thread_count, loop)
        self.time_limits = TimeLimits(loop, cfg.time_limit_grace, self._thread_stuck)
        self.flusher = Flusher(self.broker, self.name, self._settled_callback(),
                               self._fallback, self._unwritten_starts,
                               StepRecorder(self.broker, self.client.workflows.launcher))
        self.executor = executor = self._build_executor(self.threads)
        self._settle = settle = self._traced_settle()
        broker, name, inflight, options = self.broker, self.name, self.inflight, self.settle_options
        self.gate = RateGate(  # admission of rate-limited tasks (ratelimit.py)
            broker=broker, name=name, inflight=inflight, options=options, settle=settle,
            offer=executor.offer, rates=self.client.rate_limits, tasks=self.client.registry,
            stopping=self._stopping, wake_fetcher=self._room.set)
        self.intake = Intake(
            broker=broker, name=name, config=cfg, inflight=inflight, options=options,
            settle=settle, find=self.client.registry.find, offer=executor.offer,
            limit=self.gate.admit, dropped=executor.dropped, revoked=self._revoked,
            max_message_size=self.client.max_message_size, pool=self.pool, room=self._room,
            stopping=self._stopping, nothing_due=self.nothing_due, ran_here=self._ran_here)
        self.leases = LeaseKeeper(
            broker=broker, name=name, queues=self.queues, config=cfg, inflight=inflight,
            wake=self._renew_now, admit=self.intake.admit, fill_slots=executor.fill_slots,
            wake_fetcher=self._room.set, beat=self.beat, check_memory=self.check_memory,
            stopping=self._stopping, helpers_stop=self.helpers_stop)
        self.revocations = Revocations(
            broker=broker, queues=self.queues, ids=self._revoked, inflight=inflight,
            options=options, settle=settle, interrupt=executor.interrupt,
            helpers_stop=self.helpers_stop)
        self.hooks = FailureHooks(self.client.registry, self.pool, self._on_failure,
                                  self._on_dead_letter, self.around_sync_call)

    def _settled_callback(self) -> Callable[[Settlement, bool | None], None]:
        """What the flusher reports each written settlement to: ``_settled``, and the
        listeners after it when there are any."""
        if not self.listeners:
            return self._settled
        self.notifier = Notifier(name=self.name, listeners=self.listeners, pool=self.pool,
                                 inflight=self.inflight)
        return self.notifier.wrap(self._settled)

    def _build_executor(self, threads: TaskThreads) -> Executor:
        parts: dict[str, Any] = {
            "broker": self.broker, "name": self.name, "inflight": self.inflight,
            "options": self.settle_options, "settle": self.settle, "flusher": self.flusher,
            "revoked": self._revoked, "threads": threads, "time_limits": self.time_limits,
            "processes": self.processes, "around_sync_call": self.around_sync_call,
            "lease_s": self.config.visibility_timeout, "renew_soon": self._renew_now.set,
            "wake_fetcher": self._room.set, "stopping": self._stopping,
            "helpers_stop": self.helpers_stop}
        if self.notifier is None:
            return Executor(**parts)
        return ObservedExecutor(notifier=self.notifier, **parts)

    def _traced_settle(self) -> Settle:
        """``settle``, for the parts built after the executor: with OpenTelemetry, the
        executor's attempts get their spans and settling ends them (spans.py)."""
        if self.client.tracing is None:
            return self.settle
        from .spans import trace_attempts  # lazy: cost (opentelemetry)

        return trace_attempts(executor=self.executor, tracing=self.client.tracing,
                              name=self.name, settle=self.settle)

    async def _prepare(self) -> bool:
        """Create the consumer groups, waiting for Redis as long as it takes (a service
        started before its Redis must come up, not exit). False if stopped meanwhile."""
        backoff, attempt = STARTUP_BACKOFF_MIN_S, 1
        while not self.stopping:
            try:
                await self.broker.prepare(self.queues)
                return True
            except (BrokerUnavailable, OSError) as exc:
                log.warning("worker %s cannot reach Redis (attempt %d), retrying in %.1fs: %s",
                            self.name, attempt, backoff, exc)
                await wait_set(self._stopping, backoff)
                backoff, attempt = min(backoff * 2, STARTUP_BACKOFF_MAX_S), attempt + 1
        return False

    async def _shut_down(self, flushing: asyncio.Task[None] | None,
                         helpers: list[asyncio.Task[None]], close_broker: bool) -> None:
        self.helpers_stop.set()  # they return at their next wake-up ...
        if helpers:
            _done, pending = await asyncio.wait(helpers, timeout=HELPER_STOP_S)
            for helper in pending:  # ... or are cancelled while stuck in a Redis call
                helper.cancel()
        self.flusher.close()
        if flushing is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(flushing, self.config.shutdown_timeout)
        if self.notifier is not None:  # listeners of the last settlements
            await self.notifier.drain(self.config.shutdown_timeout)
        if self.hooks.pending:  # failure hooks of the last settlements
            await asyncio.wait(self.hooks.pending, timeout=self.config.shutdown_timeout)
        await self.executor.drain_progress(self.config.shutdown_timeout)
        if flushing is not None:
            with contextlib.suppress(Exception):
                await self.broker.retire(self.queues, self.name)
            with contextlib.suppress(Exception):
                await self.broker.leave(self.name)
        if self.processes.started:  # idle children exit; busy ones were requeued: killed
            await asyncio.get_running_loop().run_in_executor(None, self.processes.shutdown)
        # Threads still running were requeued by _drain; do not wait for them here.
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.threads is not None:
            self.threads.shutdown()
        self.time_limits.close()
        if close_broker:
            with contextlib.suppress(Exception):
                await self.broker.aclose()
        log.info("worker %s stopped: %s", self.name, self.stats.as_dict())

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

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
        self._room.set()  # the fetch loop may be waiting for room

    def _install_signals(self) -> None:
        """SIGTERM/SIGINT stop gracefully. Alone, a second one (not the repeat of the
        first that ``timeout`` sends) forces the exit; under a supervisor each one is the
        same graceful request, and the supervisor's FORCE_SIGNAL forces (supervision.py)."""
        loop = asyncio.get_running_loop()
        supervised = supervision.supervised()

        def on_signal(signum: int) -> None:
            name = signal.Signals(signum).name
            now, first = time.monotonic(), self._signalled_at
            if first is not None:
                if supervised or now - first < supervision.REPEAT_WINDOW_S:
                    log.debug("%s: stopping already", name)
                else:
                    self._force(f"second {name}")
                return
            self._signalled_at = now
            log.info("%s: stopping gracefully%s", name, "" if supervised else " (again to force)")
            self._begin_stop()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        if supervised:
            loop.add_signal_handler(supervision.FORCE_SIGNAL, self._force,
                                    "the supervisor's " + supervision.FORCE_SIGNAL.name)
        # Blocked since the start under a supervisor: a stop sent meanwhile arrives now.
        supervision.unblock_stop_signals()

    def _force(self, why: str) -> None:
        log.warning("%s: forcing exit", why)
        self._signalled_at = self._signalled_at or time.monotonic()
        self._forced = True
        self._begin_stop()

    async def _drain(self) -> None:
        """Wait for running attempts up to shutdown_timeout; settle those past their time
        limit as timed out; requeue what is left."""
        settle, options = self._settle, self.settle_options
        for held in self.inflight.in_state(HeldState.PREFETCHED):  # never started: requeued
            settle(held, outcome.requeued(held.delivery, held.message, options))
        deadline = time.monotonic() + self.config.shutdown_timeout
        # (Not for the threads stuck past their time limit: they are why it stops.)
        await self._wait_running(lambda: self.inflight.running > len(self.time_limits.stuck),
                                 deadline)
        runners = [h.runner for h in self.inflight.in_state(HeldState.RUNNING) if h.runner]
        for runner in runners:
            runner.cancel()  # the runner requeues its own message
        if runners:
            await asyncio.gather(*runners, return_exceptions=True)
        # Threads past their time limit: settled as timed out, never requeued (they ran,
        # and failed their limit); whatever they return later is dropped.
        timed_out = {id(limit.attempt) for limit in self.time_limits.settle_expired()}
        if timed_out:  # settled once their last progress report is written: wait for it
            await self._wait_running(lambda: any(
                id(h) in timed_out for h in self.inflight.in_state(HeldState.RUNNING)),
                time.monotonic() + HELPER_STOP_S, forced_too=True)
        for held in self.inflight.in_state(HeldState.RUNNING):
            if id(held) in timed_out:
                continue  # still settling: never requeued
            # A thread cannot be interrupted: hand its message to another worker now.
            log.warning("requeued message %r while its thread still runs after "
                        "shutdown_timeout; it may be executed twice", held.message.id)
            settle(held, outcome.requeued(held.delivery, held.message, options))

    async def _wait_running(self, running: Callable[[], bool], deadline: float,
                            forced_too: bool = False) -> None:
        """Until ``running()`` is false, the deadline passes or (unless ``forced_too``) a
        second signal forces the exit; settle() wakes it."""
        while running() and (forced_too or not self._forced) and time.monotonic() < deadline:
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), deadline - time.monotonic())

    def _thread_stuck(self, limit: TimeLimit) -> None:
        """A `def` task's thread still runs ``time_limit_grace`` after its time limit
        raised TimeLimitExceeded in it (a blocking C call): its slot is lost. Stop taking
        work, let the other attempts finish, and recycle into a fresh process."""
        log.error("%s still runs %g s after its time limit of %g s (blocked in a call "
                  "Python cannot interrupt; executor=\"process\" can): worker %s stops "
                  "taking work and recycles into a fresh process", limit.label,
                  self.config.time_limit_grace, limit.timeout, self.name)
        self.recycled = self.lost_slot = True
        self._begin_stop()

    @property
    def threads_left(self) -> int:
        """Thread attempts still running after run() returned (their messages were requeued)."""
        return self.threads.running if self.threads is not None else 0

    # -- the registry ------------------------------------------------------------

    @property
    def registry_ttl_ms(self) -> int:
        """How long this worker's registry entry (and running index) outlives its last
        heartbeat."""
        return int(max(3 * self.config.heartbeat_s, REGISTRY_MIN_TTL_S) * 1000)

    async def beat(self) -> None:
        """Write this worker's entry in the registry (client.workers()); it expires
        unless written again, so a killed worker leaves the list on its own, and its
        running index (core/running.py) with it."""
        now = now_ms()
        ttl_ms = self.registry_ttl_ms
        info = WorkerInfo(name=self.name, host=socket.gethostname(), pid=os.getpid(),
                          queues=list(self.queues), concurrency=self.config.concurrency,
                          running=self.inflight.running, processed=self._settled_count,
                          started_ms=self._started_ms, heartbeat_ms=now,
                          expires_ms=now + ttl_ms, version=_version())
        try:
            await self.broker.heartbeat(self.name, info.to_bytes(), now, ttl_ms, self.queues)
        except (BlitzqError, OSError) as exc:  # the registry is for people; serving goes on
            log.warning("worker heartbeat failed: %s", exc)

    # -- what the parts are given ------------------------------------------------

    async def nothing_due(self) -> bool:
        """Burst mode: nothing is left to write or to promote."""
        if self.flusher.backlog:
            return False
        if not self.config.promote:
            return True
        return await promote_all_due(self.broker, self.queues) == 0

    def check_memory(self) -> None:
        if not self.config.max_memory_mb or self.stopping:
            return
        rss = resident_mb()
        if rss > self.config.max_memory_mb:
            log.warning("worker %s uses %.0f MiB (max_memory_mb %d): recycling",
                        self.name, rss, self.config.max_memory_mb)
            self.recycled = True
            self._begin_stop()

    # -- settling ------------------------------------------------------------

    def settle(self, held: Held, settlement: Settlement) -> None:
        """Hand a held delivery's settlement to the flusher (its slot comes back now)."""
        if self.inflight.settling(held):
            if held.start_written:
                # A long attempt: it is in the running index, and its "started" event (if
                # any) went on its own (flusher.py). The settlement removes the entry.
                settlement = settlement._replace(started_ms=0, indexed=True)
            elif self._start_with_outcome:
                # Its attempt's "started" event goes with this settlement, unless the
                # attempt never began.
                if not held.started_ms:
                    if settlement.started_ms:
                        settlement = settlement._replace(started_ms=0)
                elif settlement.kind == REQUEUE and not settlement.started_ms:
                    settlement = settlement._replace(started_ms=held.started_ms)  # interrupted
            message = held.message
            if message is not None and message.headers and is_step(message, settlement):
                step = step_of(message, settlement)
                if step is not None:  # recorded in its workflow before it is written
                    self.flusher.add_after(settlement, step)
                    return
            self.flusher.add(settlement)
            if self._forced or self._stopping.is_set():
                self._room.set()  # _drain waits for running attempts to end

    def _unwritten_starts(self) -> tuple[list[Settlement], bool]:
        """For the flusher, every START_EVENT_DELAY_S: the settlements listing in the
        running index (and with events on, without track_state, writing the "started"
        event of) each attempt running longer than that and not listed yet, and whether
        any other attempt runs unlisted (to look again)."""
        due: list[Settlement] = []
        watch = False
        limit = now_ms() - int(START_EVENT_DELAY_S * 1000)
        ttl_ms = self.registry_ttl_ms
        for held in self.inflight.in_state(HeldState.RUNNING):
            if held.start_written:
                continue
            if held.started_ms and held.started_ms <= limit:
                held.start_written = True
                due.append(outcome.started(held.delivery, held.message, held.started_ms,
                                           self.settle_options, ttl_ms))
            else:
                watch = True
        return due, watch

    def _fallback(self, settlement: Settlement, error: BaseException) -> Settlement | None:
        """What to write when Redis keeps refusing a settlement: a plain dead letter."""
        last_resort = settlement.letter is not None and \
            settlement.letter.reason == reasons.UNSETTLEABLE
        if settlement.kind == MARK_RUNNING or last_resort:
            return None
        held = self.inflight.get(settlement.delivery.key)
        message = held.message if held is not None else None
        return outcome.unsettleable(settlement.delivery, message,
                                    f"Redis refused it: {outcome.describe(error)}", now_ms(),
                                    self.settle_options)

    def _ran_here(self, key: Any) -> tuple[Settlement, Any] | None:
        """The refused settlement of an attempt of this entry that ran here, if any."""
        return self._refused.pop(key, None) if self._refused else None

    def _settled(self, settlement: Settlement, ok: bool | None) -> None:
        """Called by the flusher once a settlement is written (True), refused because the
        lease was lost (False), or given up after Redis refused it (None)."""
        if settlement.kind == MARK_RUNNING:
            return  # the delivery goes on; only its "running" record was written
        key = settlement.delivery.key
        held = self.inflight.get(key)
        self.inflight.settled(key)
        self._room.set()
        if ok is None:
            return
        if not ok:
            self.stats.lost_leases += 1
            if settlement.kind != REQUEUE and held is not None:
                self._refused[key] = (settlement, held.message)
                if len(self._refused) > REFUSED_KEPT:
                    self._refused.popitem(last=False)
            log.warning("lease lost; message may be executed again (message %r, entry %r): "
                        "its settlement was not written", settlement.message_id, key[1])
            return
        counter = _STATE_COUNTERS.get(settlement.state)
        if counter is not None:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        if settlement.failure is not None or settlement.letter is not None:
            self.hooks.call(settlement)
        self._settled_count += 1
        recycle = self.config.max_tasks and self._settled_count >= self.config.max_tasks
        if recycle and not self._stopping.is_set():
            log.info("worker %s settled %d messages (max_tasks): recycling", self.name,
                     self._settled_count)
            self.recycled = True
            self._begin_stop()


def _settle_options(client: Client, name: str) -> outcome.SettleOptions:
    return outcome.SettleOptions(client.store_results, client.track_state, name,
                                 client.max_result_size, client.max_message_size,
                                 events=bool(client.broker.events_maxlen))


@functools.cache
def _version() -> str:
    try:
        return importlib.metadata.version("blitzq-django")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def resident_mb() -> float:
    """Current resident set size of this process in MiB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        # lazy: cost (only where /proc is missing)
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


__all__ = ["Stats", "Worker", "resident_mb"]
