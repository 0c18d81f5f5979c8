"""Client: the producer façade. It builds messages and hands them to the broker, and
composes the producer services (dead letters, inspection, schedules, progress), giving
each the collaborators it uses."""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from .. import progress
from ..brokers.base import Broker, Enqueue, ScheduledCancel
from ..core import limits
from ..core import record as states
from ..core.events import Event
from ..core.ids import new_id, now_ms
from ..core.message import DEFAULT_MAX_MESSAGE_SIZE, decode, encode_fields, pack
from ..core.names import check_name
from ..core.rates import Rate, RateLimits, rate_limits_map
from ..core.record import DEFAULT_MAX_RESULT_SIZE, Record
from ..core.registry import Cancellation, Purged, QueueStats, WorkerInfo
from ..core.task import DEFAULT_QUEUE, TaskRegistry, TaskSpec
from ..core.validate import check, expiry_ms, priority_lane
from ..errors import ConfigurationError, MessageDecodeError, QueueBusy, ResultTimeout
from . import handles, inspection, schedules
from .context import inherited_headers
from .dead_letters import DeadLetters
from .schedules import ScheduleRegistry
from .task import NO_OPTIONS, CallOptions, Task, TaskHandle, not_withdrawn
from .workflows import Launcher, Workflows

if TYPE_CHECKING:
    from ..core.running import Running
    from ..core.schedules import Schedule
    from ..progress import Progress
    from ..tracing import Tracing
    from .inspection import Absence
    from .schedules import ScheduleInfo

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger("blitzq")


