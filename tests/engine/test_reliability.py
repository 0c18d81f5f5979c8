"""At-least-once under stress: graceful stop, lost leases, poison messages, Redis hiccups."""

from __future__ import annotations

import asyncio
import threading
import traceback
from typing import Any

import pytest
import redis

from blitzq_django.engine import (
    BrokerUnavailable,
    Client,
    RedisBroker,
    Worker,
    current_task,
)
from blitzq_django.engine.core import record as states
from blitzq_django.engine.core.message import decode

from ..support.redis_server import RedisServer, free_port, redis_server_binary
from ..support.waiting import await_until, wait_until
from .helpers import (
    FAST,
    background_worker,
    deliveries_of_dead_workers,
    pending_count,
    ready_message_ids,
    run_burst,
)


def final_ids(client: Client, ids: list[str]) -> set[str]:
    out = set()
    for message_id in ids:
        record = client.inspect(message_id)
        if record is not None and record.is_final:
            out.add(message_id)
    return out


def assert_nothing_lost(client: Client, ids: list[str]) -> None:
    """Every id has a final record or waits on the queue, exactly one of the two."""
    done = final_ids(client, ids)
    waiting = ready_message_ids(client.broker, "default")
    assert pending_count(client.broker, "default") == 0
    assert len(waiting) == len(set(waiting)), "a message is on the queue twice"
    assert done.isdisjoint(waiting), "a finished message is also back on the queue"
    assert done | set(waiting) == set(ids)


@pytest.mark.asyncio
async def test_graceful_stop_loses_nothing(client: Client) -> None:
    never = asyncio.Event()
    release = threading.Event()

    @client.task(name="hang")
    async def hang(i: int) -> None:
        await never.wait()  # still busy when the worker stops: must be requeued

    @client.task(name="busy")
    def busy(i: int) -> int:
        release.wait(5)  # a thread task finishing during the drain: must be recorded
        return i

    ids = []
    for i in range(6):
        ids.append(hang.enqueue(i).id)
        ids.append(busy.enqueue(i).id)
    async with background_worker(client, concurrency=20, shutdown_timeout=0.5) as worker:
        await await_until(lambda: len(worker.inflight) == 12, 5, message="12 running attempts")
        worker.stop()
        release.set()
    assert_nothing_lost(client, ids)
    assert len(final_ids(client, ids)) == 6  # the 6 thread tasks finished in the drain
    assert set(ready_message_ids(client.broker, "default")) == set(ids[0::2])


@pytest.mark.asyncio
async def test_stop_with_every_slot_busy_returns(client: Client) -> None:
    never = asyncio.Event()

    @client.task(name="hang")
    async def hang(i: int) -> None:
        await never.wait()

    ids = [h.id for h in hang.enqueue_many([(i,) for i in range(10)])]
    # concurrency 4: the fetch loop waits for a free slot when stop() is called.
    async with background_worker(client, concurrency=4, shutdown_timeout=0.3,
                                 stop_within=5) as worker:
        await await_until(lambda: worker.inflight.running == 4, 5, message="4 running attempts")
    assert_nothing_lost(client, ids)
    assert len(ready_message_ids(client.broker, "default")) == 10


@pytest.mark.asyncio
async def test_stop_before_run_has_started_is_not_lost(client: Client) -> None:
    @client.task(name="t")
    def t() -> None:
        return None

    worker = Worker(client, **FAST)
    worker.stop()  # e.g. a signal or a supervisor arriving during start-up
    await asyncio.wait_for(worker.run(), 5)


@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode delivers each message once: no delivery count")
async def test_max_deliveries_exceeded_is_dead_lettered(client: Client) -> None:
    runs: list[int] = []

    @client.task(name="poison")
    def poison() -> None:
        runs.append(1)

    h = poison.enqueue()
    broker = client.broker
    await deliveries_of_dead_workers(broker, 2, started=True)
    async with background_worker(client, visibility_timeout=0.3, max_deliveries=3):
        await await_until(lambda: client.inspect(h.id) is not None, 5,
                          message="the recovered message to settle")
    record = client.inspect(h.id)
    assert record is not None
    assert record.state == states.DEAD_LETTERED
    assert record.reason == "max deliveries exceeded"
    assert runs == []
    assert pending_count(broker, "default") == 0
    assert broker.dead_letter("default", h.id) is not None


