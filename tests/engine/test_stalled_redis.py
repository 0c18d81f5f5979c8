"""A stalled Redis (SIGSTOP: it accepts connections and reads nothing, like a black-holed
network) costs a caller a bounded time and a BrokerUnavailable, never a hang; a worker's
outcome waiting on a progress write into the stall is settled all the same.

Each test stops a redis-server of its own module, so the suite's Redis keeps serving the
other tests. Calls run in a thread joined with a deadline (or under asyncio.wait_for), so
a call that would hang fails as an assertion.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from blitzq_django.engine import (
    BrokerUnavailable,
    Client,
    RedisBroker,
    ResultTimeout,
    current_task,
)
from blitzq_django.engine.brokers.redis.store import SOCKET_TIMEOUT_S, client_options

from ..support.redis_server import RedisServer
from ..support.waiting import await_until, wait_until
from .helpers import background_worker

MARGIN_S = 1.5  # how far past its own timeout a call may return (REPLY_GRACE_S + 0.5)
SOCKET_TIMEOUT = 0.5  # small, so the enqueue tests run fast


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()


@contextmanager
def stalled(server: RedisServer) -> Iterator[None]:
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


def timed(call: Callable[[], Any], limit: float) -> tuple[float, BaseException | None]:
    """Run call in a thread; (seconds it took, what it raised). Fails if it is still
    running after ``limit`` seconds."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        start = time.monotonic()
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc
        outcome["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"still blocked after {limit} s"
    return outcome["elapsed"], outcome.get("error")


def make_task(server: RedisServer, **redis_options: Any) -> tuple[RedisBroker, Any]:
    """A broker and a task of a client on it, that no worker runs (never a final result)."""
    broker = RedisBroker(server.url, namespace=f"stall{os.getpid()}",
                         redis_options=redis_options)
    client = Client(broker)

    @client.task(name="t")
    def t(x: int) -> int:
        return x

    return broker, t


def test_every_client_gets_a_socket_timeout_and_no_timeout_retry() -> None:
    for aio in (False, True):
        options = client_options(aio=aio)
        assert options["socket_timeout"] == SOCKET_TIMEOUT_S
        # Longer than the worker's XREADGROUP BLOCK (block_timeout, a few seconds at most).
        assert SOCKET_TIMEOUT_S > 5
        retried = options["retry"]._supported_errors
        assert redis.ConnectionError in retried
        assert not any(issubclass(e, redis.TimeoutError | TimeoutError) for e in retried)
    assert client_options({"socket_timeout": 3})["socket_timeout"] == 3


def test_enqueue_raises_within_the_socket_timeout(server: RedisServer) -> None:
    broker, t = make_task(server, socket_timeout=SOCKET_TIMEOUT)
    try:
        t.enqueue(1)  # a pooled connection, as in a running app
        with stalled(server):
            elapsed, error = timed(lambda: t.enqueue(2), SOCKET_TIMEOUT + 5)
        assert isinstance(error, BrokerUnavailable), error
        assert elapsed < SOCKET_TIMEOUT + MARGIN_S, elapsed
        print(f"enqueue against a stalled Redis raised after {elapsed:.2f} s")
    finally:
        broker.close()


@pytest.mark.asyncio
async def test_aenqueue_raises_within_the_socket_timeout(server: RedisServer) -> None:
    broker, t = make_task(server, socket_timeout=SOCKET_TIMEOUT)
    try:
        await t.aenqueue(1)
        with stalled(server):
            start = time.monotonic()
            with pytest.raises(BrokerUnavailable):
                await asyncio.wait_for(t.aenqueue(2), SOCKET_TIMEOUT + 5)
            elapsed = time.monotonic() - start
        assert elapsed < SOCKET_TIMEOUT + MARGIN_S, elapsed
    finally:
        await broker.aclose()


def test_get_result_returns_within_its_timeout(server: RedisServer) -> None:
    # The default socket timeout (10 s): the wait's own deadline must bound it.
    broker, t = make_task(server)
    try:
        handle = t.enqueue(1)
        with stalled(server):
            elapsed, error = timed(lambda: handle.record(timeout=2), 2 + 5)  # get_result
        assert isinstance(error, BrokerUnavailable), error
        assert elapsed < 2 + MARGIN_S, elapsed
        print(f"get_result(timeout=2) against a stalled Redis raised after {elapsed:.2f} s")
        # Redis answering again: no final record is a ResultTimeout, as before.
        elapsed, error = timed(lambda: handle.result(timeout=0.2), 5)
        assert isinstance(error, ResultTimeout), error
    finally:
        broker.close()


def test_get_result_returns_when_redis_stalls_mid_wait(server: RedisServer) -> None:
    broker, t = make_task(server)
    watcher = redis.Redis.from_url(server.url, socket_timeout=5)
    try:
        handle = t.enqueue(1)
        outcome: dict[str, Any] = {}
        waiter = threading.Thread(
            target=lambda: outcome.update(result=timed(lambda: handle.result(timeout=2), 7)),
            daemon=True)
        waiter.start()
        # Subscribed, so now waiting on pub/sub: stall Redis under it.
        wait_until(lambda: any(c["sub"] != "0" for c in watcher.client_list()),
                   message="the waiter to subscribe")
        with stalled(server):
            waiter.join(7)
        assert not waiter.is_alive()
        elapsed, error = outcome["result"]
        assert isinstance(error, BrokerUnavailable), error
        assert elapsed < 2 + MARGIN_S, elapsed
    finally:
        watcher.close()
        broker.close()


@pytest.mark.asyncio
async def test_aget_result_returns_within_its_timeout(server: RedisServer) -> None:
    broker, t = make_task(server)
    try:
        handle = await t.aenqueue(1)
        with stalled(server):
            start = time.monotonic()
            with pytest.raises(BrokerUnavailable):
                await asyncio.wait_for(handle.aresult(timeout=2), 2 + 5)
            elapsed = time.monotonic() - start
        assert elapsed < 2 + MARGIN_S, elapsed
        print(f"aget_result(timeout=2) against a stalled Redis raised after {elapsed:.2f} s")
    finally:
        await broker.aclose()


@pytest.mark.asyncio
async def test_a_last_progress_write_into_a_stall_still_lets_the_outcome_settle(
        server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    # The outcome waits for the attempt's last progress write (engine/progress.py): when
    # that write times out against a stalled Redis, the outcome is settled all the same.
    broker = RedisBroker(server.url, namespace=f"stallp{os.getpid()}",
                         redis_options={"socket_timeout": SOCKET_TIMEOUT})
    client = Client(broker)
    go = threading.Event()
    runs: list[int] = []

    @client.task(name="reports")
    def reports() -> str:
        task = current_task()
        assert task is not None
        runs.append(1)
        task.progress(1, 3)  # written at once
        go.wait(30)  # Redis stalls meanwhile
        # Into the stall: the latest of these is written (at once, or when the attempt
        # ends), and the outcome waits on that write until it times out.
        task.progress(2, 3)
        task.progress(3, 3)
        return "done"

    try:
        handle = await reports.aenqueue()
        async with background_worker(client) as worker:
            await await_until(lambda: runs, 5, message="the attempt to start")
            await await_until(lambda: worker.executor._progress.writes == 1, 5,
                              message="the first report written")
            with stalled(server):
                go.set()
                await await_until(lambda: "not written" in caplog.text, 5,
                                  message="the last progress write to time out")
            assert await handle.aresult(timeout=10) == "done"
            await await_until(lambda: len(worker.inflight) == 0, 5, message="the slot back")
        assert runs == [1]
        assert worker.stats.lost_leases == 0
    finally:
        go.set()
        await broker.aclose()
