"""enqueue -> worker -> result, and what a producer can see of a message on the way."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any

import pytest

from blitzq_django.engine import (
    Client,
    MemoryBroker,
    RedisBroker,
    ResultTimeout,
    TaskFailed,
    current_task,
)
from blitzq_django.engine.core import record as states

from ..support.clients import subscribers
from ..support.waiting import await_until
from .helpers import arun_burst, raw_redis, ready_message_ids, run_burst


async def wait_until_waiting(broker: RedisBroker | MemoryBroker, queue: str, message_id: str,
                             sync_waiter: bool) -> None:
    """Block until a get_result for message_id is parked on its wake-up (not polling)."""
    if isinstance(broker, RedisBroker):
        channel = broker.keys.queue(queue).done_channel(message_id)

        def subscribed() -> bool:
            return subscribers(raw_redis(broker), channel) >= 1

        await await_until(subscribed, 5, message="get_result to subscribe")
    elif sync_waiter:
        await await_until(lambda: len(broker._changed._waiters) >= 1, 5,  # type: ignore[attr-defined]
                          message="get_result to wait")
    else:
        condition = broker._condition()
        await await_until(lambda: len(condition._waiters) >= 1, 5,  # type: ignore[attr-defined]
                          message="aget_result to wait")


def test_async_and_sync_tasks_run_and_return(client: Client) -> None:
    seen: list[Any] = []

    @client.task(name="add")
    def add(a: int, b: int) -> int:
        seen.append(current_task())
        return a + b

    @client.task(name="mul")
    async def mul(a: int, b: int) -> int:
        seen.append(current_task())
        return a * b

    h_add = add.enqueue(2, 3)
    h_mul = mul.enqueue(4, b=5)
    stats = run_burst(client)
    assert h_add.result(timeout=5) == 5
    assert h_mul.result(timeout=5) == 20
    assert stats.succeeded == 2
    record = h_add.record()
    assert record.state == states.SUCCEEDED
    assert record.task == "add"
    assert record.attempt == 1
    assert record.started_ms and record.finished_ms and record.created_ms
    assert record.created_ms <= record.started_ms <= record.finished_ms
    contexts = {c.name: c for c in seen}
    assert contexts["add"].id == h_add.id
    assert contexts["mul"].id == h_mul.id
    assert contexts["mul"].attempt == 1 and contexts["mul"].delivery_count == 1
    assert current_task() is None  # nothing leaks out of task code


def test_results_of_rich_types_survive(client: Client) -> None:
    import datetime as dt
    import decimal
    import uuid

    value = {"when": dt.datetime(2024, 1, 1, tzinfo=dt.UTC), "amount": decimal.Decimal("1.50"),
             "ref": uuid.UUID(int=3), "raw": b"\x00", "items": (1, 2)}

    @client.task(name="rich")
    def rich() -> Any:
        return value

    h = rich.enqueue()
    run_burst(client)
    assert h.result(timeout=5) == {**value, "items": [1, 2]}


@pytest.mark.asyncio
async def test_aenqueue_and_aresult(client: Client) -> None:
    @client.task(name="echo")
    async def echo(x: Any) -> Any:
        return x

    h = await echo.aenqueue("héllo")
    await arun_burst(client)
    assert await h.aresult(timeout=5) == "héllo"
    record = await client.aget_result(h.id, 5)
    assert record.result == "héllo"


@pytest.mark.asyncio
async def test_get_result_wakes_on_notification(client: Client) -> None:
    @client.task(name="echo")
    async def echo(x: Any) -> Any:
        return x

    h = echo.enqueue(7)
    waiter = asyncio.create_task(asyncio.to_thread(client.get_result, h.id, 10))
    await wait_until_waiting(client.broker, h.queue, h.id, sync_waiter=True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    # The worker on a loop of its own, as in a worker process.
    worker = asyncio.create_task(asyncio.to_thread(run_burst, client))
    record = await asyncio.wait_for(waiter, 8)
    # The safety-net poll is 5 s: arriving well before it means the notification woke us.
    assert loop.time() - started < 2.0
    assert record.result == 7
    await worker


@pytest.mark.asyncio
async def test_aget_result_wakes_on_notification(client: Client) -> None:
    @client.task(name="echo")
    async def echo(x: Any) -> Any:
        return x

    h = await echo.aenqueue(8)
    waiter = asyncio.create_task(client.aget_result(h.id, 10))
    await wait_until_waiting(client.broker, h.queue, h.id, sync_waiter=False)
    loop = asyncio.get_running_loop()
    started = loop.time()
    worker = asyncio.create_task(asyncio.to_thread(run_burst, client))
    record = await asyncio.wait_for(waiter, 8)
    assert loop.time() - started < 2.0
    assert record.result == 8
    await worker


def test_get_result_timeout_raises_result_timeout(client: Client) -> None:
    @client.task(name="never")
    def never() -> None:
        return None

    h = never.enqueue()
    started = time.monotonic()
    with pytest.raises(ResultTimeout) as caught:
        client.get_result(h.id, timeout=0.3)
    elapsed = time.monotonic() - started
    assert isinstance(caught.value, TimeoutError)
    assert h.id in str(caught.value)
    assert 0.25 <= elapsed < 2.0
    with pytest.raises(ResultTimeout):
        h.result(timeout=0)


@pytest.mark.asyncio
async def test_aget_result_timeout_raises_result_timeout(client: Client) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ResultTimeout):
        await client.aget_result("no-such-id", timeout=0.3)
    assert 0.25 <= loop.time() - started < 2.0


def test_failed_task_result_raises_task_failed(client: Client) -> None:
    @client.task(name="boom")
    def boom() -> None:
        raise ValueError("it broke")

    h = boom.enqueue()
    run_burst(client)
    with pytest.raises(TaskFailed) as caught:
        h.result(timeout=5)
    assert caught.value.record.state == states.DEAD_LETTERED
    assert "it broke" in str(caught.value)


def test_inspect_finished_scheduled_and_dead_lettered(client: Client) -> None:
    @client.task(name="ok")
    def ok() -> str:
        return "fine"

    @client.task(name="bad")
    def bad() -> None:
        raise RuntimeError("nope")

    finished = ok.enqueue()
    later = ok.options(delay=60).enqueue()
    dead = bad.enqueue()
    assert client.inspect("unknown-id") is None
    run_burst(client)

    record = client.inspect(finished.id)
    assert record is not None
    assert record.state == states.SUCCEEDED and record.result == "fine"

    record = later.inspect()
    assert record is not None
    assert record.state == states.SCHEDULED
    assert record.id == later.id and record.queue == "default"

    record = client.inspect(dead.id)
    assert record is not None
    assert record.state == states.DEAD_LETTERED
    assert record.reason == "retries exhausted"
    assert record.error_type == "RuntimeError" and record.error_message == "nope"


def test_inspect_dead_letter_without_stored_results(broker: Any) -> None:
    client = Client(broker, store_results=False)

    @client.task(name="bad")
    def bad() -> None:
        raise RuntimeError("nope")

    h = bad.enqueue()
    run_burst(client)
    record = client.inspect(h.id)
    assert record is not None
    assert record.state == states.DEAD_LETTERED
    assert record.task == "bad"
    assert record.reason == "retries exhausted"
    assert record.error_type == "RuntimeError"
    assert record.traceback and "RuntimeError: nope" in record.traceback


def test_track_state_records_queued_and_scheduled_at_enqueue(broker: Any) -> None:
    client = Client(broker, track_state=True)

    @client.task(name="t")
    def t() -> int:
        return 1

    now = t.enqueue()
    later = t.options(delay=60).enqueue()
    record = client.inspect(now.id)
    assert record is not None and record.state == states.QUEUED and record.task == "t"
    assert record.created_ms
    record = client.inspect(later.id)
    assert record is not None and record.state == states.SCHEDULED and record.task == "t"
    run_burst(client)
    record = client.inspect(now.id)
    assert record is not None and record.state == states.SUCCEEDED


def test_without_track_state_nothing_is_recorded_before_the_run(client: Client) -> None:
    @client.task(name="t")
    def t() -> int:
        return 1

    h = t.enqueue()
    assert client.inspect(h.id) is None


def test_bulk_enqueue_runs_every_message_exactly_once(client: Client) -> None:
    counts: collections.Counter[int] = collections.Counter()

    @client.task(name="count")
    async def count(i: int) -> None:
        counts[i] += 1

    handles = count.enqueue_many([(i,) for i in range(2500)])
    assert len(handles) == 2500
    assert len({h.id for h in handles}) == 2500
    stats = run_burst(client, concurrency=200, batch_size=200)
    assert counts == collections.Counter(range(2500))
    assert stats.succeeded == 2500
    assert client.inspect(handles[-1].id).state == states.SUCCEEDED  # type: ignore[union-attr]


def test_enqueue_many_accepts_args_kwargs_pairs(client: Client) -> None:
    @client.task(name="pair")
    def pair(a: int, b: int = 0) -> int:
        return a - b

    handles = pair.enqueue_many([(10,), ((10,), {"b": 3}), [7, 2]])
    run_burst(client)
    assert [h.result(timeout=5) for h in handles] == [10, 7, 5]


def test_idempotency_key_deduplicates(client: Client) -> None:
    runs: list[int] = []

    @client.task(name="once")
    def once(x: int) -> int:
        runs.append(x)
        return x

    first = once.options(idempotency_key="order-1").enqueue(1)
    second = once.options(idempotency_key="order-1").enqueue(2)
    other = once.options(idempotency_key="order-2").enqueue(3)
    assert second.id == first.id
    assert other.id != first.id
    run_burst(client)
    assert sorted(runs) == [1, 3]
    assert first.result(timeout=5) == 1


@pytest.mark.asyncio
async def test_idempotency_key_deduplicates_async(client: Client) -> None:
    @client.task(name="once")
    async def once(x: int) -> int:
        return x

    first = await once.options(idempotency_key="k").aenqueue(1)
    second = await once.options(idempotency_key="k").aenqueue(2)
    assert second.id == first.id


def test_options_queue_routes_the_message(client: Client) -> None:
    ran: list[str] = []

    @client.task(name="where")
    def where() -> str:
        task = current_task()
        assert task is not None
        ran.append(task.queue)
        return task.queue

    h = where.options(queue="q2").enqueue()
    assert h.queue == "q2"
    run_burst(client, queues=("default",))
    assert ran == []
    assert ready_message_ids(client.broker, "q2") == [h.id]
    run_burst(client, queues=("q2",))
    assert ran == ["q2"]
    assert h.result(timeout=5) == "q2"
    assert client.get_result(h.id, 5, queue="q2").result == "q2"


def test_options_task_id_is_used(client: Client) -> None:
    @client.task(name="t")
    def t() -> int:
        return 1

    h = t.options(task_id="my-own-id").enqueue()
    assert h.id == "my-own-id"
    run_burst(client)
    assert client.get_result("my-own-id", 5).result == 1


def test_delayed_message_runs_once_due(client: Client) -> None:
    @client.task(name="t")
    def t() -> int:
        return 1

    # Due well after a burst worker on a loaded machine has found the queue empty.
    h = t.options(delay=1.5).enqueue()
    assert h.inspect().state == states.SCHEDULED  # type: ignore[union-attr]
    run_burst(client)  # burst stops before the message is due
    assert client.inspect(h.id).state == states.SCHEDULED  # type: ignore[union-attr]
    deadline = time.monotonic() + 5
    while client.inspect(h.id).state != states.SUCCEEDED:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the delayed message never ran"
        run_burst(client)
    assert h.result(timeout=1) == 1


def test_store_results_false_leaves_no_record(broker: Any) -> None:
    client = Client(broker, store_results=False)
    ran = threading.Event()

    @client.task(name="t")
    def t() -> int:
        ran.set()
        return 1

    h = t.enqueue()
    stats = run_burst(client)
    assert ran.is_set()
    assert stats.succeeded == 1
    assert client.inspect(h.id) is None
    with pytest.raises(ResultTimeout):
        h.result(timeout=0)


def test_task_store_result_false_overrides_the_client(client: Client) -> None:
    @client.task(name="quiet", store_result=False)
    def quiet() -> int:
        return 1

    @client.task(name="loud")
    def loud() -> int:
        return 2

    q, lo = quiet.enqueue(), loud.enqueue()
    run_burst(client)
    assert client.inspect(q.id) is None
    assert lo.result(timeout=5) == 2


def test_unstorable_result_fails_the_task_clearly(client: Client) -> None:
    @client.task(name="weird")
    def weird() -> object:
        return object()

    h = weird.enqueue()
    run_burst(client)
    record = client.inspect(h.id)
    assert record is not None and not record.succeeded
    assert record.error_type == "TypeError"
    assert "cannot be stored" in (record.error_message or "")


@pytest.mark.asyncio
async def test_track_state_shows_running_then_the_outcome(broker: Any) -> None:
    from .helpers import background_worker

    client = Client(broker, track_state=True)
    release = asyncio.Event()

    @client.task(name="t")
    async def t() -> str:
        await release.wait()
        return "done"

    h = await t.aenqueue()
    assert client.inspect(h.id).state == states.QUEUED  # type: ignore[union-attr]
    async with background_worker(client):
        running = await await_until(
            lambda: (r := client.inspect(h.id)) is not None and r.state == states.RUNNING and r,
            5, message="the running record")
        assert running.started_ms and running.worker and running.attempt == 1
        release.set()
        record = await client.aget_result(h.id, 5)
    assert record.state == states.SUCCEEDED and record.result == "done"


def test_track_state_shows_retrying_between_attempts(broker: Any) -> None:
    client = Client(broker, track_state=True)

    @client.task(name="t", retries=1, initial_delay=60, jitter=False)
    def t() -> None:
        raise ValueError("later")

    h = t.enqueue()
    run_burst(client)
    record = client.inspect(h.id)
    assert record is not None
    assert record.state == states.RETRYING
    assert record.error_type == "ValueError" and record.error_message == "later"
    assert client.broker.scheduled_due_ms("default", h.id) is not None
    with pytest.raises(ResultTimeout):
        client.get_result(h.id, timeout=0.1)  # not final yet


@pytest.mark.asyncio
async def test_concurrency_bounds_running_attempts(client: Client) -> None:
    running = 0
    peak = 0

    @client.task(name="t")
    async def t() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)  # (noqa: sleep) the attempt's own work, so attempts overlap
        running -= 1

    t.enqueue_many([() for _ in range(40)])
    stats = await arun_burst(client, concurrency=3)
    assert stats.succeeded == 40
    assert peak == 3


def test_around_sync_call_wraps_every_def_task_in_its_thread(client: Client) -> None:
    calls: list[tuple[str, int]] = []

    def hook() -> None:
        calls.append(("hook", threading.get_ident()))

    @client.task(name="t")
    def t() -> None:
        calls.append(("task", threading.get_ident()))

    @client.task(name="a")
    async def a() -> None:
        calls.append(("async", threading.get_ident()))

    t.enqueue()
    a.enqueue()
    run_burst(client, around_sync_call=[hook])
    task_thread = next(ident for kind, ident in calls if kind == "task")
    async_thread = next(ident for kind, ident in calls if kind == "async")
    in_task_thread = [kind for kind, ident in calls if ident == task_thread]
    assert in_task_thread == ["hook", "task", "hook"]  # before and after, same thread
    assert async_thread != task_thread  # async tasks run on the loop, unwrapped


def test_inspect_of_a_scheduled_message_names_its_task_without_track_state(
        client: Client) -> None:
    @client.task(name="later", retries=2)
    def later() -> None:
        return None

    h = later.options(delay=3600).enqueue()
    record = client.inspect(h.id)
    assert record is not None
    assert (record.state, record.task, record.attempt) == ("scheduled", "later", 1)