@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode delivers each message once: no delivery count")
async def test_deliveries_that_never_started_do_not_count_toward_max_deliveries(
        client: Client) -> None:
    # Workers that died holding it unstarted (prefetched, waiting for a slot) were not
    # killed by it: past max_deliveries in deliveries, it still runs, once.
    runs: list[int] = []

    @client.task(name="healthy")
    def healthy() -> None:
        runs.append(1)

    h = healthy.enqueue()
    broker = client.broker
    await deliveries_of_dead_workers(broker, 3, started=False)
    async with background_worker(client, visibility_timeout=0.3, max_deliveries=3):
        await await_until(lambda: (r := client.inspect(h.id)) is not None and r.is_final, 5,
                          message="the recovered message to settle")
    record = client.inspect(h.id)
    assert record is not None and record.state == states.SUCCEEDED
    assert runs == [1]
    assert pending_count(broker, "default") == 0


@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode has no lease: nothing is recovered")
async def test_a_recovered_entry_starts_only_where_it_is_owned(client: Client) -> None:
    @client.task(name="t")
    def t() -> None:
        return None

    t.enqueue()
    broker = client.broker
    await broker.prepare(["default"])
    assert len(await broker.fetch(["default"], "first", 10, 10)) == 1
    (taken,), _ = await broker.recover("default", "second", 0, 10)
    (again,), _ = await broker.recover("default", "third", 0, 10)
    assert await broker.start_recovered("second", taken) == 0  # the third owns it now
    assert await broker.start_recovered("third", again) == 1
    assert await broker.start_recovered("third", again) == 2
    assert await broker.starts(again) == 2


@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode has no lease: a message held by a dead worker is lost")
async def test_lost_lease_is_recovered_and_run(client: Client) -> None:
    seen: list[int] = []

    @client.task(name="survivor")
    def survivor() -> str:
        task = current_task()
        assert task is not None
        seen.append(task.delivery_count)
        return "ran"

    h = survivor.enqueue()
    broker = client.broker
    await broker.prepare(["default"])
    assert len(await broker.fetch(["default"], "dead-worker", 10, 10)) == 1
    async with background_worker(client, visibility_timeout=0.3, max_deliveries=3):
        record = await client.aget_result(h.id, 5)
    assert record.result == "ran"
    assert seen == [2]
    assert pending_count(broker, "default") == 0


@pytest.mark.reliable_only("fast mode recovers nothing (at-most-once)")
def test_settlement_of_a_recovered_delivery_is_refused(broker: Any) -> None:
    # The stale owner must not ack (or record) a delivery another worker has taken over.
    from blitzq_django.engine.brokers.base import DONE, Settlement

    client = Client(broker)

    @client.task(name="t")
    def t() -> None:
        return None

    h = t.enqueue()

    async def scenario() -> tuple[list[bool], list[bool]]:
        await broker.prepare(["default"])
        (stale,) = await broker.fetch(["default"], "stale", 1, 10)
        (fresh,), _ = await broker.recover("default", "fresh", 0, 1)
        first = await broker.settle("stale", [Settlement(stale, DONE, h.id)], 0)
        lost = await broker.renew("stale", [stale])
        second = await broker.settle("fresh", [Settlement(fresh, DONE, h.id)], 0)
        assert [d.entry_id for d in lost] == [stale.entry_id]
        await broker.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    assert first == [False]
    assert second == [True]
    assert pending_count(broker, "default") == 0


def test_noscript_after_script_flush(redis_broker: RedisBroker,
                                     redis_client: redis.Redis) -> None:
    client = Client(redis_broker, track_state=True)

    @client.task(name="t", retries=1, initial_delay=0)
    def t(x: int) -> int:
        if current_task().attempt == 1:  # type: ignore[union-attr]
            raise ValueError("first attempt fails, so complete and promote both run")
        return x

    redis_client.script_flush()
    h = t.enqueue(1)  # the enqueue script, after the flush
    redis_client.script_flush()
    run_burst(client)  # complete and promote, after the flush
    assert h.result(timeout=5) == 1


@pytest.mark.asyncio
async def test_noscript_while_a_worker_runs(redis_broker: RedisBroker,
                                            redis_client: redis.Redis) -> None:
    client = Client(redis_broker)

    @client.task(name="t")
    async def t(x: int) -> int:
        return x

    async with background_worker(client):
        assert await (await t.aenqueue(1)).aresult(timeout=5) == 1
        redis_client.script_flush()  # Redis restarted or failed over: the script cache is empty
        assert await (await t.aenqueue(2)).aresult(timeout=5) == 2
        redis_client.script_flush()
        h = await t.options(delay=0.05).aenqueue(3)
        assert await h.aresult(timeout=5) == 3


