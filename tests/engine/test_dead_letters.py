"""client.dead_letters: list, get, count, replay and purge, sync and async."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from blitzq_django.engine import (
    Client,
    DeadLetter,
    MemoryBroker,
    RedisBroker,
    TaskFailed,
    current_task,
)
from blitzq_django.engine.brokers.base import DEAD, Settlement
from blitzq_django.engine.client.dead_letters import _replayable
from blitzq_django.engine.core import record as states

from .helpers import arun_burst, dead_letter_ids, pending_count, ready_message_ids, run_burst

HOUR_MS = 3_600_000


def now_ms() -> int:
    return int(time.time() * 1000)


class App:
    """A client with a task that fails until told to work, and counts its runs."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.fixed = False
        self.runs: collections.Counter[str] = collections.Counter()
        self.attempts: dict[str, list[int]] = collections.defaultdict(list)

        @client.task(name="jobs.charge", retries=1, initial_delay=0)
        def charge(x: int) -> int:
            task = current_task()
            assert task is not None
            self.runs[task.id] += 1
            self.attempts[task.id].append(task.attempt)
            if not self.fixed:
                raise ValueError(f"charge {x} failed")
            return x * 10

        @client.task(name="jobs.refund", dont_retry_on=(KeyError,), retries=3)
        def refund(x: int) -> int:
            self.runs[current_task().id] += 1  # type: ignore[union-attr]
            if not self.fixed:
                raise KeyError(x)
            return -x

        @client.task(name="mail.send", queue="mail")
        def send(x: int) -> int:
            self.runs[current_task().id] += 1  # type: ignore[union-attr]
            if not self.fixed:
                raise ConnectionError(x)
            return x

        self.charge, self.refund, self.send = charge, refund, send

    def plant(self, task: Any, x: int, dead_ms: int, reason: str = "retries exhausted") -> str:
        """Dead-letter a message as a worker would have at ``dead_ms`` (no waiting)."""
        h = task.enqueue(x)
        broker = self.client.broker

        async def settle() -> None:
            await broker.prepare([h.queue])
            (delivery,) = await broker.fetch([h.queue], "planter", 1, 10)
            letter = DeadLetter(id=h.id, queue=h.queue, task=task.name, reason=reason,
                                payload=delivery.payload or b"", error_type="ValueError",
                                error_message="planted", dead_ms=dead_ms)
            assert await broker.settle("planter", [
                Settlement(delivery, DEAD, h.id, body=letter.to_bytes())], dead_ms) == [True]
            await broker.aclose()

        # A loop of its own, in a thread: the caller may be an async test with a running loop.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, settle()).result(10)
        return h.id


@pytest.fixture
def app(client: Client) -> App:
    return App(client)


def test_list_get_and_count(app: App) -> None:
    charges = [app.charge.enqueue(i) for i in range(3)]
    refund = app.refund.enqueue(9)
    mail = app.send.enqueue(1)
    run_burst(app.client, queues=("default", "mail"))
    dl = app.client.dead_letters

    listed = dl.list()
    assert {x.id for x in listed} == {h.id for h in [*charges, refund]}
    assert dl.count() == 4
    assert [x.id for x in dl.list("mail")] == [mail.id]
    assert dl.count("mail") == 1

    letter = dl.get(charges[0].id)
    assert letter is not None
    assert letter.task == "jobs.charge" and letter.queue == "default"
    assert letter.reason == "retries exhausted" and letter.attempt == 2
    assert letter.error_type == "ValueError" and letter.error_message == "charge 0 failed"
    assert letter.traceback and "charge 0 failed" in letter.traceback
    assert letter.message is not None and letter.message.args == [0]
    assert dl.get(mail.id) is None  # another queue
    assert dl.get(mail.id, "mail") is not None
    assert dl.get("no-such-id") is None

    assert {x.id for x in dl.list(task="jobs.*")} == {h.id for h in [*charges, refund]}
    assert [x.id for x in dl.list(task="jobs.ref*")] == [refund.id]
    assert [x.id for x in dl.list(reason="not retryable")] == [refund.id]
    assert dl.count(reason="not retryable") == 1
    assert dl.count(task="jobs.charge") == 3
    assert dl.count(task="jobs.charge", reason="not retryable") == 0
    assert dl.list(task="nothing*") == []

    page1, page2 = dl.list(limit=2), dl.list(limit=2, offset=2)
    assert len(page1) == 2 and len(page2) == 2
    assert [x.id for x in page1 + page2] == [x.id for x in listed]


