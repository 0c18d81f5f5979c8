"""Live state without TRACK_STATE (issue 19, item 5): a running attempt shows as running
in inspect() and running() (the running index, core/running.py), a dead worker's
entries go with its registry entry, a scheduled message shows its due time, and when
nothing is known, explain_missing() says why. On every broker and delivery mode."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from blitzq_django.engine import Client, MemoryBroker, RedisBroker
from blitzq_django.engine.brokers.base import DONE, Settlement
from blitzq_django.engine.client import inspection as why
from blitzq_django.engine.core import record as states
from blitzq_django.engine.core.message import decode
from blitzq_django.engine.core.record import Record
from blitzq_django.engine.core.registry import WorkerInfo
from blitzq_django.engine.core.running import INDEX_DELAY_S
from blitzq_django.engine.worker import outcome

from ..support.waiting import await_until
from .helpers import background_worker, raw_redis, run_burst


def now_ms() -> int:
    return int(time.time() * 1000)


def same_kind(broker: Any, **options: Any) -> Any:
    """A broker like ``broker`` (same Redis, namespace and mode) with other options."""
    if isinstance(broker, MemoryBroker):
        return MemoryBroker(mode=broker.mode, **options)
    return RedisBroker(broker.url, namespace=broker.keys.namespace, mode=broker.mode,
                       **options)


def running_record(record: Record | None) -> Record | None:
    return record if record is not None and record.state == states.RUNNING else None


def index_keys(broker: Any, worker: str) -> int:
    """How many running index hashes of ``worker`` Redis holds (0 in memory)."""
    if not isinstance(broker, RedisBroker):
        return 0
    return raw_redis(broker).exists(broker.keys.queue("default").running(worker))


def long_task(client: Client, kind: str) -> tuple[Any, Any]:
    """A task that runs until released: (task, release())."""
    if kind == "async":
        gate = asyncio.Event()

        @client.task(name="long")
        async def long(n: int) -> int:
            await gate.wait()
            return n

        return long, gate.set
    blocked = threading.Event()

    @client.task(name="long")
    def long_def(n: int) -> int:
        blocked.wait(20)
        return n

    return long_def, blocked.set


# -- a running attempt ---------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["async", "def"])
async def test_a_running_task_shows_running_with_its_worker(client: Client, kind: str) -> None:
    assert not client.track_state  # the default
    task, release = long_task(client, kind)
    handle = task.enqueue(7)
    async with background_worker(client) as worker:
        record = await await_until(lambda: running_record(client.inspect(handle.id)), 5,
                                   message="inspect() to say running")
        seen_ms = now_ms()
        assert (record.id, record.task, record.queue, record.attempt, record.worker) == \
            (handle.id, "long", "default", 1, worker.name)
        assert record.created_ms and record.started_ms
        assert record.created_ms <= record.started_ms
        # Listed once it has run INDEX_DELAY_S, never sooner.
        assert seen_ms - record.started_ms >= INDEX_DELAY_S * 1000
        assert not record.is_final and record.due_ms is None
        assert await client.ainspect(handle.id) == record
        assert handle.inspect() == record and await handle.ainspect() == record

        (listed,) = client.running()
        assert (listed.id, listed.task, listed.queue, listed.worker, listed.attempt,
                listed.started_ms) == (handle.id, "long", "default", worker.name, 1,
                                       record.started_ms)
        assert await client.arunning() == [listed]
        assert client.running(["default"]) == [listed] and client.running(["other"]) == []
        on_redis = isinstance(client.broker, RedisBroker)
        assert index_keys(client.broker, worker.name) == (1 if on_redis else 0)

        release()
        final = await await_until(lambda: (r := client.inspect(handle.id)) is not None
                                  and r.is_final and r, 10, message="its outcome")
        assert final.state == states.SUCCEEDED and final.result == 7
        assert client.running() == [] and await client.arunning() == []
        assert index_keys(client.broker, worker.name) == 0  # the settlement removed it


@pytest.mark.asyncio
@pytest.mark.parametrize("track_state", [False, True])
async def test_listed_with_events_off_and_with_track_state(broker: Any,
                                                           track_state: bool) -> None:
    quiet = same_kind(broker, events_maxlen=0)
    client = Client(quiet, track_state=track_state)
    task, release = long_task(client, "async")
    handle = task.enqueue(1)
    try:
        async with background_worker(client) as worker:
            (listed,) = await await_until(client.arunning, 5, message="it to be listed")
            assert (listed.id, listed.worker) == (handle.id, worker.name)
            record = client.inspect(handle.id)
            assert record is not None and record.state == states.RUNNING
            assert record.worker == worker.name
            release()
            await await_until(lambda: client.inspect(handle.id).is_final, 10,  # type: ignore[union-attr]
                              message="its outcome")
            assert client.running() == []
            assert client.events() == []  # events off: the listing wrote none
    finally:
        await quiet.aclose()
        quiet.close()


@pytest.mark.asyncio
async def test_with_track_state_a_long_attempt_writes_one_started_event(broker: Any) -> None:
    client = Client(broker, track_state=True)
    task, release = long_task(client, "async")
    handle = task.enqueue(1)
    async with background_worker(client):
        await await_until(client.arunning, 5, message="it to be listed")
        release()
        await await_until(lambda: client.inspect(handle.id).is_final, 10,  # type: ignore[union-attr]
                          message="its outcome")
    kinds = [e.kind for e in client.events() if e.id == handle.id]
    assert kinds == ["enqueued", "started", "succeeded"]  # the listing wrote no second one


@pytest.mark.asyncio
async def test_a_record_written_at_enqueue_gives_way_to_running(client: Client) -> None:
    """The django.tasks backend writes a queued record at enqueue without TRACK_STATE:
    inspect() must still say running while the attempt runs."""
    task, release = long_task(client, "async")
    item = client.build(task.spec, (1,), {})
    # The backend writes the message's own creation time (a second clock read may fall
    # in a later millisecond on a loaded machine).
    queued = Record(id=item.message_id, task="long", queue="default", state=states.QUEUED,
                    created_ms=decode(item.payload).created_ms)
    client.broker.enqueue([replace(item, record=queued.to_bytes())])
    assert client.inspect(item.message_id).state == states.QUEUED  # type: ignore[union-attr]
    async with background_worker(client) as worker:
        record = await await_until(lambda: running_record(client.inspect(item.message_id)),
                                   5, message="running")
        assert record.worker == worker.name and record.created_ms == queued.created_ms
        release()


def test_short_attempts_are_never_listed(client: Client) -> None:
    @client.task(name="quick")
    def quick(n: int) -> int:
        return n

    handles = quick.enqueue_many([(n,) for n in range(200)])
    run_burst(client)
    assert all(client.inspect(h.id).state == states.SUCCEEDED  # type: ignore[union-attr]
               for h in handles)
    assert client.running() == []
    if isinstance(client.broker, RedisBroker):
        pattern = client.broker.keys.queue("default").running("*")
        assert list(raw_redis(client.broker).scan_iter(match=pattern)) == []


# -- a dead worker ---------------------------------------------------------------------------


async def _list_by_hand(client: Client, worker: str, ttl_ms: int) -> tuple[str, Any]:
    """What a worker does, by hand: a registry entry for ``ttl_ms`` and one attempt listed
    in its running index; returns the message id and its delivery."""
    broker: Any = client.broker

    @client.task(name="t")
    def t() -> None:
        return None

    handle = t.enqueue()
    await broker.prepare(["default"])
    (delivery,) = await broker.fetch(["default"], worker, 1, 10)
    now = now_ms()
    info = WorkerInfo(name=worker, host="h", pid=1, queues=["default"], heartbeat_ms=now,
                      expires_ms=now + ttl_ms)
    await broker.heartbeat(worker, info.to_bytes(), now, ttl_ms, ["default"])
    policy = outcome.SettleOptions(True, False, worker, events=bool(broker.events_maxlen))
    listing = outcome.started(delivery, decode(delivery.payload), now, policy, ttl_ms)
    assert await broker.settle(worker, [listing], now) == [True]
    return handle.id, delivery


@pytest.mark.asyncio
async def test_a_dead_workers_entries_go_with_its_registry_entry(client: Client) -> None:
    message_id, _ = await _list_by_hand(client, "killed", 400)
    record = client.inspect(message_id)
    assert record is not None and record.state == states.RUNNING
    assert record.worker == "killed" and record.task == "t"
    assert [r.id for r in client.running()] == [message_id]
    # It never settles and never beats again: gone from every reader with its registry
    # entry, and from Redis with the hash's TTL.
    await await_until(lambda: client.workers() == [], 5, message="the registry entry to expire")
    assert running_record(client.inspect(message_id)) is None
    assert client.running() == [] and await client.arunning() == []
    await await_until(lambda: index_keys(client.broker, "killed") == 0, 5,
                      message="the running index hash to expire")


@pytest.mark.asyncio
@pytest.mark.reliable_only("only reliable mode recovers a dead worker's message")
async def test_a_recovered_message_shows_on_its_new_worker_at_once(client: Client) -> None:
    broker: Any = client.broker
    message_id, _ = await _list_by_hand(client, "killed", 60_000)  # still in the registry
    (delivery,) = (await broker.recover("default", "fresh", 0, 10))[0]
    now = now_ms() + 5
    info = WorkerInfo(name="fresh", host="h", pid=2, queues=["default"], heartbeat_ms=now,
                      expires_ms=now + 60_000)
    await broker.heartbeat("fresh", info.to_bytes(), now, 60_000, ["default"])
    policy = outcome.SettleOptions(True, False, "fresh", events=bool(broker.events_maxlen))
    again = outcome.started(delivery, decode(delivery.payload), now, policy, 60_000)
    assert await broker.settle("fresh", [again], now) == [True]
    # Both list it; the later start is the attempt that runs.
    assert len(await broker.afind_running("default", message_id, ["killed", "fresh"])) == 2
    for record in (client.inspect(message_id), await client.ainspect(message_id)):
        assert record is not None and record.worker == "fresh" and record.started_ms == now
    (listed,) = client.running()
    assert (listed.id, listed.worker) == (message_id, "fresh")


@pytest.mark.asyncio
async def test_the_heartbeat_keeps_a_long_attempts_entry(client: Client) -> None:
    broker: Any = client.broker
    message_id, _ = await _list_by_hand(client, "alive", 300)
    now = now_ms()
    info = WorkerInfo(name="alive", host="h", pid=1, queues=["default"], heartbeat_ms=now,
                      expires_ms=now + 60_000)
    await broker.heartbeat("alive", info.to_bytes(), now, 60_000, ["default"])
    deadline = time.monotonic() + 0.6
    await await_until(lambda: time.monotonic() > deadline, 5, message="the first TTL to pass")
    assert [r.id for r in client.running()] == [message_id]
    if isinstance(broker, RedisBroker):
        ttl = raw_redis(broker).pttl(broker.keys.queue("default").running("alive"))
        assert 50_000 < ttl <= 60_000


@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode has no ownership: a popped message is its worker's alone")
async def test_a_worker_that_lost_the_lease_still_removes_its_own_entry(
        client: Client) -> None:
    broker: Any = client.broker
    message_id, delivery = await _list_by_hand(client, "stale", 60_000)
    await broker.recover("default", "fresh", 0, 10)  # the lease went to another worker
    done = Settlement(delivery, DONE, message_id, state="succeeded", task="t", attempt=1,
                      indexed=True)
    assert await broker.settle("stale", [done], now_ms()) == [False]  # not owned
    assert await broker.arunning_entries([("default", "stale")]) == [{}]
    assert client.running() == []


# -- scheduled: its due time ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_scheduled_message_shows_when_it_is_due(client: Client) -> None:
    @client.task(name="later")
    def later() -> None:
        return None

    handle = later.options(delay=60).enqueue()
    record = client.inspect(handle.id)
    assert record is not None and record.state == states.SCHEDULED
    assert record.created_ms is not None and record.due_ms == record.created_ms + 60_000
    assert await client.ainspect(handle.id) == record
    high = later.options(eta=_in(3600), priority="high").enqueue()
    due = client.inspect(high.id).due_ms  # type: ignore[union-attr]
    assert due is not None and abs(due - (now_ms() + 3_600_000)) < 5_000


def _in(seconds: float) -> Any:
    import datetime as dt

    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("track_state", [False, True])
def test_a_retry_backoff_shows_when_it_is_due(broker: Any, track_state: bool) -> None:
    client = Client(broker, track_state=track_state)

    @client.task(name="flaky", retries=3, initial_delay=60, jitter=False)
    def flaky() -> None:
        raise RuntimeError("not yet")

    handle = flaky.enqueue()
    began = now_ms()
    run_burst(client)
    record = client.inspect(handle.id)
    assert record is not None
    assert record.state == (states.RETRYING if track_state else states.SCHEDULED)
    # TRACK_STATE's record is the failed attempt's; the scheduled message is the next one
    assert record.attempt == (1 if track_state else 2)
    assert record.due_ms is not None
    assert began + 59_000 <= record.due_ms <= now_ms() + 60_000


# -- why nothing is known --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_explain_missing_tells_waiting_unknown_gone_and_finished_apart(
        client: Client) -> None:
    @client.task(name="t")
    def t() -> None:
        return None

    waiting = t.enqueue()
    assert client.inspect(waiting.id) is None  # no record of a waiting message
    for found in (client.explain_missing(waiting.id),
                  await client.aexplain_missing(waiting.id)):
        assert found.reason == why.WAITING and "'default'" in found.text
    assert client.explain_missing("f" * 32).reason == why.UNKNOWN
    assert client.explain_missing("f" * 32, state="running").reason == why.GONE
    finished = now_ms()
    lost = client.explain_missing("f" * 32, task="t", state="succeeded",
                                  finished_ms=finished)
    assert lost.reason == why.LOST
    assert lost.until_ms == finished + client.broker.record_ttl * 1000  # type: ignore[attr-defined]
    expired = client.explain_missing("f" * 32, task="t", state="failed",
                                     finished_ms=finished - 2 * 86_400_000)
    assert expired.reason == why.EXPIRED and "expired" in expired.text


def test_explain_missing_says_never_stored(broker: Any) -> None:
    client = Client(broker)

    @client.task(name="fire", store_result=False)
    def fire() -> int:
        return 1

    handle = fire.enqueue()
    run_burst(client)
    assert client.inspect(handle.id) is None
    found = client.explain_missing(handle.id, task="fire", state="succeeded",
                                   finished_ms=now_ms())
    assert found.reason == why.NOT_STORED and "'fire'" in found.text
    # A failure of the same task is stored under TRACK_STATE.
    tracked = Client(broker, track_state=True)
    tracked.task(name="fire", store_result=False)(lambda: 1)
    assert tracked.explain_missing(handle.id, task="fire", state="failed",
                                   finished_ms=now_ms()).reason == why.LOST


def test_explain_missing_cannot_tell_beyond_the_first_messages(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(why, "QUEUE_LOOK_LIMIT", 5)

    @client.task(name="t")
    def t(n: int) -> None:
        return None

    handles = t.enqueue_many([(n,) for n in range(10)])
    assert client.explain_missing(handles[2].id).reason == why.WAITING
    last = client.explain_missing(handles[-1].id)
    if isinstance(client.broker, MemoryBroker):
        assert last.reason == why.WAITING  # in memory every message is looked at
    else:
        assert last.reason == why.MAYBE_WAITING and "10 messages" in last.text