def assert_redacted(error: BaseException, port: int) -> None:
    text = "".join(traceback.format_exception(error))
    assert f"127.0.0.1:{port}" in str(error)
    assert "***" in str(error)
    assert "secret" not in text


@pytest.fixture
def unreachable() -> tuple[Client, int]:
    port = free_port()  # nothing listens here
    client = Client(RedisBroker(f"redis://:secret@127.0.0.1:{port}/0",
                                redis_options={"socket_connect_timeout": 0.5}))

    @client.task(name="t")
    def t() -> None:
        return None

    return client, port


def test_broker_unavailable_on_enqueue_names_url_without_password(
        unreachable: tuple[Client, int]) -> None:
    client, port = unreachable
    task = client.registry.get("t")
    with pytest.raises(BrokerUnavailable) as caught:
        client.enqueue(task)
    assert_redacted(caught.value, port)
    with pytest.raises(BrokerUnavailable) as caught:
        client.get_result("x", timeout=0.1)
    assert_redacted(caught.value, port)
    with pytest.raises(BrokerUnavailable) as caught:
        client.inspect("x")
    assert_redacted(caught.value, port)


@pytest.mark.asyncio
async def test_broker_unavailable_on_aenqueue(unreachable: tuple[Client, int]) -> None:
    client, port = unreachable
    with pytest.raises(BrokerUnavailable) as caught:
        await client.aenqueue(client.registry.get("t"))
    assert_redacted(caught.value, port)
    with pytest.raises(BrokerUnavailable) as caught:
        await client.aget_result("x", timeout=0.1)
    assert_redacted(caught.value, port)


@pytest.mark.asyncio
async def test_worker_started_before_redis_waits_for_it(
        unreachable: tuple[Client, int], caplog: pytest.LogCaptureFixture) -> None:
    # A service started before its Redis must come up, not exit: it retries with a
    # capped backoff, a log line per attempt (never the password), then serves.
    if redis_server_binary() is None:
        pytest.skip("needs a redis-server binary to start on the port later")
    client, port = unreachable
    running = asyncio.create_task(Worker(client, burst=True, **FAST).run())
    await await_until(lambda: caplog.text.count("cannot reach Redis (attempt") >= 2 or
                      running.done(), 10, message="two logged attempts")
    assert not running.done(), "the worker gave up instead of waiting for Redis"
    assert "secret" not in caplog.text
    server = RedisServer(port=port).start()
    try:
        handle = client.enqueue(client.registry.get("t"))
        stats = await asyncio.wait_for(running, 30)
        assert stats.succeeded == 1
        assert handle.result(timeout=5) is None
    finally:
        client.broker.close()
        await client.broker.aclose()  # type: ignore[attr-defined]
        server.stop()


def test_ping_reaches_a_live_server(redis_broker: RedisBroker) -> None:
    redis_broker.ping()
    wait_until(lambda: True)


@pytest.mark.asyncio
async def test_worker_stops_promptly_with_a_result_waiter_on_its_loop(client: Client) -> None:
    # An ASGI app running a worker in-process: a request awaits a result on the worker's
    # loop. Shutdown cancels the promoter and the lease keeper; a cancellation swallowed
    # inside a Redis call must not leave run() waiting for them forever.
    from .test_flow import wait_until_waiting

    @client.task(name="t")
    async def t() -> int:
        return 1

    for _ in range(5):
        h = await t.aenqueue()
        waiter = asyncio.create_task(client.aget_result(h.id, 10))
        await wait_until_waiting(client.broker, h.queue, h.id, sync_waiter=False)
        async with background_worker(client, stop_within=3):
            assert (await asyncio.wait_for(waiter, 5)).result == 1

    def helpers_left() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if t.get_name().startswith("blitzq-")]

    # Nothing of the stopped workers keeps running (and polling Redis) on the loop.
    await await_until(lambda: not helpers_left(), 3, message="worker helper tasks to end")