def test_time_filters(app: App) -> None:
    now = now_ms()
    old = app.plant(app.charge, 1, now - 2 * HOUR_MS)
    recent = app.plant(app.charge, 2, now - 10 * 60_000)
    fresh = app.plant(app.charge, 3, now - 1000)
    dl = app.client.dead_letters
    assert [x.id for x in dl.list()] == [fresh, recent, old]  # newest first
    assert [x.id for x in dl.list(older_than=3600)] == [old]
    assert [x.id for x in dl.list(newer_than=3600)] == [fresh, recent]
    assert [x.id for x in dl.list(older_than=60, newer_than=3 * 3600)] == [recent, old]
    assert dl.count(older_than=60) == 2
    assert dl.count(newer_than=60) == 1
    assert dl.count(newer_than=60, task="jobs.*") == 1
    assert dl.count(older_than=10 * 3600) == 0


def test_replay_runs_again_under_the_same_id_with_a_fresh_budget(app: App) -> None:
    h = app.charge.enqueue(4)
    run_burst(app.client)
    with pytest.raises(TaskFailed):
        h.result(timeout=5)
    assert app.attempts[h.id] == [1, 2]

    app.fixed = True
    assert app.client.dead_letters.replay(h.id) == 1
    assert app.client.dead_letters.get(h.id) is None
    assert app.client.dead_letters.count() == 0
    # The old dead-lettered record is gone: a waiter sees the new outcome, not the old one.
    assert app.client.inspect(h.id) is None
    assert ready_message_ids(app.client.broker, "default") == [h.id]
    run_burst(app.client)
    assert h.result(timeout=5) == 40  # the producer's old handle
    assert app.attempts[h.id] == [1, 2, 1]  # attempt back to 1
    assert app.client.get_result(h.id, 5).attempt == 1


def test_replay_of_a_message_that_fails_again_gets_the_whole_budget(app: App) -> None:
    h = app.charge.enqueue(4)
    run_burst(app.client)
    assert app.client.dead_letters.replay([h.id]) == 1
    run_burst(app.client)
    assert app.attempts[h.id] == [1, 2, 1, 2]
    letter = app.client.dead_letters.get(h.id)
    assert letter is not None and letter.attempt == 2
    assert app.client.get_result(h.id, 5).state == states.DEAD_LETTERED


def test_replay_with_new_id_keeps_the_old_record(app: App) -> None:
    h = app.charge.enqueue(5)
    run_burst(app.client)
    app.fixed = True
    assert app.client.dead_letters.replay(h.id, new_id=True) == 1
    (new_id,) = ready_message_ids(app.client.broker, "default")
    assert new_id != h.id
    run_burst(app.client)
    assert app.client.get_result(new_id, 5).result == 50
    old = app.client.get_result(h.id, 5)
    assert old.state == states.DEAD_LETTERED  # untouched
    assert app.runs[h.id] == 2 and app.runs[new_id] == 1
    assert app.client.dead_letters.count() == 0


def test_replay_many_and_replay_all_with_filters(app: App) -> None:
    charges = [app.charge.enqueue(i) for i in range(4)]
    refund = app.refund.enqueue(1)
    run_burst(app.client)
    dl = app.client.dead_letters
    app.fixed = True
    assert dl.replay([charges[0].id, charges[1].id, "no-such-id"]) == 2
    assert dl.count() == 3
    assert dl.replay_all(task="jobs.charge") == 2
    assert [x.id for x in dl.list()] == [refund.id]
    assert dl.replay_all(reason="retries exhausted") == 0
    run_burst(app.client)
    assert [h.result(timeout=5) for h in charges] == [0, 10, 20, 30]
    assert dl.replay_all() == 1
    run_burst(app.client)
    assert refund.result(timeout=5) == -1
    assert all(n == (3 if i in {h.id for h in charges} else 2) for i, n in app.runs.items())


