"""Test helpers: record what your code enqueues, run it eagerly or drain it with a worker.

Nothing here needs pytest: ``Blitzq`` is a context manager, ``BlitzqTestMixin`` a mixin
for ``django.test.TestCase``; the pytest fixtures ``blitzq`` and ``blitzq_eager``
(blitzq_django.pytest_plugin, loaded by installing the package) wrap ``Blitzq``.

While a ``Blitzq`` is active, every client the process builds (``get_client()``,
``task.enqueue()``, ``enqueue_on_commit``) sends to one in-memory broker, whatever
``BLITZQ["BROKER"]`` says; the other settings (ROUTES, DEFAULT_QUEUE, RATE_LIMITS ...)
still apply, and a settings change in the test keeps the same broker. Nothing reaches
Redis. Two ways to run what was enqueued:

- ``drain()``: a real engine ``Worker`` in burst mode over the memory broker (one task
  at a time, on one thread sharing the test's database connections, so it sees the
  test's uncommitted rows), until the queues are empty: tasks those tasks enqueue run
  too, retries and delayed messages run at once (the clock "jumps"), records and
  failure hooks are written as in production;
- eager mode (``Blitzq(eager=True)``, the ``blitzq_eager`` fixture): each enqueue runs
  the task at once in the caller, retries included (without their delays); the handle's
  ``result()`` holds the outcome, and a failure is raised from ``enqueue()`` itself
  unless ``propagate=False`` (then ``result()`` raises TaskFailed).

See docs/django.md, "Testing your tasks".
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import conf
from .engine import MemoryBroker, Record, TaskHandle, Worker
from .engine.brokers.base import Enqueue
from .engine.client.context import TaskContext, _current
from .engine.core import deadletter as reasons
from .engine.core import record as states
from .engine.core.deadletter import DeadLetter
from .engine.core.message import Message, decode, encode, pack, unpack
from .engine.core.record import encode_success
from .engine.errors import TaskNotRegistered

__all__ = ["Blitzq", "BlitzqTestMixin", "DrainResult", "EnqueuedTask", "TestBroker"]

log = logging.getLogger("blitzq")

_FAR_FUTURE_MS = 1 << 62  # "now" for promotion while draining: every scheduled message is due
_EAGER_WORKER = "eager"


# -- what was enqueued -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnqueuedTask:
    """One enqueued message, decoded: what a worker would receive."""

    id: str
    task: str
    queue: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: everything else: eta_ms, expires_ms, timeout, headers, idempotency_key, priority,
    #: policy (per-call retry overrides), unique_key
    message: Message = field(repr=False)

    @property
    def eta(self) -> dt.datetime | None:
        """When it may run first (delay= / eta=), as an aware UTC datetime, or None."""
        ms = self.message.eta_ms
        return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)

    @property
    def options(self) -> dict[str, Any]:
        """The per-call options that differ from the defaults (queue aside)."""
        m = self.message
        found = {"eta": self.eta, "timeout": m.timeout, "idempotency_key": m.idempotency_key,
                 "priority": m.priority, "expires_ms": m.expires_ms,
                 "unique": m.unique_key is not None and m.unique_key.startswith("args:"),
                 "headers": m.headers, **(m.policy or {})}
        return {k: v for k, v in found.items() if v not in (None, False, {})}

    @property
    def handle(self) -> TaskHandle:
        """A handle on this message (its ``result()`` once it ran)."""
        return TaskHandle(self.id, self.queue, conf.get_client())

    def matches(self, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
        """Whether it was enqueued with these arguments (compared as they travel: a
        tuple equals a list)."""
        return (list(self.args) == _as_sent(list(args))
                and self.kwargs == _as_sent(dict(kwargs)))


def _as_sent(value: Any) -> Any:
    """``value`` as a worker receives it (through msgpack: tuples become lists)."""
    return unpack(pack(value))


def task_name(task: Any) -> str:
    """The registered name of a task object, or the name itself."""
    if isinstance(task, str):
        return task
    name = getattr(task, "name", None)
    if isinstance(name, str):
        return name
    raise TypeError(f"expected a task (or a task name), got {task!r:.80}")


# -- the broker --------------------------------------------------------------------------


class TestBroker(MemoryBroker):
    """A MemoryBroker that logs every enqueue and can run each one at once (eager).

    ``fast_forward`` (set while draining) promotes every scheduled message as if it
    were due: retries and delayed messages run without waiting.
    """

    __test__ = False  # not a pytest test class despite its name

    def __init__(self, *, eager: bool = False, propagate: bool = True, **options: Any) -> None:
        super().__init__(**options)
        self.eager = eager
        self.propagate = propagate
        self.fast_forward = False
        self.sent: list[EnqueuedTask] = []
        self.queues_used: set[str] = set()
        self._eager_records: dict[tuple[str, str], Record] = {}
        self._eager_keys: dict[tuple[str, str], str] = {}
        self._log_lock = threading.Lock()

    # -- producing --

    def enqueue(self, items: Sequence[Enqueue]) -> list[str]:
        with self._log_lock:
            for item in items:
                message = decode(item.payload, max(len(item.payload), 1))
                self.sent.append(EnqueuedTask(message.id, message.task, message.queue,
                                              tuple(message.args), dict(message.kwargs),
                                              message))
                self.queues_used.add(item.queue)
        if not self.eager:
            return super().enqueue(items)
        self.see_queues([item.queue for item in items])
        return [self._run_eagerly(item) for item in items]

    async def aenqueue(self, items: Sequence[Enqueue]) -> list[str]:
        if not self.eager:
            return self.enqueue(items)
        # Off the event loop: a `def` task may use the ORM, which refuses async contexts.
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue, thread_sensitive=True)(items)

    # -- eager runs --

    def _run_eagerly(self, item: Enqueue) -> str:
        if item.idempotency_key:
            key = (item.queue, item.idempotency_key)
            with self._log_lock:
                first = self._eager_keys.setdefault(key, item.message_id)
            if first != item.message_id:
                return first  # the same key again: the first message is the one that ran
        message = decode(item.payload, max(len(item.payload), 1))
        spec = conf.registry.find(message.task)
        if spec is None:
            raise TaskNotRegistered(f"unknown task {message.task!r} (eager run)")
        policy = spec.retry.with_overrides(message.policy)
        while True:
            started = _now_ms()
            current = message

            def context(m: Message = current) -> TaskContext:
                return TaskContext(id=m.id, name=spec.name, queue=m.queue, attempt=m.attempt,
                                   max_attempts=policy.max_attempts, delivery_count=1,
                                   worker=_EAGER_WORKER, headers=m.headers)

            token = _current.set(context)
            try:
                value = _call(spec.func, spec.is_async, message)
                error: Exception | None = None
            except Exception as exc:
                error = exc
            finally:
                _current.reset(token)
            finished = _now_ms()
            if error is None:
                try:
                    data = encode_success(message.id, message.task, message.queue,
                                          message.attempt, value, message.created_ms, started,
                                          finished, _EAGER_WORKER)
                    self._keep(Record.from_bytes(data))
                    return message.id
                except (TypeError, ValueError, OverflowError) as exc:
                    error = TypeError(f"task result of type {type(value).__qualname__} cannot "
                                      f"be stored: {exc}")
                    retry = False
            else:
                retry = policy.should_retry(message.attempt, error)
            trace = "".join(traceback.format_exception(error))
            state = (states.RETRYING if retry else
                     states.DEAD_LETTERED if spec.dead_letter else states.FAILED)
            record = Record(id=message.id, task=message.task, queue=message.queue, state=state,
                            attempt=message.attempt, error_type=type(error).__qualname__,
                            error_message=str(error), traceback=trace,
                            reason=None if state != states.DEAD_LETTERED else
                            reasons.RETRIES_EXHAUSTED if policy.retryable(error) else
                            reasons.NOT_RETRYABLE,
                            created_ms=message.created_ms, started_ms=started,
                            finished_ms=finished, worker=_EAGER_WORKER)
            _hook(spec.on_failure, record)  # as a worker does, for each failed attempt
            if retry:
                message = message.next_attempt(finished)
                continue
            self._keep(record)
            if state == states.DEAD_LETTERED:
                _hook(spec.on_dead_letter, DeadLetter(
                    id=message.id, queue=message.queue, task=message.task,
                    reason=record.reason or "", payload=encode(message, 1 << 62),
                    attempt=message.attempt, error_type=record.error_type,
                    error_message=record.error_message, traceback=trace, dead_ms=finished))
            if self.propagate:
                raise error
            return message.id

    def _keep(self, record: Record) -> None:
        with self._lock:
            self._eager_records[(record.queue, record.id)] = record
            self._changed.notify_all()

    def _eager_record(self, queue: str, message_id: str) -> Record | None:
        return self._eager_records.get((queue, message_id))

    def get_record(self, queue: str, message_id: str) -> Record | None:
        return self._eager_record(queue, message_id) or super().get_record(queue, message_id)

    async def aget_record(self, queue: str, message_id: str) -> Record | None:
        return self.get_record(queue, message_id)

    def wait_record(self, queue: str, message_id: str, timeout: float) -> Record | None:
        return (self._eager_record(queue, message_id)
                or super().wait_record(queue, message_id, timeout))

    async def await_record(self, queue: str, message_id: str, timeout: float) -> Record | None:
        return (self._eager_record(queue, message_id)
                or await super().await_record(queue, message_id, timeout))

    # -- draining --

    async def promote(self, queue: str, now_ms: int, limit: int) -> tuple[int, int]:
        return await super().promote(queue, _FAR_FUTURE_MS if self.fast_forward else now_ms,
                                     limit)

    def remaining(self, queues: Sequence[str], *, scheduled: bool = True) -> int:
        """Messages still ready (and scheduled, when asked) on these queues."""
        total = 0
        for queue in queues:
            stats = self.queue_stats(queue)
            total += int(stats["ready"] or 0) + int(stats["in_flight"] or 0)
            if scheduled:
                total += int(stats["scheduled"] or 0)
        return total


def _now_ms() -> int:
    return int(time.time() * 1000)


def _hook(hook: Callable[[Any], Any] | None, value: Any) -> None:
    """A task's failure hook, in eager mode: its errors are logged, as a worker does."""
    if hook is None:
        return
    try:
        if asyncio.iscoroutinefunction(hook):
            _run_coroutine(hook(value))
        else:
            hook(value)
    except Exception:
        log.exception("failure hook raised (eager run)")


