"""Client: the producer facade (enqueue, get_result, inspect) and the task factory."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from .brokers.base import Broker, Enqueue
from .context import inherited_headers
from .core import limits
from .core import record as states
from .core.deadletter import DeadLetter
from .core.message import DEFAULT_MAX_MESSAGE_SIZE, decode, encode_fields
from .core.names import check_name
from .core.record import DEFAULT_MAX_RESULT_SIZE, Record
from .core.registry import Purged, QueueStats, WorkerInfo
from .core.task import DEFAULT_QUEUE, TaskRegistry, TaskSpec
from .core.validate import POLICY_OPTIONS, check, check_eta, eta_ms
from .errors import ConfigurationError, MessageDecodeError, QueueBusy, ResultTimeout

if TYPE_CHECKING:
    from .dead_letters import DeadLetters

P = ParamSpec("P")
R = TypeVar("R")

MAX_BATCH = 1000  # messages per round trip in enqueue_many


def now_ms() -> int:
    return int(time.time() * 1000)


def new_id() -> str:
    """A random 128-bit message id in hex (like uuid4().hex, at a third of the cost)."""
    return os.urandom(16).hex()


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
    ) -> None:
        limits.check("max_result_size", max_result_size)  # an int from 1 KiB to 512 MiB
        self.broker = broker
        self.registry = registry if registry is not None else TaskRegistry()
        self.store_results = store_results
        self.track_state = track_state
        self.max_message_size = max_message_size
        self.max_result_size = max_result_size
        self.default_queue = check_name("queue", default_queue)

    # -- defining tasks ------------------------------------------------------

    def task(self, func: Callable[P, R] | None = None, **options: Any) -> Any:
        """Decorator: register ``func`` as a task bound to this client."""

        def wrap(f: Callable[P, R]) -> Task[P, R]:
            options.setdefault("queue", self.default_queue)
            spec = self.registry.add(TaskSpec.build(f, **options))
            return Task(spec, lambda: self)

        return wrap(func) if func is not None else wrap

    # -- enqueue -------------------------------------------------------------

    def build(self, spec: TaskSpec, args: Sequence[Any], kwargs: dict[str, Any],
              call: CallOptions | None = None) -> Enqueue:
        """Encode one call (the whole message is checked here, at enqueue time)."""
        call = call or _NO_OPTIONS
        created = now_ms()
        eta_ms = call.due_ms(created)
        message_id = call.task_id or new_id()
        queue = call.queue or spec.queue
        payload = encode_fields(message_id, spec.name, queue, args, kwargs, 1, created, eta_ms,
                                call.timeout, call.idempotency_key,
                                inherited_headers(call.headers), call.policy(),
                                self.max_message_size)
        record = b""
        if self.track_state:
            state = states.SCHEDULED if eta_ms else states.QUEUED
            record = Record(id=message_id, task=spec.name, queue=queue, state=state,
                            created_ms=created).to_bytes()
        return Enqueue(queue, message_id, payload, eta_ms or 0, record, call.idempotency_key)

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
        """Enqueue many messages, at most MAX_BATCH per round trip.

        Every message is encoded (and checked) before the first one is written.
        """
        built = [self.build(spec, a, k, call) for a, k in calls]
        handles: list[TaskHandle] = []
        for start in range(0, len(built), MAX_BATCH):
            chunk = built[start:start + MAX_BATCH]
            ids = self.broker.enqueue(chunk)
            handles += [TaskHandle(i, e.queue, self) for i, e in zip(ids, chunk, strict=True)]
        return handles

    async def aenqueue_many(self, spec: TaskSpec,
                            calls: Iterable[tuple[Sequence[Any], dict[str, Any]]],
                            call: CallOptions | None = None) -> list[TaskHandle]:
        built = [self.build(spec, a, k, call) for a, k in calls]
        handles: list[TaskHandle] = []
        for start in range(0, len(built), MAX_BATCH):
            chunk = built[start:start + MAX_BATCH]
            ids = await self.broker.aenqueue(chunk)
            handles += [TaskHandle(i, e.queue, self) for i, e in zip(ids, chunk, strict=True)]
        return handles

    @property
    def dead_letters(self) -> DeadLetters:
        """List, replay and purge dead letters (sync and async methods)."""
        from .dead_letters import DeadLetters

        return DeadLetters(self)

    # -- results and state ---------------------------------------------------

    def get_result(self, message_id: str, timeout: float = 0.0, *,
                   queue: str | None = None) -> Record:
        """The final record, waiting up to ``timeout`` seconds for it."""
        queue = queue or self.default_queue
        record = self.broker.wait_record(queue, message_id, timeout)
        if record is None or not record.is_final:
            raise ResultTimeout(f"no final record for {message_id!r} within {timeout} s")
        return record

    async def aget_result(self, message_id: str, timeout: float = 0.0, *,
                          queue: str | None = None) -> Record:
        queue = queue or self.default_queue
        record = await self.broker.await_record(queue, message_id, timeout)
        if record is None or not record.is_final:
            raise ResultTimeout(f"no final record for {message_id!r} within {timeout} s")
        return record

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
            if queue not in self.registry.queues() | {self.default_queue}:
                raise ConfigurationError(f"queue {queue!r} does not exist (it holds nothing "
                                         "and no task uses it)")
            counts = {**counts, "ready": 0}
        if counts["ready"] == -1:
            raise QueueBusy(f"queue {queue!r} has {counts['in_flight']} messages in flight "
                            "(held by workers); purge with force=True to drop the rest anyway")
        return Purged(queue=queue, **counts)

    def workers(self) -> list[WorkerInfo]:
        """The live workers of this namespace, as of their last heartbeat: one Redis call."""
        return _infos(self.broker.workers(now_ms()))

    async def aworkers(self) -> list[WorkerInfo]:
        return _infos(await self.broker.aworkers(now_ms()))

    def inspect(self, message_id: str, *, queue: str | None = None) -> Record | None:
        """What is known of a message: its record, or that it is scheduled or dead-lettered."""
        queue = queue or self.default_queue
        record = self.broker.get_record(queue, message_id)
        if record is not None:
            return record
        payload = self.broker.scheduled_payload(queue, message_id)
        if payload is not None:
            try:
                message = decode(payload)
            except MessageDecodeError:
                return Record(id=message_id, task="", queue=queue, state=states.SCHEDULED)
            return Record(id=message_id, task=message.task, queue=queue, state=states.SCHEDULED,
                          attempt=message.attempt, created_ms=message.created_ms)
        dead = self.broker.dead_letter(queue, message_id)
        if dead is not None:
            letter = DeadLetter.from_bytes(dead)
            return Record(id=message_id, task=letter.task or "", queue=queue,
                          state=states.DEAD_LETTERED, attempt=letter.attempt,
                          error_type=letter.error_type, error_message=letter.error_message,
                          traceback=letter.traceback, reason=letter.reason,
                          finished_ms=letter.dead_ms)
        return None


def _infos(blobs: Iterable[bytes]) -> list[WorkerInfo]:
    return sorted((WorkerInfo.from_bytes(b) for b in blobs), key=lambda w: w.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class CallOptions:
    """Per-call options of ``task.options(...)``; None inherits from the task."""

    queue: str | None = None
    task_id: str | None = None
    delay: float | None = None  # seconds from now
    eta: Any = None  # an aware datetime
    timeout: float | None = None
    idempotency_key: str | None = None
    headers: dict[str, Any] | None = None
    retries: int | None = None
    initial_delay: float | None = None
    max_delay: float | None = None
    factor: float | None = None
    jitter: bool | None = None

    def __post_init__(self) -> None:
        # The rules decode applies (validate.RULES), so a message is refused here, naming
        # the option, rather than written and then dead-lettered as malformed.
        if self.delay is not None and self.eta is not None:
            raise ConfigurationError("pass delay or eta, not both")
        if self.queue is not None:
            check_name("queue", self.queue)
        if self.eta is not None:
            check_eta(self.eta)  # its range depends on the time of enqueue: checked then
        for name in _CHECKED:
            value = getattr(self, name)
            if value is not None:
                check(name, value)

    def due_ms(self, now: int) -> int | None:
        if self.delay:
            return now + int(self.delay * 1000)
        if self.eta is not None:
            return eta_ms(self.eta, now)
        return None

    def policy(self) -> dict[str, Any] | None:
        out = {f: getattr(self, f) for f in POLICY_OPTIONS if getattr(self, f) is not None}
        return out or None

    def merged(self, **changes: Any) -> CallOptions:
        return replace(self, **changes)


_CHECKED = ("task_id", "delay", "timeout", "idempotency_key", "headers", *POLICY_OPTIONS)
_NO_OPTIONS = CallOptions()


class TaskHandle:
    """What enqueue returns: the message id, its queue, and a way to its result."""

    __slots__ = ("id", "queue", "_client")

    def __init__(self, id: str, queue: str, client: Client) -> None:
        self.id = id
        self.queue = queue
        self._client = client

    def result(self, timeout: float = 0.0) -> Any:
        """Wait for the final record; return the value or raise TaskFailed."""
        return _value(self._client.get_result(self.id, timeout, queue=self.queue))

    async def aresult(self, timeout: float = 0.0) -> Any:
        return _value(await self._client.aget_result(self.id, timeout, queue=self.queue))

    def record(self, timeout: float = 0.0) -> Record:
        return self._client.get_result(self.id, timeout, queue=self.queue)

    def inspect(self) -> Record | None:
        return self._client.inspect(self.id, queue=self.queue)

    def __repr__(self) -> str:
        return f"<TaskHandle {self.id} on {self.queue!r}>"


class TaskFailed(Exception):
    """The task ended without a result: failed, dead-lettered or cancelled."""

    def __init__(self, record: Record) -> None:
        super().__init__(f"task {record.task} {record.id} {record.state}: "
                         f"{record.error_type}: {record.error_message}")
        self.record = record


def _value(record: Record) -> Any:
    if record.state != states.SUCCEEDED:
        raise TaskFailed(record)
    return record.result


class Task(Generic[P, R]):
    """A registered task: call it directly, or enqueue it for a worker."""

    def __init__(self, spec: TaskSpec, client: Callable[[], Client],
                 call: CallOptions | None = None) -> None:
        self.spec = spec
        self._client = client  # resolved lazily: Django settings may not be ready at import
        self._call = call or CallOptions()

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.spec.func(*args, **kwargs)

    @property
    def call(self) -> CallOptions:
        """The per-call options the next enqueue uses."""
        return self._call

    def options(self, **changes: Any) -> Task[P, R]:
        """A copy of this task whose enqueues use these per-call options."""
        try:
            call = self._call.merged(**changes)
        except TypeError as exc:
            raise TypeError(f"{self.spec.name}.options(): {exc}; accepted: "
                            f"{', '.join(CallOptions.__dataclass_fields__)}") from None
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.spec.name}.options(): {exc}") from None
        return self._with_call(call)

    def _with_call(self, call: CallOptions) -> Task[P, R]:
        return Task(self.spec, self._client, call)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        return self._client().enqueue(self.spec, args, kwargs, self.call)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        return await self._client().aenqueue(self.spec, args, kwargs, self.call)

    def enqueue_many(self, calls: Iterable[tuple[Sequence[Any], dict[str, Any]] | Sequence[Any]]
                     ) -> list[TaskHandle]:
        """Enqueue many calls (each an args tuple, or an (args, kwargs) pair), at most
        1,000 per round trip."""
        return self._client().enqueue_many(self.spec, _calls(calls), self.call)

    async def aenqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle]:
        return await self._client().aenqueue_many(self.spec, _calls(calls), self.call)

    def __repr__(self) -> str:
        return f"<Task {self.spec.name}>"


def _calls(calls: Iterable[Any]) -> list[tuple[Sequence[Any], dict[str, Any]]]:
    out = []
    for c in calls:
        pair = isinstance(c, tuple) and len(c) == 2
        if pair and isinstance(c[0], list | tuple) and isinstance(c[1], dict):
            out.append((c[0], c[1]))
        else:
            out.append((tuple(c), {}))
    return out