class Client:
    """Builds messages and hands them to a broker. Safe to share between threads."""

    def __init__(
        self,
        broker: Broker,
        registry: TaskRegistry | None = None,
        *,
        store_results: bool = True,
        track_state: bool = False,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        default_queue: str = DEFAULT_QUEUE,
        max_result_size: int = DEFAULT_MAX_RESULT_SIZE,
        routes: Mapping[str, str] | None = None,
        rate_limits: RateLimits | None = None,
        schedules: ScheduleRegistry | None = None,
        queue_check: Callable[[str], None] | None = None,
    ) -> None:
        limits.check("max_result_size", max_result_size)  # an int from 1 KiB to 512 MiB
        #: periodic schedules declared in code (@client.periodic; docs/scheduling.md)
        self.schedule_registry = schedules if schedules is not None else ScheduleRegistry()
        #: More places schedules come from (anything with ``load()``, e.g. a database
        #: table), listed by ``schedules()`` beside the registry's.
        self.schedule_sources: list[Any] = []
        #: bucket name -> Rate, for tasks with a rate_key (docs/rate-limits.md)
        self.rate_limits: dict[str, Rate] = rate_limits_map(rate_limits)
        self.broker = broker
        self.registry = registry if registry is not None else TaskRegistry()
        self.store_results = store_results
        self.track_state = track_state
        self.max_message_size = max_message_size
        self.max_result_size = max_result_size
        self.default_queue = check_name("queue", default_queue)
        #: task name glob -> queue, first match wins; see route()
        self.routes = check_routes(routes or {})
        self._routed: dict[str, str | None] = {}
        #: OpenTelemetry spans (engine/tracing.py instrument()); None: off, at no cost
        self.tracing: Tracing | None = None
        #: Called with a queue the first time this client builds a message for it: it
        #: raises (ConfigurationError) to refuse the queue, or warns, or returns (the
        #: queue is then accepted for this client's life). None: every queue is accepted.
        #: The Django glue refuses a queue no default worker serves (blitzq_django/queues.py).
        self.queue_check = queue_check
        self._checked_queues: set[str] = set()
        #: chains, groups and chords: enqueue, inspect, cancel (docs/workflows.md)
        self.workflows = Workflows(
            broker=broker, build=self.build,
            launcher=Launcher(max_message_size, track_state),
            cancel=self.cancel, acancel=self.acancel, records=broker.records,
            arecords=broker.arecords)

    # -- defining tasks ------------------------------------------------------

    def task(self, func: Callable[P, R] | None = None, **options: Any) -> Any:
        """Decorator: register ``func`` as a task bound to this client.

        ``executor="process"`` runs a `def` task in the worker's pool of child processes
        (CPU-bound code; engine/worker/processes.py) instead of its thread pool: only a
        function defined at the top level of an importable module (ConfigurationError
        otherwise, here)."""

        def wrap(f: Callable[P, R]) -> Task[P, R]:
            options.setdefault("queue", self.default_queue)
            spec = self.registry.add(TaskSpec.build(f, **options))
            return Task(spec, lambda: self)

        return wrap(func) if func is not None else wrap

    def periodic(self, schedule: Any = None, **options: Any) -> Any:
        """Decorator: a task that also runs on a schedule (docs/scheduling.md), e.g.
        ``@client.periodic("0 3 * * *", tz="Europe/Berlin")`` or ``(every=60)``."""
        return schedules.periodic_decorator(self.task, self.schedule_registry, schedule,
                                            **options)

    def schedules(self) -> list[ScheduleInfo]:
        """Each schedule of the registry and of ``schedule_sources``: its last run, next
        run, last message and its outcome (ScheduleInfo, client/schedules.py). A few Redis
        reads, and one load of each source."""
        loaded = []
        for source in self.schedule_sources:
            try:
                loaded += source.load()
            except Exception as exc:  # noqa: BLE001 - the others are still worth listing
                log.warning("schedules of %r left out: cannot load them: %s", source, exc)
        return self.schedule_infos([*self.schedule_registry, *loaded])

    def schedule_infos(self, chosen: Iterable[Schedule]) -> list[ScheduleInfo]:
        """What is known of each of these schedules (``schedules()`` for all of them)."""
        return schedules.infos(chosen, broker=self.broker, registry=self.registry,
                               route=self.route, default_queue=self.default_queue)

    def notify_schedules_changed(self) -> int:
        """Make every running scheduler read its schedule sources again (within 2 s)."""
        return schedules.notify_changed(self.broker)

    # -- routing ---------------------------------------------------------------

    def route(self, task: str) -> str | None:
        """The queue ``routes`` send ``task`` to, or None. Precedence of a message's queue:
        the call's ``queue=``, then ``routes``, then the task's own ``queue=``, then the
        default queue."""
        try:
            return self._routed[task]
        except KeyError:
            queue = next((q for pattern, q in self.routes.items()
                          if fnmatch.fnmatchcase(task, pattern)), None)
            self._routed[task] = queue
            return queue

    def known_queues(self) -> set[str]:
        """Every queue a task of the registry goes to (routes included), and the default."""
        return ({self.route(spec.name) or spec.queue for spec in self.registry}
                | {self.default_queue})

    def check_queue(self, queue: str) -> str:
        """``queue``, once ``queue_check`` accepted it (it raises otherwise)."""
        if queue not in self._checked_queues:
            if self.queue_check is not None:
                self.queue_check(queue)
            self._checked_queues.add(queue)
        return queue

    def seen_queues(self) -> list[str]:
        """Every queue a message was ever written to in this namespace, sorted (Redis keeps
        the set: one call). A default ``runworker`` serves them all."""
        return self.broker.seen_queues()

    async def aseen_queues(self) -> list[str]:
        return await self.broker.aseen_queues()

    def idempotency_holder(self, queue: str, key: str) -> str | None:
        """The id of the message holding idempotency key ``key`` on ``queue`` now, or None
        (the one that runs: an enqueue under that key adds nothing)."""
        return self.broker.idempotency_holder(queue, key)

    async def aidempotency_holder(self, queue: str, key: str) -> str | None:
        return await self.broker.aidempotency_holder(queue, key)

    def forget_queue(self, queue: str) -> None:
        """Take ``queue`` off the seen queues (a typo that was enqueued to, now purged).
        Refused (QueueBusy) while it holds messages or dead letters."""
        stats = self.queue_stats(check_name("queue", queue))
        held = stats.ready + stats.in_flight + stats.scheduled + stats.dead_letters
        if held:
            raise QueueBusy(f"queue {queue!r} still holds {held} messages or dead letters: "
                            "purge it first (blitzq purge --dead-letters)")
        self.broker.forget_queue(queue)

    # -- enqueue -------------------------------------------------------------

    def build(self, spec: TaskSpec, args: Sequence[Any], kwargs: dict[str, Any],
              call: CallOptions | None = None) -> Enqueue:
        """Encode one call (the whole message is checked here, at enqueue time)."""
        call = call or NO_OPTIONS
        return self._encode(spec, args, kwargs, call, call.task_id or new_id(),
                            self._shared(spec, call))

    def build_many(self, spec: TaskSpec, calls: Sequence[tuple[Sequence[Any], dict[str, Any]]],
                   call: CallOptions | None = None) -> list[Enqueue]:
        """build() for many calls of one task with the same options: what they share is
        worked out once, and their ids come from one read of the random source."""
        call = call or NO_OPTIONS
        shared = self._shared(spec, call)
        if call.task_id:
            ids = [call.task_id] * len(calls)
        else:
            random = os.urandom(16 * len(calls)).hex()
            ids = [random[n:n + 32] for n in range(0, 32 * len(calls), 32)]
        encode = self._encode
        return [encode(spec, args, kwargs, call, message_id, shared)
                for (args, kwargs), message_id in zip(calls, ids, strict=True)]

    def _shared(self, spec: TaskSpec, call: CallOptions) -> tuple[Any, ...]:
        """What every message of one call shares: queue, expiry, lane, uniqueness, retry
        policy, headers."""
        queue = call.queue or (self.route(spec.name) if self.routes else None) or spec.queue
        if queue not in self._checked_queues:
            self.check_queue(queue)
        return (queue,
                spec.expires if call.expires is None else call.expires,
                spec.priority if call.priority is None else priority_lane(call.priority),
                spec.unique if call.unique is None else call.unique,
                call.policy(), inherited_headers(call.headers))

    def _encode(self, spec: TaskSpec, args: Sequence[Any], kwargs: dict[str, Any],
                call: CallOptions, message_id: str, shared: tuple[Any, ...]) -> Enqueue:
        if kwargs or len(args) not in spec.arities:  # not the usual call: bound as calling
            bind(spec, args, kwargs)                 # the function would (core/binding.py)
        queue, expires, priority, unique, policy, headers = shared
        if self.tracing is not None:  # the message's own span, its context in the headers
            headers = self.tracing.created(spec.name, queue, message_id, headers)
        created = now_ms()
        eta_ms = call.due_ms(created)
        held = (unique_key(spec.name, args, kwargs) if unique
                else f"id:{call.task_id}" if call.task_id else None)
        payload = encode_fields(message_id, spec.name, queue, args, kwargs, 1, created, eta_ms,
                                call.timeout, call.idempotency_key, headers, policy,
                                self.max_message_size,
                                expires_ms=None if expires is None else expiry_ms(
                                    expires, created, f"task {spec.name!r}: "),
                                priority=priority, unique_key=held)
        record = b""
        if self.track_state:
            state = states.SCHEDULED if eta_ms else states.QUEUED
            record = Record(id=message_id, task=spec.name, queue=queue, state=state,
                            created_ms=created).to_bytes()
        return Enqueue(queue, message_id, payload, eta_ms or 0, record, call.idempotency_key,
                       priority=priority, unique_key=held, task=spec.name)

    def enqueue(self, spec: TaskSpec, args: Sequence[Any] = (),
                kwargs: dict[str, Any] | None = None,
                call: CallOptions | None = None) -> TaskHandle:
        item = self.build(spec, args, kwargs or {}, call)
        (message_id,) = self.broker.enqueue([item])
        return TaskHandle(message_id, item.queue, self)

    async def aenqueue(self, spec: TaskSpec, args: Sequence[Any] = (),
                       kwargs: dict[str, Any] | None = None,
                       call: CallOptions | None = None) -> TaskHandle:
        item = self.build(spec, args, kwargs or {}, call)
        (message_id,) = await self.broker.aenqueue([item])
        return TaskHandle(message_id, item.queue, self)

    def enqueue_many(self, spec: TaskSpec, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]],
                     call: CallOptions | None = None) -> list[TaskHandle]:
        """Enqueue many messages (on Redis: 1,000 per script call, each call sent while
        Redis runs the previous one).

        Every message is encoded (and checked) before the first one is written.
        """
        built = self.build_many(spec, list(calls), call)
        if not built:
            return []
        ids = self.broker.enqueue(built)
        return [TaskHandle(i, e.queue, self) for i, e in zip(ids, built, strict=True)]

    async def aenqueue_many(self, spec: TaskSpec,
                            calls: Iterable[tuple[Sequence[Any], dict[str, Any]]],
                            call: CallOptions | None = None) -> list[TaskHandle]:
        built = self.build_many(spec, list(calls), call)
        if not built:
            return []
        ids = await self.broker.aenqueue(built)
        return [TaskHandle(i, e.queue, self) for i, e in zip(ids, built, strict=True)]

    @property
    def dead_letters(self) -> DeadLetters:
        """List, replay and purge dead letters (sync and async methods)."""
        return DeadLetters(broker=self.broker, registry=self.registry,
                           default_queue=self.default_queue)

    # -- results and state ---------------------------------------------------

    def get_result(self, message_id: str, timeout: float = 0.0, *,
                   queue: str | None = None) -> Record:
        """The final record, waiting up to ``timeout`` seconds for it. A message that never
        ran to an outcome raises: TaskCancelled (cancelled) or TaskExpired (expired before
        it started); a failure's record is returned, it holds the error. ``final_record()``
        returns the record whatever its state."""
        return not_withdrawn(self.final_record(message_id, timeout, queue=queue))

    async def aget_result(self, message_id: str, timeout: float = 0.0, *,
                          queue: str | None = None) -> Record:
        return not_withdrawn(await self.afinal_record(message_id, timeout, queue=queue))

    def final_record(self, message_id: str, timeout: float = 0.0, *,
                     queue: str | None = None) -> Record:
        """The final record, whatever its state, waiting up to ``timeout`` seconds."""
        queue = queue or self.default_queue
        return _final(self.broker.wait_record(queue, message_id, timeout), message_id, timeout)

    async def afinal_record(self, message_id: str, timeout: float = 0.0, *,
                            queue: str | None = None) -> Record:
        queue = queue or self.default_queue
        record = await self.broker.await_record(queue, message_id, timeout)
        return _final(record, message_id, timeout)

    # -- cancellation ------------------------------------------------------------

    def cancel(self, message_id: str, *, queue: str | None = None) -> Cancellation:
        """Cancel a message (docs/cancel.md). Scheduled: removed and recorded cancelled
        (certain: ``bool(result)`` is True). Queued or running: revoked, so the worker
        that receives it records it cancelled without running it, and the one running it
        cancels an ``async def`` attempt (a ``def`` one sees ``current_task().cancelled``).
        Finished or unknown: nothing changes, and the result says so."""
        queue = self._cancel_queue(message_id, queue)
        if "." in message_id:  # maybe a workflow's step: its outcome is recorded first
            self.workflows.member_cancelled(message_id)
        outcome, state = self.broker.cancel(queue, message_id, self._scheduled_cancel,
                                            self.track_state)
        return Cancellation(message_id, queue, outcome, state)

    async def acancel(self, message_id: str, *, queue: str | None = None) -> Cancellation:
        queue = self._cancel_queue(message_id, queue)
        if "." in message_id:  # maybe a workflow's step: its outcome is recorded first
            await self.workflows.amember_cancelled(message_id)
        outcome, state = await self.broker.acancel(queue, message_id, self._scheduled_cancel,
                                                   self.track_state)
        return Cancellation(message_id, queue, outcome, state)

    def _cancel_queue(self, message_id: Any, queue: str | None) -> str:
        check("task_id", message_id, "cancel: message id: ")
        return check_name("queue", queue) if queue is not None else self.default_queue

    def _scheduled_cancel(self, body: bytes) -> ScheduledCancel:
        """The cancelled record (and unique marker) of a scheduled message being removed."""
        try:
            message = decode(body, max(self.max_message_size, len(body)))
        except MessageDecodeError:
            return ScheduledCancel()  # not a message: removed, nothing to record
        spec = self.registry.find(message.task)
        store = self.store_results if spec is None or spec.store_result is None \
            else spec.store_result
        record = b""
        if store or self.track_state:
            record = Record(id=message.id, task=message.task, queue=message.queue,
                            state=states.CANCELLED, attempt=message.attempt,
                            created_ms=message.created_ms, finished_ms=now_ms()).to_bytes()
        return ScheduledCancel(record, message.unique_key, message.task, message.attempt)

    # -- operations ------------------------------------------------------------

    def queue_stats(self, queue: str | None = None) -> QueueStats:
        """Ready, in flight, scheduled, dead letters, consumers and the age of the oldest
        ready message of one queue: one Redis call."""
        queue = queue or self.default_queue
        return QueueStats(queue=queue, **self.broker.queue_stats(queue))  # type: ignore[arg-type]

    async def aqueue_stats(self, queue: str | None = None) -> QueueStats:
        queue = queue or self.default_queue
        return QueueStats(queue=queue, **await self.broker.aqueue_stats(queue))  # type: ignore[arg-type]

    def purge(self, queue: str, *, dead_letters: bool = False, force: bool = False) -> Purged:
        """Drop the queue's ready and scheduled messages (and its dead letters when asked),
        atomically. Messages workers hold are left to finish; while there are any, the
        purge is refused with QueueBusy unless ``force``."""
        check_name("queue", queue)
        return self._purged(queue, self.broker.purge(queue, force, dead_letters))

    async def apurge(self, queue: str, *, dead_letters: bool = False,
                     force: bool = False) -> Purged:
        check_name("queue", queue)
        return self._purged(queue, await self.broker.apurge(queue, force, dead_letters))

    def _purged(self, queue: str, counts: dict[str, int]) -> Purged:
        if counts["ready"] == -2:  # no key at all: a queue nothing ever used
            if queue not in self.known_queues():
                raise ConfigurationError(f"queue {queue!r} does not exist (it holds nothing "
                                         "and no task uses it)")
            counts = {**counts, "ready": 0}
        if counts["ready"] == -1:
            raise QueueBusy(f"queue {queue!r} has {counts['in_flight']} messages in flight "
                            "(held by workers); purge with force=True to drop the rest anyway")
        return Purged(queue=queue, **counts)

    # -- events (core/events.py) -------------------------------------------------------

    def last_event_cursor(self, queue: str | None = None) -> str:
        """The cursor of the queue's newest event ("0-0" when none): pass it as ``after``
        to read only what comes next, without missing what lands between two reads."""
        return self.broker.last_event_cursor(check_name("queue", queue or self.default_queue))

    async def alast_event_cursor(self, queue: str | None = None) -> str:
        return await self.broker.alast_event_cursor(
            check_name("queue", queue or self.default_queue))

    def events(self, queue: str | None = None, *, after: str = "0", count: int = 100,
               block_ms: int | None = None) -> list[Event]:
        """The queue's events after cursor ``after`` ("0": from the oldest kept), oldest
        first, at most ``count``: one call. Pass the last one's ``cursor`` as ``after`` to
        read on. With ``block_ms``, waits up to that long while there is none; ``after="$"``
        then means only events that come after the call (without it, "$" reads nothing)."""
        return self.broker.events(*_event_read(queue or self.default_queue, after, count,
                                               block_ms))

    async def aevents(self, queue: str | None = None, *, after: str = "0", count: int = 100,
                      block_ms: int | None = None) -> list[Event]:
        return await self.broker.aevents(*_event_read(queue or self.default_queue, after,
                                                      count, block_ms))

    def read_events(self, queue: str, group: str, consumer: str, count: int = 100,
                    block_ms: int | None = None, *, pending: bool = False) -> list[Event]:
        """Events of consumer group ``group`` (created at the oldest kept event on first
        use): each is delivered to one consumer of the group and stays pending until
        ack_events(). ``pending=True`` gives again those delivered to ``consumer`` and not
        acknowledged (what a reader that crashed had in hand)."""
        queue, _after, count, block_ms = _event_read(queue, "0", count, block_ms)
        return self.broker.read_events(queue, _group_name("group", group),
                                       _group_name("consumer", consumer), count, block_ms,
                                       pending)

    async def aread_events(self, queue: str, group: str, consumer: str, count: int = 100,
                           block_ms: int | None = None, *, pending: bool = False
                           ) -> list[Event]:
        queue, _after, count, block_ms = _event_read(queue, "0", count, block_ms)
        return await self.broker.aread_events(queue, _group_name("group", group),
                                              _group_name("consumer", consumer), count,
                                              block_ms, pending)

    def ack_events(self, queue: str, group: str, cursors: Iterable[str]) -> int:
        """Acknowledge events read by ``group``; returns how many were pending."""
        return self.broker.ack_events(check_name("queue", queue), _group_name("group", group),
                                      _cursors(cursors))

    async def aack_events(self, queue: str, group: str, cursors: Iterable[str]) -> int:
        return await self.broker.aack_events(check_name("queue", queue),
                                             _group_name("group", group), _cursors(cursors))

    def workers(self) -> list[WorkerInfo]:
        """The live workers of this namespace, as of their last heartbeat: one Redis call."""
        return inspection.workers(self.broker)

    async def aworkers(self) -> list[WorkerInfo]:
        return await inspection.aworkers(self.broker)

    def progress(self, message_id: str, *, queue: str | None = None) -> Progress | None:
        """The latest progress a task reported (``current_task().progress()``), or None:
        one Redis call (docs/progress.md)."""
        return progress.read(self.broker, queue or self.default_queue, message_id)

    async def aprogress(self, message_id: str, *, queue: str | None = None
                        ) -> Progress | None:
        return await progress.aread(self.broker, queue or self.default_queue, message_id)

    def handle(self, message_id: str, *, queue: str | None = None) -> TaskHandle:
        """The handle of message ``message_id``, as enqueue returned it (Celery's
        ``AsyncResult(id)``). Without ``queue=``, the queue is the one Redis keeps the
        message's record or schedule on (client/handles.py); LookupError when that
        cannot be told."""
        message_id = handles.checked_id(message_id)
        if queue is not None:
            return TaskHandle(message_id, check_name("queue", queue), self)
        return TaskHandle(message_id, handles.find_queue(
            self.broker, message_id, default_queue=self.default_queue), self)

    async def ahandle(self, message_id: str, *, queue: str | None = None) -> TaskHandle:
        message_id = handles.checked_id(message_id)
        if queue is not None:
            return TaskHandle(message_id, check_name("queue", queue), self)
        return TaskHandle(message_id, await handles.afind_queue(
            self.broker, message_id, default_queue=self.default_queue), self)

    def inspect(self, message_id: str, *, queue: str | None = None) -> Record | None:
        """What is known of a message now, or None: its final record; ``scheduled`` (or
        ``retrying``) with its due time (``due_ms``); ``running`` with its worker and
        start, whatever TRACK_STATE says, once the attempt has run 0.1 s (the running
        index: docs/control.md); ``dead_lettered``; else its record, if TRACK_STATE (or
        the django.tasks backend) wrote one. One to four round trips
        (engine/client/inspection.py); ``explain_missing()`` says why when it is None."""
        return inspection.inspect(self.broker, message_id, queue or self.default_queue)

    async def ainspect(self, message_id: str, *, queue: str | None = None) -> Record | None:
        return await inspection.ainspect(self.broker, message_id, queue or self.default_queue)

    def running(self, queues: Iterable[str] | None = None, *,
                workers: Iterable[WorkerInfo] | None = None) -> list[Running]:
        """Every attempt running now that has run 0.1 s, as the live workers list them
        (the running index: docs/control.md), oldest first: in ``queues`` when given.
        Two round trips, one when given ``workers`` (``workers()``, already read)."""
        return inspection.running(self.broker, queues, workers)

    async def arunning(self, queues: Iterable[str] | None = None, *,
                       workers: Iterable[WorkerInfo] | None = None) -> list[Running]:
        return await inspection.arunning(self.broker, queues, workers)

    def explain_missing(self, message_id: str, *, queue: str | None = None,
                        task: str | None = None, state: str | None = None,
                        finished_ms: int | None = None) -> Absence:
        """Why ``inspect()`` finds nothing, as far as Redis can tell: still in the queue,
        the queue too long to tell, never stored, expired, lost, gone or unknown
        (engine/client/inspection.py). What else knows of the message helps: its ``task``, its
        last known ``state`` and when it finished (a history row)."""
        return inspection.explain_missing(message_id, queue or self.default_queue,
                                          **self._stored(), task=task, state=state,
                                          finished_ms=finished_ms)

    async def aexplain_missing(self, message_id: str, *, queue: str | None = None,
                               task: str | None = None, state: str | None = None,
                               finished_ms: int | None = None) -> Absence:
        return await inspection.aexplain_missing(message_id, queue or self.default_queue,
                                                 **self._stored(), task=task, state=state,
                                                 finished_ms=finished_ms)

    def _stored(self) -> dict[str, Any]:
        """What inspection needs to tell whether an outcome was stored."""
        return {"broker": self.broker, "registry": self.registry,
                "store_results": self.store_results, "track_state": self.track_state}