def _call(func: Callable[..., Any], is_async: bool, message: Message) -> Any:
    if not is_async:
        return func(*message.args, **message.kwargs)
    return _run_coroutine(func(*message.args, **message.kwargs))


def _run_coroutine(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from code on an event loop: run it to the end on a loop of its own.
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="blitzq-eager")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


# -- draining ----------------------------------------------------------------------------


@dataclass
class DrainResult:
    """What ``drain()`` settled, by outcome, and the final failures."""

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    cancelled: int = 0
    expired: int = 0
    requeued: int = 0
    #: the record of every attempt that failed for good (failed or dead-lettered)
    failures: list[Record] = field(default_factory=list)

    @property
    def finished(self) -> int:
        """Messages that reached a final state."""
        return (self.succeeded + self.failed + self.dead_lettered + self.cancelled
                + self.expired)

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("succeeded", "failed", "retried",
                                              "dead_lettered", "cancelled", "expired",
                                              "requeued")}


class _SharedConnections:
    """The calling thread's database connections, lent to the worker's task thread (as
    LiveServerTestCase does): the task sees the test's transaction, uncommitted rows
    included. Safe because the drain runs one task at a time while the caller waits."""

    def __init__(self) -> None:
        self.lent: dict[str, Any] = {}
        try:
            from django.db import connections

            self.lent = {alias: connections[alias] for alias in connections}
        except Exception:  # noqa: BLE001 - Django not configured: nothing to share
            return
        for connection in self.lent.values():
            connection.inc_thread_sharing()

    def install(self) -> None:
        """Called in the task thread around each `def` task."""
        if self.lent:
            from django.db import connections

            for alias, connection in self.lent.items():
                connections[alias] = connection

    def release(self) -> None:
        for connection in self.lent.values():
            connection.dec_thread_sharing()
        self.lent = {}