@pytest.mark.parametrize("new_id", [False, True], ids=["same-id", "new-id"])
def test_concurrent_replays_of_one_dead_letter_run_it_once(app: App, new_id: bool) -> None:
    h = app.charge.enqueue(6)
    run_burst(app.client)
    app.fixed = True
    dl = app.client.dead_letters
    barrier = threading.Barrier(4, timeout=10)
    replayed: list[int] = []

    def replay() -> None:
        barrier.wait()
        replayed.append(dl.replay(h.id, new_id=new_id))

    threads = [threading.Thread(target=replay) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(replayed) == [0, 0, 0, 1]
    assert len(ready_message_ids(app.client.broker, "default")) == 1
    run_burst(app.client)
    assert sum(app.runs.values()) == 2 + 1


def test_replays_that_both_read_the_letter_still_enqueue_it_once(app: App) -> None:
    # Force the race: both replays decoded the dead letter before either wrote.
    h = app.charge.enqueue(7)
    run_burst(app.client)
    broker = app.client.broker
    letter = app.client.dead_letters.get(h.id)
    assert letter is not None
    first = _replayable([letter], new_id=True)
    second = _replayable([letter], new_id=True)
    assert first[0][1] != second[0][1]
    assert broker.replay_dead_letters("default", first) == 1
    assert broker.replay_dead_letters("default", second) == 0
    assert ready_message_ids(broker, "default") == [first[0][1]]


def test_purge_all_by_ids_and_by_filter(app: App) -> None:
    now = now_ms()
    charges = [app.plant(app.charge, i, now - i * HOUR_MS) for i in range(4)]
    for i in range(2):
        app.plant(app.refund, i, now, reason="not retryable")
    app.plant(app.send, 1, now)
    dl = app.client.dead_letters
    assert dl.purge(ids=[charges[0], "no-such-id"]) == 1
    assert dl.get(charges[0]) is None and dl.count() == 5
    assert dl.purge(older_than=int(2.5 * 3600)) == 1  # charges[3]
    assert dl.purge(reason="not retryable") == 2
    assert sorted(x.id for x in dl.list()) == sorted(charges[1:3])
    assert dl.purge(task="jobs.*") == 2
    assert dl.count() == 0
    assert dl.count("mail") == 1
    assert dl.purge("mail") == 1
    assert dl.list("mail") == [] and dl.purge("mail") == 0
    assert dead_letter_ids(app.client.broker, "mail") == []
    assert dead_letter_ids(app.client.broker, "default") == []


def test_purged_dead_letter_cannot_be_replayed(app: App) -> None:
    h = app.charge.enqueue(1)
    run_burst(app.client)
    assert app.client.dead_letters.purge() == 1
    assert app.client.dead_letters.replay(h.id) == 0
    assert ready_message_ids(app.client.broker, "default") == []


@pytest.mark.asyncio
async def test_async_api(app: App) -> None:
    now = now_ms()
    old = app.plant(app.charge, 1, now - 2 * HOUR_MS)
    refund = app.plant(app.refund, 2, now, reason="not retryable")
    fresh = app.plant(app.charge, 3, now)
    dl = app.client.dead_letters
    assert {x.id for x in await dl.alist()} == {old, refund, fresh}
    assert [x.id for x in await dl.alist(older_than=3600)] == [old]
    assert [x.id for x in await dl.alist(task="jobs.charge", newer_than=60)] == [fresh]
    assert len(await dl.alist(limit=1, offset=1)) == 1
    assert await dl.acount() == 3
    assert await dl.acount(reason="not retryable") == 1
    letter = await dl.aget(refund)
    assert letter is not None and letter.reason == "not retryable"
    assert await dl.aget("no-such-id") is None

    app.fixed = True
    assert await dl.areplay([old, fresh]) == 2
    assert await dl.areplay(old) == 0  # already replayed
    await arun_burst(app.client)
    assert (await app.client.aget_result(old, 5)).result == 10
    assert (await app.client.aget_result(fresh, 5)).result == 30
    assert await dl.apurge(ids=[refund]) == 1
    assert await dl.acount() == 0
    app.plant(app.charge, 4, now)
    assert await dl.apurge(task="jobs.*") == 1
    app.plant(app.charge, 5, now)
    assert await dl.apurge() == 1
    assert await dl.acount() == 0


@pytest.mark.asyncio
async def test_async_replay_with_new_id(app: App) -> None:
    h = await app.charge.aenqueue(8)
    await arun_burst(app.client)
    app.fixed = True
    assert await app.client.dead_letters.areplay(h.id, new_id=True) == 1
    (new_id,) = ready_message_ids(app.client.broker, "default")
    await arun_burst(app.client)
    assert (await app.client.aget_result(new_id, 5)).result == 80
    assert (await app.client.aget_result(h.id, 5)).state == states.DEAD_LETTERED


@pytest.fixture(params=["redis", "memory"])
def small_dlq_client(request: pytest.FixtureRequest) -> Iterator[Client]:
    if request.param == "memory":
        yield Client(MemoryBroker(dead_letter_max=3))
        return
    # The redis_broker fixture cleans up the test namespace; this one shares it.
    shared: RedisBroker = request.getfixturevalue("redis_broker")
    broker = RedisBroker(shared.url, namespace=shared.keys.namespace, dead_letter_max=3)
    yield Client(broker)
    broker.close()


def test_dead_letter_max_trims_the_oldest(small_dlq_client: Client) -> None:
    app = App(small_dlq_client)
    handles = []
    for i in range(5):  # one at a time, so their dead-letter times are ordered
        handles.append(app.charge.options(retries=0).enqueue(i))
        run_burst(small_dlq_client)
        assert small_dlq_client.dead_letters.get(handles[-1].id) is not None
    dl = small_dlq_client.dead_letters
    assert dl.count() == 3
    assert [x.id for x in dl.list()] == [h.id for h in reversed(handles[2:])]
    for h in handles[:2]:
        assert dl.get(h.id) is None
    if isinstance(small_dlq_client.broker, RedisBroker):
        raw: redis.Redis = small_dlq_client.broker.sync.client
        keys = small_dlq_client.broker.keys.queue("default")
        assert raw.zcard(keys.dead_letters) == 3
        assert raw.hlen(keys.dead_letter_data) == 3  # no orphaned bodies
    assert pending_count(small_dlq_client.broker, "default") == 0


def test_bulk_operations_span_several_batches(app: App) -> None:
    # More dead letters than one round trip handles (BATCH = 200).
    handles = app.charge.options(retries=0).enqueue_many([(i,) for i in range(450)])
    refunds = app.refund.enqueue_many([(i,) for i in range(30)])
    run_burst(app.client, concurrency=100)
    dl = app.client.dead_letters
    assert dl.count() == 480
    assert dl.count(task="jobs.charge") == 450
    listed = dl.list(limit=1000)
    assert len(listed) == 480 and len({x.id for x in listed}) == 480
    assert len(dl.list(task="jobs.charge", limit=1000, offset=400)) == 50
    app.fixed = True
    assert dl.replay_all(task="jobs.charge") == 450
    assert dl.count() == 30
    run_burst(app.client, concurrency=100)
    assert all(h.result(timeout=5) == i * 10 for i, h in enumerate(handles))
    assert dl.purge(ids=[h.id for h in refunds]) == 30
    assert dl.count() == 0


def test_replay_keeps_per_call_options(app: App) -> None:
    h = app.charge.options(retries=3).enqueue(2)
    run_burst(app.client)
    assert app.attempts[h.id] == [1, 2, 3, 4]
    assert app.client.dead_letters.replay(h.id) == 1
    run_burst(app.client)
    assert app.attempts[h.id] == [1, 2, 3, 4] * 2  # the per-call budget again, from 1


def test_unknown_task_letter_runs_once_a_worker_knows_the_task(broker: Any) -> None:
    producer, consumer = Client(broker), Client(broker)

    @producer.task(name="later.deployed")
    def early(x: int) -> int:
        return x

    h = early.enqueue(21)

    @consumer.task(name="other")
    def other() -> None:
        return None

    run_burst(consumer)
    letter = consumer.dead_letters.get(h.id)
    assert letter is not None and letter.reason == "unknown task"

    @consumer.task(name="later.deployed")
    def deployed(x: int) -> int:
        return x * 2

    assert consumer.dead_letters.replay(h.id) == 1
    run_burst(consumer)
    assert h.result(timeout=5) == 42
