"""The events stream (core/events.py): each kind from its own transition, the fields, the
cap, EVENTS off, the readers (cursor, follow, consumer group), on both brokers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from blitzq_django.engine import Client, ConfigurationError, MemoryBroker, RedisBroker
from blitzq_django.engine.brokers.base import DONE, REQUEUE, Settlement
from blitzq_django.engine.core import events as ev
from blitzq_django.engine.core.events import Event, valid_path
from blitzq_django.engine.worker import flusher

from ..support.waiting import await_until, wait_until
from .helpers import arun_burst, background_worker, raw_redis, run_burst


def kinds_of(client: Client, message_id: str, queue: str = "default") -> list[str]:
    return [e.kind for e in client.events(queue, count=10_000) if e.id == message_id]


def by_id(events: list[Event]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        out[e.id].append(e)
    return out


# -- the state machine (pure) -------------------------------------------------------------


@pytest.mark.parametrize("path", [
    ["enqueued", "started", "succeeded"],
    ["scheduled", "started", "failed"],
    ["enqueued", "started", "retried", "started", "dead_lettered", "replayed", "started",
     "succeeded"],
    ["enqueued", "dead_lettered"],  # rejected: unknown task, malformed, too many deliveries
    ["enqueued", "started", "recovered", "started", "succeeded"],
    ["enqueued", "recovered", "started", "succeeded"],  # died while it was prefetched
    ["enqueued", "started", "recovered", "succeeded"],  # claimed back by its own holder
    ["enqueued", "started", "requeued", "started", "cancelled"],
    ["enqueued", "requeued", "expired"],
    ["scheduled", "cancelled"],
    ["enqueued", "scheduled", "started", "succeeded"],  # a rate-limit deferral
    ["replayed", "started", "succeeded"],  # a replay under a new id
])
def test_valid_paths(path: list[str]) -> None:
    assert valid_path(path)


@pytest.mark.parametrize("path", [
    [],
    ["started", "succeeded"],  # no beginning
    ["enqueued", "succeeded"],  # never started
    ["enqueued", "started", "succeeded", "started"],  # after the end
    ["enqueued", "started", "succeeded", "replayed"],  # only a dead letter is replayed
    ["enqueued", "started", "started"],
    ["enqueued", "started", "expired"],  # expiry is checked before an attempt starts
    ["enqueued", "enqueued"],
    ["enqueued", "unknown"],
])
def test_invalid_paths(path: list[str]) -> None:
    assert not valid_path(path)


def test_terminal_kinds() -> None:
    assert {"succeeded", "failed", "dead_lettered", "cancelled", "expired"} == ev.TERMINAL
    assert ev.TERMINAL < ev.KINDS and len(ev.KINDS) == 16
    assert ev.WORKFLOW_KINDS < ev.KINDS and not ev.WORKFLOW_KINDS & ev.TERMINAL


def test_parse_maps_lua_false_to_none() -> None:
    import msgpack

    data = msgpack.packb(["enqueued", "a", "t", 5, False, False, False, False])
    assert ev.parse("5-0", "q", data) == Event("5-0", "q", "enqueued", "a", "t", 5)
    assert ev.parse("5-0", "q", ev.pack("succeeded", "a", "t", 7, 2, "w", 3, "E")) == Event(
        "5-0", "q", "succeeded", "a", "t", 7, 2, "w", 3, "E")
    assert ev.parse("5-0", "q", b"\xc1") is None
    assert ev.parse("5-0", "q", msgpack.packb([1, 2])) is None


# -- every kind, from its own transition ----------------------------------------------------


def test_enqueued_and_scheduled(client: Client) -> None:
    @client.task(name="t")
    def t(x: int) -> int:
        return x

    now = t.enqueue(1)
    later = t.options(delay=3600).enqueue(2)
    bulk = t.enqueue_many([(3,), (4,)])
    events = client.events()
    assert [(e.kind, e.id, e.task) for e in events] == [
        ("enqueued", now.id, "t"), ("scheduled", later.id, "t"),
        ("enqueued", bulk[0].id, "t"), ("enqueued", bulk[1].id, "t")]
    assert all(e.queue == "default" and e.time_ms > 0 for e in events)
    cursors = [e.cursor for e in events]
    assert cursors == sorted(cursors, key=lambda c: tuple(map(int, c.split("-"))))


@pytest.mark.parametrize("kind", ["async", "def"])
def test_started_and_succeeded_of_an_attempt(client: Client, kind: str) -> None:
    if kind == "async":
        @client.task(name="t")
        async def t(x: int) -> int:
            return x
    else:
        @client.task(name="t")
        def t(x: int) -> int:
            return x

    h = t.enqueue(1)
    run_burst(client, name="w1")
    events = [e for e in client.events() if e.id == h.id]
    assert [e.kind for e in events] == ["enqueued", "started", "succeeded"]
    started, done = events[1], events[2]
    assert (started.worker, started.attempt, started.task) == ("w1", 1, "t")
    assert (done.worker, done.attempt, done.error_type) == ("w1", 1, None)
    assert done.duration_ms is not None and done.duration_ms >= 0
    assert started.time_ms <= done.time_ms


def test_retried_failed_and_dead_lettered(client: Client) -> None:
    @client.task(name="flaky", retries=1, initial_delay=0, jitter=False)
    def flaky(fail: bool) -> int:
        if fail:
            raise KeyError("x")
        return 1

    @client.task(name="quiet", dead_letter=False)
    def quiet() -> None:
        raise ValueError("no")

    dead = flaky.enqueue(True)
    failed = quiet.enqueue()
    run_burst(client)
    assert kinds_of(client, dead.id) == ["enqueued", "started", "retried", "started",
                                         "dead_lettered"]
    assert kinds_of(client, failed.id) == ["enqueued", "started", "failed"]
    events = by_id(client.events())
    retried = events[dead.id][2]
    assert (retried.attempt, retried.error_type, retried.worker) == (1, "KeyError",
                                                                      retried.worker)
    assert events[dead.id][4].attempt == 2 and events[dead.id][4].error_type == "KeyError"
    assert events[failed.id][2].error_type == "ValueError"


def test_rejected_message_is_dead_lettered_without_a_start(client: Client) -> None:
    @client.task(name="gone")
    def gone() -> None:
        return None

    h = gone.enqueue()
    client.registry._specs.pop("gone")  # the worker does not know the task
    run_burst(client)
    assert kinds_of(client, h.id) == ["enqueued", "dead_lettered"]


def test_replayed(client: Client) -> None:
    @client.task(name="boom")
    def boom() -> None:
        raise RuntimeError("x")

    h = boom.enqueue()
    run_burst(client)
    assert client.dead_letters.replay(h.id) == 1
    replayed = [e for e in client.events() if e.kind == "replayed"]
    assert [(e.id, e.task, e.attempt) for e in replayed] == [(h.id, "boom", 1)]
    assert client.dead_letters.replay(h.id) == 0  # nothing left: no second event
    assert kinds_of(client, h.id) == ["enqueued", "started", "dead_lettered", "replayed"]


@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode recovers nothing (at-most-once): no recovered event")
async def test_requeued_and_recovered(client: Client) -> None:
    @client.task(name="t")
    def t() -> None:
        return None

    a, b = t.enqueue(), t.enqueue()
    broker = client.broker
    await broker.prepare(["default"])
    taken = await broker.fetch(["default"], "dead-worker", 2, 10)
    assert len(taken) == 2
    # One goes back on the queue (a shutdown); the other is recovered by another consumer.
    first = next(d for d in taken if d.payload and ev.peek(d.payload)[0] == a.id)
    other = next(d for d in taken if d is not first)
    assert await broker.settle("dead-worker", [
        Settlement(first, REQUEUE, a.id, body=first.payload or b"", state="queued", task="t",
                   attempt=1)], 1) == [True]
    claimed, _ = await broker.recover("default", "rescuer", 0, 10)
    assert [d.entry_id for d in claimed] == [other.entry_id]
    again, _ = await broker.recover("default", "rescuer", 0, 10)  # its own: no recovery
    assert [d.entry_id for d in again] == [other.entry_id]
    events = by_id(await client.aevents())
    assert [e.kind for e in events[a.id]] == ["enqueued", "requeued"]
    assert [(e.kind, e.worker) for e in events[b.id]] == [("enqueued", None),
                                                          ("recovered", "rescuer")]
    assert events[b.id][1].task == "t"


@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode recovers nothing (at-most-once)")
async def test_recovered_entry_that_is_not_a_message(client: Client) -> None:
    from .helpers import inject

    inject(client.broker, "default", b"\x93\xff\x00garbage")
    broker = client.broker
    await broker.prepare(["default"])
    (taken,) = await broker.fetch(["default"], "dead-worker", 1, 10)
    await broker.recover("default", "rescuer", 0, 10)
    (event,) = [e for e in await client.aevents() if e.kind == "recovered"]
    assert event.id == f"malformed:{taken.entry_id}" and event.task == ""


def test_cancelled_and_expired(client: Client) -> None:
    @client.task(name="t")
    def t() -> None:
        return None

    later = t.options(delay=3600).enqueue()
    assert later.cancel()
    assert kinds_of(client, later.id) == ["scheduled", "cancelled"]
    stale = t.options(expires=0.001).enqueue()
    expires_ms = int(time.time() * 1000) + 1
    wait_until(lambda: time.time() * 1000 > expires_ms + 1, message="its expiry to pass")
    run_burst(client)
    assert kinds_of(client, stale.id) == ["enqueued", "expired"]


# -- started: ownership, long attempts, track_state ------------------------------------------


@pytest.mark.asyncio
async def test_a_long_attempt_shows_started_while_it_runs(client: Client) -> None:
    release = asyncio.Event()

    @client.task(name="long")
    async def long() -> int:
        await release.wait()
        return 1

    h = long.enqueue()
    async with background_worker(client):
        found = await await_until(lambda: _started(client, h.id), 5,
                                  message="a started event while the attempt runs")
        assert found.time_ms > 0
        assert flusher.START_EVENT_DELAY_S < 1
        release.set()
        await await_until(lambda: "succeeded" in kinds_of(client, h.id), 5,
                          message="its outcome")
    # Written once: on its own, not again with the outcome.
    assert kinds_of(client, h.id) == ["enqueued", "started", "succeeded"]


async def _started(client: Client, message_id: str) -> Event | None:
    return next((e for e in await client.aevents() if e.id == message_id
                 and e.kind == "started"), None)


@pytest.mark.parametrize("track_state", [True, False])
def test_started_is_written_once_with_or_without_track_state(broker: Any,
                                                             track_state: bool) -> None:
    client = Client(broker, track_state=track_state)

    @client.task(name="t")
    async def t(x: int) -> int:
        return x

    handles = t.enqueue_many([(i,) for i in range(50)])
    run_burst(client)
    paths = by_id(client.events(count=1000))
    for h in handles:
        assert [e.kind for e in paths[h.id]] == ["enqueued", "started", "succeeded"]


@pytest.mark.asyncio
@pytest.mark.reliable_only("fast mode has no ownership: a popped message is its worker's alone")
async def test_started_is_only_written_while_the_consumer_owns_the_entry(
        client: Client) -> None:
    from blitzq_django.engine.worker import outcome

    @client.task(name="t")
    def t() -> None:
        return None

    h = t.enqueue()
    broker = client.broker
    await broker.prepare(["default"])
    (delivery,) = await broker.fetch(["default"], "stale", 1, 10)
    await broker.recover("default", "fresh", 0, 10)  # the lease went to another worker
    message = _message(delivery.payload)
    policy = outcome.SettleOptions(True, False, "stale", events=True)
    late = outcome.started(delivery, message, 123, policy, 60_000)
    assert await broker.settle("stale", [late], 1) == [False]
    done = Settlement(delivery, DONE, h.id, state="succeeded", task="t", attempt=1,
                      started_ms=123)
    assert await broker.settle("stale", [done], 1) == [False]
    assert kinds_of(client, h.id) == ["enqueued", "recovered"]
    assert await broker.settle("fresh", [done], 1) == [True]
    assert kinds_of(client, h.id) == ["enqueued", "recovered", "started", "succeeded"]
    started = next(e for e in await client.aevents() if e.kind == "started")
    assert (started.time_ms, started.worker) == (123, "fresh")


def _message(payload: bytes | None) -> Any:
    from blitzq_django.engine.core.message import decode

    assert payload is not None
    return decode(payload)


@pytest.mark.asyncio
async def test_a_resent_batch_writes_its_events_once(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)

    @client.task(name="t")
    def t() -> None:
        return None

    h = t.enqueue()
    await redis_broker.prepare(["default"])
    (delivery,) = await redis_broker.fetch(["default"], "w", 1, 10)
    done = Settlement(delivery, DONE, h.id, state="succeeded", task="t", attempt=1)
    assert await redis_broker.settle("w", [done], 1, token="tok") == [True]
    assert await redis_broker.settle("w", [done], 1, token="tok") == [True]  # the receipt
    assert kinds_of(client, h.id) == ["enqueued", "succeeded"]


# -- cap, off ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["redis", "memory"])
def test_the_stream_is_capped(kind: str, request: pytest.FixtureRequest) -> None:
    if kind == "memory":
        broker: Any = MemoryBroker(events_maxlen=10)
    else:
        base = request.getfixturevalue("redis_broker")
        broker = RedisBroker(base.url, namespace=base.keys.namespace, events_maxlen=10)
    client = Client(broker)

    @client.task(name="t")
    def t(x: int) -> None:
        return None

    t.enqueue_many([(i,) for i in range(1000)])
    kept = client.events(count=10_000)
    # MAXLEN ~ trims whole stream nodes (100 entries each by default): about the cap.
    assert 10 <= len(kept) <= (10 if kind == "memory" else 200)
    assert kept[-1].kind == "enqueued"  # the newest are kept
    broker.close()


def test_events_off_writes_nothing(request: pytest.FixtureRequest, redis_url: str,
                                   namespace: str) -> None:
    brokers: list[Any] = [MemoryBroker(events_maxlen=0),
                          RedisBroker(redis_url, namespace=namespace, events_maxlen=0)]
    request.getfixturevalue("redis_broker")  # cleans the namespace up afterwards
    for broker in brokers:
        client = Client(broker, track_state=True)

        @client.task(name="t", retries=1, initial_delay=0, jitter=False)
        def t(fail: bool) -> None:
            if fail:
                raise KeyError("x")

        t.enqueue(False)
        t.enqueue(True)
        t.options(delay=0.001).enqueue(False)
        run_burst(client)
        assert client.dead_letters.replay_all() == 1
        run_burst(client)
        assert client.events() == []
        if isinstance(broker, RedisBroker):
            assert not raw_redis(broker).exists(broker.keys.queue("default").events)
        broker.close()


def test_settings_errors() -> None:
    with pytest.raises(ConfigurationError, match="events_maxlen"):
        MemoryBroker(events_maxlen=-1)
    with pytest.raises(ConfigurationError, match="events_maxlen"):
        RedisBroker(events_maxlen=1.5)  # type: ignore[arg-type]


# -- reading ------------------------------------------------------------------------------------


def test_reading_on_from_a_cursor(client: Client) -> None:
    @client.task(name="t")
    def t(x: int) -> None:
        return None

    handles = t.enqueue_many([(i,) for i in range(25)])
    seen: list[Event] = []
    after = "0"
    while True:
        page = client.events(after=after, count=10)
        if not page:
            break
        assert len(page) <= 10
        seen += page
        after = page[-1].cursor
    assert [e.id for e in seen] == [h.id for h in handles]
    assert client.events(after="$") == []  # "$" without block_ms: nothing
    assert client.events("other") == []
    with pytest.raises(ConfigurationError, match="after"):
        client.events(after="yesterday")
    with pytest.raises(ConfigurationError, match="count"):
        client.events(count=0)
    with pytest.raises(ConfigurationError, match="block_ms"):
        client.events(block_ms=0)


def test_follow_sync_waits_for_new_events(client: Client) -> None:
    @client.task(name="t")
    def t() -> None:
        return None

    t.enqueue()
    got: list[list[Event]] = []
    reader = threading.Thread(target=lambda: got.append(
        client.events(after="$", block_ms=5000)))
    reader.start()
    wait_until(lambda: _blocked(client), 5, message="the reader to block")
    h = t.enqueue()
    reader.join(10)
    assert [e.id for e in got[0]] == [h.id]
    assert client.events(after=got[0][0].cursor, block_ms=20) == []  # nothing newer


def _blocked(client: Client) -> bool:
    """A reader blocks in the broker (for "$": what comes after the call)."""
    if isinstance(client.broker, MemoryBroker):
        return bool(client.broker._changed._waiters)  # type: ignore[attr-defined]
    clients = raw_redis(client.broker).client_list()
    return any(c.get("cmd") == "xread" for c in clients)


@pytest.mark.asyncio
async def test_follow_async_waits_for_new_events(client: Client) -> None:
    @client.task(name="t")
    def t() -> None:
        return None

    before = await t.aenqueue()
    (first,) = await client.aevents()
    # From a cursor: whether the read blocks before the enqueue or not, it gets the event.
    reading = asyncio.ensure_future(client.aevents(after=first.cursor, block_ms=5000))
    h = await t.aenqueue()
    events = await asyncio.wait_for(reading, 10)
    assert [e.id for e in events] == [h.id] and before.id != h.id
    assert await client.aevents(after="$", block_ms=20) == []


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.asyncio
async def test_consumer_group_reads_each_event_once_until_acked(client: Client,
                                                                mode: str) -> None:
    @client.task(name="t")
    def t(x: int) -> None:
        return None

    handles = t.enqueue_many([(i,) for i in range(10)])

    async def read(consumer: str, **kw: Any) -> list[Event]:
        if mode == "sync":
            return await asyncio.to_thread(client.read_events, "default", "history",
                                           consumer, 4, **kw)
        return await client.aread_events("default", "history", consumer, 4, **kw)

    async def ack(cursors: list[str]) -> int:
        if mode == "sync":
            return client.ack_events("default", "history", cursors)
        return await client.aack_events("default", "history", cursors)

    a1 = await read("a")
    b1 = await read("b")
    a2 = await read("a")
    rest = await read("b")
    assert [len(x) for x in (a1, b1, a2, rest)] == [4, 4, 2, 0]
    assert [e.id for e in a1 + b1 + a2] == [h.id for h in handles]  # each once, in order
    # Unacknowledged: given again to their consumer (after a crash), never to another.
    assert [e.cursor for e in await read("a", pending=True)] == [e.cursor for e in a1]
    assert await ack([e.cursor for e in a1]) == 4
    assert [e.cursor for e in await read("a", pending=True)] == [e.cursor for e in a2]
    assert await ack([e.cursor for e in a2 + b1]) == 6
    assert await read("a", pending=True) == []
    assert await ack([e.cursor for e in a1]) == 0  # acked already
    # A new event reaches the group; a blocking read waits for it.
    waiting = asyncio.ensure_future(read("b", block_ms=5000))  # gets it, blocked first or not
    h = await t.aenqueue(99)
    assert [e.id for e in await asyncio.wait_for(waiting, 10)] == [h.id]
    # Another group reads everything kept, from the start.
    other = await client.aread_events("default", "audit", "x", 100)
    assert len(other) == 11


def test_group_names_are_checked(client: Client) -> None:
    with pytest.raises(ConfigurationError, match="group"):
        client.read_events("default", "", "a")
    with pytest.raises(ConfigurationError, match="consumer"):
        client.read_events("default", "g", "a b")
    with pytest.raises(ConfigurationError, match="cursor"):
        client.ack_events("default", "g", ["nope"])


def test_trimmed_pending_entries_are_dropped(redis_broker: RedisBroker) -> None:
    broker = RedisBroker(redis_broker.url, namespace=redis_broker.keys.namespace,
                         events_maxlen=1)
    client = Client(broker)

    @client.task(name="t")
    def t(x: int) -> None:
        return None

    t.enqueue(0)
    (read,) = client.read_events("default", "g", "a", 10)
    raw_redis(broker).xtrim(broker.keys.queue("default").events, maxlen=0)
    assert client.read_events("default", "g", "a", 10, pending=True) == []
    assert raw_redis(broker).xpending(broker.keys.queue("default").events, "g")["pending"] == 0
    assert read.kind == "enqueued"
    broker.close()


# -- a worker run end to end: every message a valid path with one terminal event ------------


@pytest.mark.asyncio
async def test_a_mixed_run_gives_every_message_a_valid_path(client: Client) -> None:
    @client.task(name="ok")
    async def ok(x: int) -> int:
        return x

    @client.task(name="sync_ok")
    def sync_ok(x: int) -> int:
        return x

    @client.task(name="flaky", retries=2, initial_delay=0, jitter=False)
    async def flaky(x: int) -> int:
        from blitzq_django.engine import current_task

        ctx = current_task()
        assert ctx is not None
        if ctx.attempt < 2 and x % 2:
            raise RuntimeError("once")
        if x % 5 == 0:
            raise ValueError("always")
        return x

    ids = [h.id for h in ok.enqueue_many([(i,) for i in range(40)])]
    ids += [h.id for h in sync_ok.enqueue_many([(i,) for i in range(40)])]
    ids += [h.id for h in flaky.enqueue_many([(i,) for i in range(40)])]
    await arun_burst(client)
    paths = by_id(await client.aevents(count=10_000))
    assert set(paths) == set(ids)
    for message_id in ids:
        kinds = [e.kind for e in paths[message_id]]
        assert valid_path(kinds), kinds
        assert sum(k in ev.TERMINAL for k in kinds) == 1 and kinds[-1] in ev.TERMINAL


def test_last_event_cursor_reads_on_from_the_newest_event(broker: Any) -> None:
    client = Client(broker)

    @client.task(name="job")
    def job() -> None: ...

    assert client.last_event_cursor() == "0-0"
    job.enqueue()
    cursor = client.last_event_cursor()
    assert cursor == client.events()[-1].cursor
    later = job.enqueue()
    assert [e.id for e in client.events(after=cursor)] == [later.id]

    async def newest() -> str:
        try:
            return await client.alast_event_cursor()
        finally:
            await broker.aclose()

    assert asyncio.run(newest()) == client.last_event_cursor()