def _own_connections() -> None:
    """Around each `def` task when not sharing: as runworker does (connections closed
    after the task, with CONN_MAX_AGE = 0)."""
    try:
        from django.db import close_old_connections
    except ImportError:  # pragma: no cover - Django is a dependency
        return
    close_old_connections()


# -- the helper --------------------------------------------------------------------------


class Blitzq:
    """The test helper: a context manager (or ``start()``/``stop()``).

    ::

        with Blitzq() as bq:
            signup(request)                          # enqueues send_welcome(42)
            bq.assert_enqueued(send_welcome, 42)
            bq.drain()                               # runs it (and what it enqueues)
    """

    def __init__(self, *, eager: bool = False, propagate: bool = True) -> None:
        self.broker = TestBroker(eager=eager, propagate=propagate)
        self._previous: Any = None
        self._active = False

    # -- lifecycle --

    def start(self) -> Blitzq:
        if self._active:
            return self
        self._previous = conf.broker_override
        conf.broker_override = self.broker
        conf.reset()
        self._active = True
        return self

    def stop(self) -> None:
        if not self._active:
            return
        conf.broker_override = self._previous
        self._active = False
        conf.reset()

    def __enter__(self) -> Blitzq:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- modes --

    @property
    def eager(self) -> bool:
        """Whether enqueue runs the task at once (may be switched in the middle of a test)."""
        return self.broker.eager

    @eager.setter
    def eager(self, value: bool) -> None:
        self.broker.eager = bool(value)

    @property
    def propagate(self) -> bool:
        """Eager mode: raise a failed task's exception from enqueue (else only recorded)."""
        return self.broker.propagate

    @propagate.setter
    def propagate(self, value: bool) -> None:
        self.broker.propagate = bool(value)

    @property
    def client(self) -> Any:
        """The process client (``blitzq_django.get_client()``), sending to this broker."""
        return conf.get_client()

    # -- what was enqueued --

    def enqueued(self, task: Any = None, queue: str | None = None) -> list[EnqueuedTask]:
        """Every message enqueued since start (or ``clear()``), oldest first, including
        those already run; only ``task``'s (a task or its name) and ``queue``'s if given."""
        name = None if task is None else task_name(task)
        with self.broker._log_lock:
            sent = list(self.broker.sent)
        return [m for m in sent
                if (name is None or m.task == name) and (queue is None or m.queue == queue)]

    def assert_enqueued(self, task: Any, /, *args: Any, **kwargs: Any) -> EnqueuedTask:
        """Assert ``task`` was enqueued, with exactly these arguments when any are given;
        returns the (last) matching message, to check its options."""
        name = task_name(task)
        sent = self.enqueued(name)
        found = [m for m in sent if not (args or kwargs) or m.matches(args, kwargs)]
        if not found:
            if not sent:
                others = sorted({m.task for m in self.enqueued()})
                raise AssertionError(f"{name} was not enqueued; enqueued: "
                                     f"{', '.join(others) or 'nothing'}")
            calls = "; ".join(_call_repr(m) for m in sent[:10])
            raise AssertionError(f"{name} was not enqueued with {_args_repr(args, kwargs)}; "
                                 f"it was enqueued {len(sent)} time(s): {calls}")
        return found[-1]

    def assert_not_enqueued(self, task: Any = None, /) -> None:
        """Assert nothing (or nothing of ``task``) was enqueued."""
        sent = self.enqueued(task)
        if not sent:
            return
        calls = "; ".join(f"{m.task}{_call_repr(m)}" for m in sent[:10])
        if task is None:
            raise AssertionError(f"expected nothing enqueued, but {len(sent)} message(s) "
                                 f"were: {calls}")
        raise AssertionError(f"{task_name(task)} was enqueued {len(sent)} time(s): {calls}")

    def clear(self) -> None:
        """Forget what was enqueued so far and drop every message not yet run."""
        with self.broker._log_lock:
            self.broker.sent.clear()
            queues = list(self.broker.queues_used)
        for queue in queues:
            self.broker.purge(queue, True, True)

    # -- running --

    def drain(self, *, queues: Sequence[str] | None = None, max_tasks: int | None = 10_000,
              timeout: float = 30.0, run_scheduled: bool = True,
              share_db: bool = True) -> DrainResult:
        """Run a real worker (burst mode, one task at a time) until the queues are empty.

        ``queues``: default every queue something was enqueued to, plus the queues the
        tasks and ROUTES name. Messages enqueued by the tasks run too. ``run_scheduled``:
        retries and delayed messages run at once instead of when due (False: those not yet
        due are left). ``max_tasks``: stop after settling this many attempts (None: no
        limit). ``share_db``: `def` tasks use this thread's database connections (they see
        the test's transaction); False gives them their own (then only committed rows are
        visible: TransactionTestCase, ``django_db(transaction=True)``). Raises
        AssertionError if the queues are not drained within ``timeout`` seconds.
        """
        client = conf.get_client()
        if client.broker is not self.broker:
            raise RuntimeError("drain(): this Blitzq is not active (use it as a context "
                               "manager, or call start())")
        result = DrainResult()
        deadline = time.monotonic() + timeout
        shared = _SharedConnections() if share_db else None
        self.broker.fast_forward = run_scheduled
        try:
            while True:
                served = tuple(sorted(set(queues) if queues else
                                      (self.broker.queues_used | client.known_queues())))
                before = result.finished + result.retried  # attempts run so far
                budget = None if max_tasks is None else max_tasks - before
                if budget is not None and budget <= 0:
                    break
                self._run_worker(client, served, budget, deadline, shared, result)
                settled = result.finished + result.retried
                if not self.broker.remaining(served, scheduled=run_scheduled):
                    break
                if settled == before and time.monotonic() > deadline:
                    raise AssertionError(f"drain(): queues not empty after {timeout} s")
        finally:
            self.broker.fast_forward = False
            if shared is not None:
                shared.release()
        return result

    def _run_worker(self, client: Any, queues: tuple[str, ...], budget: int | None,
                    deadline: float, shared: _SharedConnections | None,
                    result: DrainResult) -> None:
        failures: list[Record] = []
        worker = Worker(client, around_sync_call=[shared.install if shared else _own_connections],
                        on_failure=[failures.append], queues=queues, concurrency=1,
                        threads=1, prefetch=1, batch_size=1, burst=True,
                        max_tasks=budget or 0,
                        name=f"blitzq-test-drain-{id(self):x}")
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                asyncio.run(worker.run())
            except BaseException as exc:  # re-raised in the caller
                outcome["error"] = exc

        thread = threading.Thread(target=run, name="blitzq-test-drain", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            worker.stop()
            thread.join(10)
            raise AssertionError("drain(): the queues were not drained in time (a task that "
                                 "does not return, or one that enqueues itself forever?)")
        if "error" in outcome:
            raise outcome["error"]
        for key, value in worker.stats.as_dict().items():
            if hasattr(result, key):
                setattr(result, key, getattr(result, key) + value)
        result.failures += [r for r in failures
                            if r.state in (states.FAILED, states.DEAD_LETTERED)]


def _args_repr(args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"({', '.join(parts)})"[:300]


def _call_repr(message: EnqueuedTask) -> str:
    return _args_repr(message.args, message.kwargs)


# -- django.test.TestCase ------------------------------------------------------------------


class BlitzqTestMixin:
    """For ``django.test.TestCase`` (listed before it): ``self.blitzq`` is an active
    ``Blitzq`` in every test. Set ``blitzq_eager = True`` on the class for eager mode.

    ::

        class SignupTests(BlitzqTestMixin, TestCase):
            def test_welcome(self):
                with self.captureOnCommitCallbacks(execute=True):
                    signup(...)                      # send_welcome.enqueue_on_commit(42)
                self.assertTaskEnqueued(send_welcome, 42)
                self.blitzq.drain()
    """

    blitzq_eager: bool = False
    blitzq_propagate: bool = True
    blitzq: Blitzq

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.blitzq = Blitzq(eager=self.blitzq_eager, propagate=self.blitzq_propagate).start()
        self.addCleanup(self.blitzq.stop)  # type: ignore[attr-defined]

    def assertTaskEnqueued(self, task: Any, /, *args: Any, **kwargs: Any) -> EnqueuedTask:  # noqa: N802
        return self.blitzq.assert_enqueued(task, *args, **kwargs)

    def assertTaskNotEnqueued(self, task: Any = None, /) -> None:  # noqa: N802
        self.blitzq.assert_not_enqueued(task)

