"""What a registered task is to its callers: ``Task`` (call it, or enqueue it), the
per-call ``CallOptions`` of ``task.options(...)``, and the ``TaskHandle`` an enqueue
returns (its result, record, progress, cancel).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from ..core import record as states
from ..core.names import check_name
from ..core.record import Record
from ..core.registry import Cancellation
from ..core.suggest import did_you_mean
from ..core.task import TaskSpec
from ..core.validate import POLICY_OPTIONS, check, check_eta, check_expires, eta_ms, priority_lane
from ..errors import ConfigurationError, TaskCancelled, TaskExpired, TaskFailed
from .workflows import Signature

if TYPE_CHECKING:
    from ..progress import Progress
    from .client import Client

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True, kw_only=True)
class CallOptions:
    """Per-call options of ``task.options(...)``: each applies to the enqueues of the
    copy it returns; ``None`` (every default) inherits from the task. Checked when
    ``options()`` is called: a bad value raises ConfigurationError naming the option.

    Attributes:
        queue (str | None): The queue, before ``BLITZQ["ROUTES"]`` and the task's own.
        task_id (str | None): The message id (1 to 200 characters), instead of a random
            one; while a message of that id is unfinished, another enqueue of it adds
            nothing and returns its handle.
        delay (float | None): Seconds from now before it may run (not with ``eta``).
        eta (datetime | None): When it may run, an aware datetime (not with ``delay``).
        timeout (float | None): Seconds an attempt may run, instead of the task's.
        idempotency_key (str | None): A second enqueue with this key within
            ``IDEMPOTENCY_TTL`` adds nothing and returns the first message's handle,
            even after it ran.
        headers (dict | None): Headers the message carries (``current_task().headers``)
            and the tasks it enqueues inherit.
        retries (int | None): Retries of this message, instead of the task's.
        initial_delay (float | None): Its first retry's wait, in seconds.
        max_delay (float | None): Its longest retry wait, in seconds.
        factor (float | None): Its backoff factor.
        jitter (bool | None): Whether its retry waits are randomised.
        expires (float | timedelta | datetime | None): Not started by then, it is
            dropped as expired (seconds from enqueue, a timedelta, an aware datetime).
        priority (str | None): ``"high"``, ``"normal"`` or ``"low"``.
        unique (bool | None): At most one unfinished message of these arguments.

    In a Django project, ``options()`` also takes ``using`` (the database alias whose
    transaction ``enqueue_on_commit`` waits for) and ``durable`` (``True`` or an outbox
    name: the message is written to the outbox table in the caller's transaction).
    """

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
    expires: Any = None  # seconds, a timedelta or an aware datetime
    priority: str | None = None  # "high", "normal" or "low"
    unique: bool | None = None

    def __post_init__(self) -> None:
        # The rules decode applies (validate.RULES), so a message is refused here, naming
        # the option, rather than written and then dead-lettered as malformed.
        if self.delay is not None and self.eta is not None:
            raise ConfigurationError("pass delay or eta, not both")
        if self.queue is not None:
            check_name("queue", self.queue)
        if self.eta is not None:
            check_eta(self.eta)  # its range depends on the time of enqueue: checked then
        if self.expires is not None:
            check_expires(self.expires)
        if self.priority is not None:
            priority_lane(self.priority)
        if self.unique is not None and not isinstance(self.unique, bool):
            raise ConfigurationError(f"unique must be True or False, got {self.unique!r}")
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
#: The options of a call that gives none (the task's own apply).
NO_OPTIONS = CallOptions()


class TaskHandle(Generic[R]):
    """What enqueue returns: the message id, its queue, and a way to its result.

    ``R`` is the task's return type, for type checkers only (``Task[P, R].enqueue`` gives a
    ``TaskHandle[R]``): handles are built unparameterized, at no cost."""

    __slots__ = ("id", "queue", "_client")

    def __init__(self, id: str, queue: str, client: Client) -> None:
        self.id = id
        self.queue = queue
        self._client = client

    def result(self, timeout: float = 0.0) -> R:
        """Wait for the final record; return the value or raise TaskFailed."""
        return value_of(self._client.get_result(self.id, timeout, queue=self.queue))

    async def aresult(self, timeout: float = 0.0) -> R:
        return value_of(await self._client.aget_result(self.id, timeout, queue=self.queue))

    def record(self, timeout: float = 0.0) -> Record:
        """The final record, whatever its state (result() raises for failures)."""
        return self._client.final_record(self.id, timeout, queue=self.queue)

    async def arecord(self, timeout: float = 0.0) -> Record:
        return await self._client.afinal_record(self.id, timeout, queue=self.queue)

    def inspect(self) -> Record | None:
        """What is known of this message now (Client.inspect)."""
        return self._client.inspect(self.id, queue=self.queue)

    async def ainspect(self) -> Record | None:
        return await self._client.ainspect(self.id, queue=self.queue)

    def progress(self) -> Progress | None:
        """The latest progress this task reported, or None (docs/progress.md)."""
        return self._client.progress(self.id, queue=self.queue)

    async def aprogress(self) -> Progress | None:
        return await self._client.aprogress(self.id, queue=self.queue)

    def cancel(self) -> Cancellation:
        """Cancel this message: see Client.cancel."""
        return self._client.cancel(self.id, queue=self.queue)

    async def acancel(self) -> Cancellation:
        return await self._client.acancel(self.id, queue=self.queue)

    def __repr__(self) -> str:
        return f"<TaskHandle {self.id} on {self.queue!r}>"


#: The errors of the final states in which a message never ran to an outcome.
WITHDRAWN = {states.CANCELLED: TaskCancelled, states.EXPIRED: TaskExpired}


def not_withdrawn(record: Record) -> Record:
    """``record``, unless it says the message never ran to an outcome: then its error."""
    if record.state in WITHDRAWN:
        raise WITHDRAWN[record.state](record)
    return record


def value_of(record: Record) -> Any:
    """The result a final record holds, or the error it stands for."""
    if record.state != states.SUCCEEDED:
        raise WITHDRAWN.get(record.state, TaskFailed)(record)
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
            unknown = min(set(changes) - set(CallOptions.__dataclass_fields__), default="")
            raise TypeError(f"{self.spec.name}.options(): {exc}."
                            f"{did_you_mean(unknown, CallOptions.__dataclass_fields__)} "
                            f"Accepted: {', '.join(CallOptions.__dataclass_fields__)}") from None
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.spec.name}.options(): {exc}") from None
        return self._with_call(call)

    def _with_call(self, call: CallOptions) -> Task[P, R]:
        return Task(self.spec, self._client, call)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        return self._client().enqueue(self.spec, args, kwargs, self.call)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step (docs/workflows.md): this task with these arguments, the
        previous step's result prepended to them."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable workflow step: run with exactly these arguments."""
        return Signature(self, args, kwargs, immutable=True)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        return await self._client().aenqueue(self.spec, args, kwargs, self.call)

    def enqueue_many(self, calls: Iterable[tuple[Sequence[Any], dict[str, Any]] | Sequence[Any]]
                     ) -> list[TaskHandle[R]]:
        """Enqueue many calls (each an args tuple, or an (args, kwargs) pair), at most
        1,000 per round trip."""
        return self._client().enqueue_many(self.spec, _calls(calls), self.call)

    async def aenqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle[R]]:
        return await self._client().aenqueue_many(self.spec, _calls(calls), self.call)

    def __repr__(self) -> str:
        return f"<Task {self.spec.name}>"


def _calls(calls: Iterable[Any]) -> list[tuple[Sequence[Any], dict[str, Any]]]:
    out: list[tuple[Sequence[Any], dict[str, Any]]] = []
    for c in calls:
        pair = isinstance(c, tuple) and len(c) == 2
        if pair and isinstance(c[0], list | tuple) and isinstance(c[1], dict):
            out.append((c[0], c[1]))
        else:
            out.append((tuple(c), {}))
    return out
