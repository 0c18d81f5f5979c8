"""unique=True and a chosen task_id: while a message is not finished, enqueueing it again
returns the existing handle; once it finished, the next enqueue makes a new one."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from blitzq_django.engine import Client, RedisBroker

from ..support.waiting import await_until
from .helpers import background_worker, raw_redis, ready_message_ids, run_burst


def test_unique_raced_from_8_threads_makes_one_message(client: Client) -> None:
    @client.task(name="report", unique=True)
    def report(day: str, *, full: bool = False) -> str:
        return day

    barrier = threading.Barrier(8)
    ids: list[str] = []

    def enqueue() -> None:
        barrier.wait()
        for _ in range(20):
            ids.append(report.enqueue("2024-01-01", full=True).id)

    threads = [threading.Thread(target=enqueue) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(ids) == 160 and len(set(ids)) == 1
    assert ready_message_ids(client.broker, "default") == [ids[0]]
    # Other arguments are another message; keyword order does not matter.
    other = report.enqueue("2024-01-02")
    assert other.id != ids[0]
    assert report.enqueue("2024-01-01", full=True).id == ids[0]
    assert client.queue_stats().ready == 2


def test_a_second_enqueue_after_the_first_finished_makes_a_new_one(client: Client) -> None:
    runs: list[int] = []

    @client.task(name="sync_account", unique=True)
    def sync_account(n: int) -> int:
        runs.append(n)
        return n

    first = sync_account.enqueue(1)
    assert sync_account.enqueue(1).id == first.id
    run_burst(client)
    assert first.result(timeout=1) == 1
    second = sync_account.enqueue(1)
    assert second.id != first.id
    assert sync_account.enqueue(1).id == second.id
    run_burst(client)
    assert runs == [1, 1]


def test_unique_per_call_and_bulk(client: Client) -> None:
    @client.task(name="t")
    def t(x: int) -> int:
        return x

    plain = [t.enqueue(1).id, t.enqueue(1).id]
    assert plain[0] != plain[1]  # not unique unless asked
    once = t.options(unique=True)
    handles = once.enqueue_many([(5,), (5,), (6,), (5,)])
    assert handles[0].id == handles[1].id == handles[3].id != handles[2].id
    assert once.enqueue(5).id == handles[0].id
    assert client.queue_stats().ready == 4  # 2 plain + 2 unique


def test_unique_is_held_across_retries_and_released_by_a_dead_letter(client: Client) -> None:
    @client.task(name="fragile", unique=True, retries=1, initial_delay=3600, jitter=False)
    def fragile(n: int) -> None:
        raise RuntimeError("down")

    h = fragile.enqueue(1)
    run_burst(client)  # attempt 1 fails: its retry waits on the schedule
    assert client.queue_stats().scheduled == 1
    assert fragile.enqueue(1).id == h.id  # a retry is not a finish
    # Dead-lettered (no retry left): finished, so the next enqueue is a new message.
    quick = fragile.options(retries=0)
    dead = quick.enqueue(2)
    assert quick.enqueue(2).id == dead.id
    run_burst(client)
    assert client.dead_letters.get(dead.id) is not None
    assert quick.enqueue(2).id != dead.id
    assert fragile.enqueue(1).id == h.id  # the first still waits for its retry


def test_failed_and_cancelled_release_the_marker(client: Client) -> None:
    @client.task(name="quiet", unique=True, dead_letter=False)
    def quiet() -> None:
        raise ValueError("no")

    first = quiet.enqueue()
    run_burst(client)
    assert quiet.enqueue().id != first.id

    @client.task(name="later", unique=True)
    def later() -> None:
        return None

    scheduled = later.options(delay=3600).enqueue()
    assert later.options(delay=3600).enqueue().id == scheduled.id
    assert scheduled.cancel()
    assert later.options(delay=3600).enqueue().id != scheduled.id


def test_task_id_reuse_while_queued_or_scheduled_returns_the_existing(client: Client) -> None:
    @client.task(name="t")
    def t(x: int) -> int:
        return x

    queued = t.options(task_id="job-1").enqueue(1)
    again = t.options(task_id="job-1").enqueue(2)  # other arguments: the same message
    assert again.id == queued.id == "job-1"
    assert ready_message_ids(client.broker, "default") == ["job-1"]
    scheduled = t.options(task_id="job-2", delay=3600).enqueue(1)
    assert t.options(task_id="job-2").enqueue(1).id == scheduled.id
    assert client.queue_stats().scheduled == 1 and client.queue_stats().ready == 1
    run_burst(client)
    assert queued.result(timeout=1) == 1
    # Finished: the id may be used again, for a new message.
    assert t.options(task_id="job-1").enqueue(3).id == "job-1"
    assert client.queue_stats().ready == 1
    run_burst(client)
    assert queued.result(timeout=1) == 3


@pytest.mark.asyncio
async def test_task_id_reuse_while_running_returns_the_existing(client: Client) -> None:
    release = asyncio.Event()
    runs: list[int] = []

    @client.task(name="long")
    async def long(x: int) -> int:
        runs.append(x)
        await release.wait()
        return x

    h = await long.options(task_id="run-1").aenqueue(1)
    async with background_worker(client):
        await await_until(lambda: runs, 5, message="the attempt to start")
        again = await long.options(task_id="run-1").aenqueue(2)
        assert again.id == h.id
        release.set()
        assert await h.aresult(timeout=5) == 1
        # Finished: a new message under the same id.
        await await_until(lambda: _free(client, "id:run-1"), 5, message="the marker's release")
        fresh = await long.options(task_id="run-1").aenqueue(3)
        assert fresh.id == "run-1"
        await await_until(lambda: runs == [1, 3], 5, message="the new message to run")
        await await_until(lambda: _result(client, "run-1") == 3, 5,
                          message="the new message's record")


def _result(client: Client, message_id: str) -> Any:
    record = client.broker.get_record("default", message_id)
    return record.result if record is not None and record.is_final else None


def _free(client: Client, key: str) -> bool:
    broker: Any = client.broker
    if isinstance(broker, RedisBroker):
        return not raw_redis(broker).exists(broker.keys.queue("default").unique_marker(key))
    return ("default", key) not in broker._unique_markers


def test_the_marker_expires_with_the_idempotency_ttl(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)

    @client.task(name="t", unique=True)
    def t() -> None:
        return None

    h = t.enqueue()
    (marker,) = raw_redis(redis_broker).scan_iter(
        match=redis_broker.keys.queue("default").unique_marker("*"))
    assert raw_redis(redis_broker).get(marker).decode() == h.id
    ttl = raw_redis(redis_broker).ttl(marker)
    assert 0 < ttl <= redis_broker.idempotency_ttl


def test_idempotency_key_and_unique_together(client: Client) -> None:
    @client.task(name="t", unique=True)
    def t(x: int) -> int:
        return x

    a = t.options(idempotency_key="k").enqueue(1)
    assert t.options(idempotency_key="k").enqueue(2).id == a.id  # the key wins
    assert t.enqueue(1).id == a.id  # the same arguments: unique
    b = t.enqueue(2)
    assert b.id != a.id
    assert client.queue_stats().ready == 2
