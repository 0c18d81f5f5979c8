"""The app every fault-test worker process loads: a client and tasks that keep a ledger.

``python -m blitzq_django.engine worker tests.fault.app:make_client`` builds the client
from the environment (REDIS_URL, BLITZQ_NAMESPACE, LEDGER). Each task body appends
JSON lines to the LEDGER file: ``start`` when the body begins, then ``done`` (returned)
or ``fail`` (raised). The ledger lives outside Redis and each line is written with one
O_APPEND write and fsync'd, so it survives SIGKILL of the worker and restarts of Redis:
it is the ground truth the checker (ledger.py) compares Redis with.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

from blitzq_django.engine import Client, RedisBroker, current_task

_fd: tuple[int, int] | None = None  # (pid, fd): a ledger fd per process
_fd_lock = threading.Lock()


def _ledger_fd() -> int:
    global _fd
    with _fd_lock:
        if _fd is None or _fd[0] != os.getpid():
            path = os.environ["LEDGER"]
            _fd = (os.getpid(), os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        return _fd[1]


def note(phase: str, **extra: object) -> None:
    """Append one ledger line for the running attempt (one write, so lines never interleave)."""
    ctx = current_task()
    assert ctx is not None, "note() is for task bodies"
    line = {"id": ctx.id, "attempt": ctx.attempt, "pid": os.getpid(), "dc": ctx.delivery_count,
            "phase": phase, "t": time.time(), **extra}
    fd = _ledger_fd()
    os.write(fd, (json.dumps(line) + "\n").encode())
    os.fsync(fd)


def _started_before() -> bool:
    """Whether an earlier run of this message already started (it is being resumed)."""
    ctx = current_task()
    assert ctx is not None
    needle = f'"id": "{ctx.id}"'
    with open(os.environ["LEDGER"]) as f:
        return sum(1 for line in f if needle in line and '"phase": "start"' in line) > 1


def make_client() -> Client:
    broker = RedisBroker(os.environ["REDIS_URL"], namespace=os.environ["BLITZQ_NAMESPACE"],
                         mode=os.environ.get("BLITZQ_MODE", "reliable"))
    client = Client(broker, store_results=True)
    register(client)
    return client


def register(client: Client) -> dict[str, object]:
    """Define the fault tasks on ``client``; returns them by short name (for producers)."""
    tasks: dict[str, object] = {}

    def task(**options: object):  # type: ignore[no-untyped-def]
        def wrap(func):  # type: ignore[no-untyped-def]
            t = client.task(name=f"fault.{func.__name__}", **options)(func)
            tasks[func.__name__] = t
            return t

        return wrap

    @task()
    async def noop(value: object = None) -> object:
        note("start")
        note("done")
        return value

    @task()
    async def sleep(seconds: float) -> float:
        note("start")
        await asyncio.sleep(seconds)
        note("done")
        return seconds

    @task()
    def sync_sleep(seconds: float) -> float:
        note("start")
        time.sleep(seconds)  # a `def` task runs on the worker's thread pool
        note("done")
        return seconds

    @task(timeout=1, retries=0)
    def stuck(seconds: float = 3600) -> None:
        """Blocked in one C call past its time limit: the worker recycles (a time limit
        cannot interrupt it)."""
        note("start")
        time.sleep(seconds)

    @task()
    async def first_delivery_sleep(seconds: float, later: float = 0.0) -> int:
        """Sleeps ``seconds`` on its first delivery, ``later`` on a redelivery."""
        note("start")
        ctx = current_task()
        assert ctx is not None
        await asyncio.sleep(seconds if ctx.delivery_count == 1 else later)
        note("done")
        return ctx.delivery_count

    @task(retries=2, initial_delay=0.05, jitter=False)
    async def fail_then_sleep(seconds: float) -> int:
        """Attempt 1 fails; attempt 2 sleeps ``seconds`` on its first delivery only."""
        note("start")
        ctx = current_task()
        assert ctx is not None
        if ctx.attempt == 1:
            note("fail")
            raise RuntimeError("first attempt fails")
        if ctx.delivery_count == 1:
            await asyncio.sleep(seconds)
        note("done")
        return ctx.attempt

    @task()
    async def block_loop(block: float, later: float) -> int:
        """First delivery blocks the event loop for ``block`` s; a redelivery sleeps ``later``."""
        note("start")
        ctx = current_task()
        assert ctx is not None
        if ctx.delivery_count == 1:
            time.sleep(block)  # noqa: ASYNC251 - the point: a task that blocks its event loop
        else:
            await asyncio.sleep(later)
        note("done")
        return ctx.delivery_count

    @task()
    async def kill_self() -> None:
        """A poison message: takes its worker process down every time it runs."""
        note("start")
        os.kill(os.getpid(), signal.SIGKILL)

    @task()
    async def resumable(seconds: float) -> str:
        """Sleeps ``seconds`` unless an earlier run of it was interrupted (then it resumes fast)."""
        note("start")
        resumed = _started_before()
        await asyncio.sleep(0.01 if resumed else seconds)
        note("done", resumed=resumed)
        return "resumed" if resumed else "first"

    @task(retries=3, initial_delay=0.05, factor=1.0, jitter=False)
    async def flaky(failures: int, seconds: float = 0.0) -> int:
        """Fails its first ``failures`` attempts, then succeeds."""
        note("start")
        ctx = current_task()
        assert ctx is not None
        if seconds:
            await asyncio.sleep(seconds)
        if ctx.attempt <= failures:
            note("fail")
            raise RuntimeError(f"attempt {ctx.attempt} fails")
        note("done")
        return ctx.attempt

    @task(retries=2, initial_delay=0.05, factor=1.0, jitter=False)
    def always_fail(seconds: float = 0.0) -> None:
        """Fails every attempt (a `def` task): dead-lettered once retries are exhausted."""
        note("start")
        if seconds:
            time.sleep(seconds)
        note("fail")
        raise RuntimeError("always fails")

    @task(retries=1, initial_delay=0.05, jitter=False, dead_letter=False)
    async def always_fail_quietly(seconds: float = 0.0) -> None:
        """Fails every attempt; with dead_letter=False the last failure is a failed record."""
        note("start")
        if seconds:
            await asyncio.sleep(seconds)
        note("fail")
        raise RuntimeError("always fails, no dead letter")

    @task(retries=3, dont_retry_on=(ValueError,))
    async def not_retryable() -> None:
        note("start")
        note("fail")
        raise ValueError("never retried")

    @task(retries=1, initial_delay=0.05, jitter=False)
    async def backlog_async(seconds: float, fail_once: bool = False) -> int:
        """A backlog task (async): sleeps ``seconds``; with ``fail_once`` attempt 1 fails."""
        note("start")
        ctx = current_task()
        assert ctx is not None
        await asyncio.sleep(seconds)
        if fail_once and ctx.attempt == 1:
            note("fail")
            raise RuntimeError("first attempt fails")
        note("done")
        return ctx.attempt

    @task(retries=1, initial_delay=0.05, jitter=False)
    def backlog_sync(seconds: float, fail_once: bool = False) -> int:
        """A backlog task (`def`, on the thread pool): as backlog_async."""
        note("start")
        ctx = current_task()
        assert ctx is not None
        time.sleep(seconds)
        if fail_once and ctx.attempt == 1:
            note("fail")
            raise RuntimeError("first attempt fails")
        note("done")
        return ctx.attempt

    # -- workflows (test_workflows.py) --------------------------------------------

    @task()
    async def wf_member(i: int) -> int:
        """A chord's header step: its result is its number (no ledger: the callback's
        arguments say whether every result arrived)."""
        return i

    @task()
    def wf_collect(values: list[int]) -> list[int]:
        """A chord's callback: notes what it was given."""
        note("start")
        note("done", values=values)
        return values

    @task()
    async def wf_step(path: list[int], i: int) -> list[int]:
        """A chain's step: notes its place, returns the path so far with it."""
        note("start", step=i)
        note("done", step=i, path=path)
        return [*path, i]

    @task()
    async def wf_block_once(block: float) -> int:
        """First delivery blocks the event loop past the lease (another worker takes the
        message over and runs it too); a redelivery returns at once."""
        note("start")
        ctx = current_task()
        assert ctx is not None
        if ctx.delivery_count == 1:
            time.sleep(block)  # noqa: ASYNC251 - the point: its lease is lost meanwhile
        note("done")
        return ctx.delivery_count

    return tasks