def check_routes(routes: Any) -> dict[str, str]:
    """A ``routes`` mapping: task name globs (strings) to valid queue names."""
    if not isinstance(routes, Mapping):
        raise ConfigurationError(f"routes must be a dict of task name glob -> queue, "
                                 f"got {routes!r:.80}")
    for pattern, queue in routes.items():
        if not isinstance(pattern, str) or not pattern:
            raise ConfigurationError(f"routes: a key must be a task name glob, got {pattern!r}")
        check_name("queue", queue)
    return dict(routes)


_CURSOR = re.compile(r"\d{1,20}(-\d{1,20})?")


def _event_read(queue: str, after: str, count: int, block_ms: int | None
                ) -> tuple[str, str, int, int | None]:
    check_name("queue", queue)
    if not (after == "$" or (isinstance(after, str) and _CURSOR.fullmatch(after))):
        raise ConfigurationError(f"after must be an event cursor (\"0\", \"$\" or an "
                                 f"event's cursor, like \"1700000000000-0\"), got {after!r:.60}")
    limits.check("event_count", count, "count")
    if block_ms is not None:
        limits.check("event_block_ms", block_ms, "block_ms")
    return queue, after, count, block_ms


def _group_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not name or len(name) > 200 or not name.isprintable() \
            or " " in name:
        raise ConfigurationError(f"{what} must be a name of 1 to 200 printable characters "
                                 f"without spaces, got {name!r:.60}")
    return name


def _cursors(cursors: Iterable[str]) -> list[str]:
    out = [cursors] if isinstance(cursors, str) else list(cursors)
    bad = [c for c in out if not (isinstance(c, str) and _CURSOR.fullmatch(c))]
    if bad:
        raise ConfigurationError(f"not an event cursor: {bad[0]!r:.60}")
    return out


def bind(spec: TaskSpec, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Raise TypeError, naming the task, if ``spec``'s function could not be called with
    these arguments (core/binding.py)."""
    if spec.arguments is None:
        return  # it takes anything
    try:
        spec.arguments.stub(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{exc} (task {spec.name!r}: its arguments are checked at "
                        "enqueue)") from None


def unique_key(task: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """The key ``unique=True`` holds: the task and its arguments (keyword order aside)."""
    digest = hashlib.blake2b(pack([task, list(args), sorted(kwargs.items())]), digest_size=16)
    return f"args:{digest.hexdigest()}"


def _final(record: Record | None, message_id: str, timeout: float) -> Record:
    if record is None or not record.is_final:
        raise ResultTimeout(f"no final record for {message_id!r} within {timeout} s")
    return record
