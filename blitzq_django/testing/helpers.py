"""``Blitzq``, the test helper (record what was enqueued, ``drain()`` it with a real
worker), and ``BlitzqTestMixin`` for ``django.test.TestCase``. The package docstring
(blitzq_django/testing/__init__.py) tells the whole story."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections, connections

from .. import runtime
from ..engine import Record, Worker
from ..engine.core.states import RecordState
from ..runtime import get_client
from ..settings import reset
from .broker import EnqueuedTask, TestBroker, task_name

__all__ = ["Blitzq", "BlitzqTestMixin", "DrainResult"]

#: the final failures drain() lists
FAILED_FOR_GOOD = (RecordState.FAILED, RecordState.DEAD_LETTERED)


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
            self.lent = {alias: connections[alias] for alias in connections}
        except Exception:  # noqa: BLE001 - Django not configured: nothing to share
            return
        for connection in self.lent.values():
            connection.inc_thread_sharing()

    def install(self) -> None:
        """Called in the task thread around each `def` task."""
        if self.lent:
            for alias, connection in self.lent.items():
                connections[alias] = connection

    def release(self) -> None:
        for connection in self.lent.values():
            connection.dec_thread_sharing()
        self.lent = {}


def _own_connections() -> None:
    """Around each `def` task when not sharing: as runworker does (connections closed
    after the task, with CONN_MAX_AGE = 0)."""
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
        self._previous = runtime.broker_override
        runtime.broker_override = self.broker
        reset()
        self._active = True
        return self

    def stop(self) -> None:
        if not self._active:
            return
        runtime.broker_override = self._previous
        self._active = False
        reset()

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
        return get_client()

    # -- what was enqueued --

    def enqueued(self, task: Any = None, queue: str | None = None) -> list[EnqueuedTask]:
        """Every message enqueued since start (or ``clear()``), oldest first, including
        those already run; only ``task``'s (a task or its name) and ``queue``'s if given."""
        name = None if task is None else task_name(task)
        with self.broker.log_lock:
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
        with self.broker.log_lock:
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
        client = get_client()
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
                            if r.state in FAILED_FOR_GOOD]


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