@pytest.mark.asyncio
async def test_max_tasks_recycles_the_worker_without_losing_messages(client: Client) -> None:
    ran: list[int] = []

    @client.task(name="t")
    async def t(i: int) -> int:
        ran.append(i)
        return i

    ids = [h.id for h in t.enqueue_many([(i,) for i in range(30)])]
    worker = Worker(client, max_tasks=5, concurrency=1, **FAST)
    await asyncio.wait_for(worker.run(), 10)  # returns by itself after 5 settled messages
    assert len(ran) >= 5
    assert_nothing_lost(client, ids)
    assert len(final_ids(client, ids)) == len(ran)


@pytest.mark.parametrize(
    ("url", "shown", "hidden"),
    [
        ("redis://:secret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0", "secret"),
        ("redis://user:secret@host:6379/2", "redis://user:***@host:6379/2", "secret"),
        ("rediss://user:secret@[::1]:6380/0", "[::1]:6380", "secret"),
        ("redis://127.0.0.1:6379/0?password=secret", "127.0.0.1:6379", "secret"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", None),
    ],
    ids=["password", "user-password", "ipv6", "password-in-query", "no-password"],
)
def test_redact(url: str, shown: str, hidden: str | None) -> None:
    from blitzq_django.engine.brokers.redis.store import redact

    redacted = redact(url)
    assert shown in redacted
    if hidden is not None:
        assert hidden not in redacted


def test_thread_task_outlasting_shutdown_is_requeued(client: Client) -> None:
    release = threading.Event()
    started = threading.Event()

    @client.task(name="stubborn")
    def stubborn() -> str:
        started.set()
        release.wait(10)  # a thread cannot be interrupted
        return "finished late"

    h = stubborn.enqueue()
    worker = Worker(client, **{**FAST, "shutdown_timeout": 0.2})

    async def scenario() -> None:
        running = asyncio.create_task(worker.run(close_broker=True))
        await asyncio.to_thread(started.wait, 5)
        worker.stop()
        await asyncio.wait_for(running, 5)

    asyncio.run(scenario())
    # Handed back at once, so another worker can run it: at-least-once, never lost.
    assert ready_message_ids(client.broker, "default") == [h.id]
    assert pending_count(client.broker, "default") == 0
    release.set()
    # The late thread's outcome must not be recorded over a message that waits to run.
    wait_until(lambda: worker.threads_left == 0, 5, message="the late thread to end")
    record = client.inspect(h.id)
    assert record is None or not record.is_final
    run_burst(client)
    assert h.result(timeout=5) == "finished late"


def test_a_password_protected_redis_works_end_to_end() -> None:
    if redis_server_binary() is None:
        pytest.skip("needs a redis-server binary to start with a password")
    server = RedisServer(password="s3cret").start()
    client = Client(RedisBroker(server.url))
    try:

        @client.task(name="add")
        def add(a: int, b: int) -> int:
            return a + b

        handle = add.enqueue(2, 3)
        run_burst(client)
        assert handle.result(timeout=5) == 5
    finally:
        client.broker.close()  # type: ignore[attr-defined]
        server.stop()


@pytest.mark.asyncio
async def test_bulk_enqueue_rides_over_a_redis_restart() -> None:
    """The connections the producer keeps (a thread's own, the pooled one bulk groups go
    out on) died with the old server: the next enqueues reconnect, and each message is
    written once."""
    if redis_server_binary() is None:
        pytest.skip("needs a redis-server binary to restart on the same port")
    port = free_port()
    server = RedisServer(port=port).start()
    client = Client(RedisBroker(f"redis://127.0.0.1:{port}/0"))

    @client.task(name="t")
    def t(x: int) -> None:
        return None

    try:
        t.enqueue(-1)
        t.enqueue_many([(i,) for i in range(10)])
        await t.aenqueue_many([(i,) for i in range(10)])
        server.stop()
        server = RedisServer(port=port).start()  # empty: it keeps nothing on disk
        t.enqueue_many([(i,) for i in range(2500)])
        await t.aenqueue_many([(i,) for i in range(2500, 5000)])
        t.enqueue(5000)
        raw = redis.Redis(port=port)
        entries = raw.xrange(client.broker.keys.queue("default").stream)  # type: ignore[attr-defined]
        args = [decode(fields[b"m"]).args[0] for _id, fields in entries]
        assert args == list(range(5001))
        raw.close()
    finally:
        client.broker.close()  # type: ignore[attr-defined]
        await client.broker.aclose()  # type: ignore[attr-defined]
        server.stop()
