"""The feature stores behind the broker (brokers/capabilities.py): each behaves the same
on Redis and in memory, and the lease is atomic (a holder never renews or releases
another's)."""

from __future__ import annotations

import asyncio
import time

import pytest

from blitzq_django.engine import Client, MemoryBroker, RedisBroker
from blitzq_django.engine.brokers.base import Enqueue
from blitzq_django.engine.core.record import Record

from ..support.waiting import wait_until

Broker = RedisBroker | MemoryBroker


# -- the lease -----------------------------------------------------------------------


def test_one_holder_at_a_time(broker: Broker) -> None:
    mine = broker.lease("default", "history", "me", 10_000)
    theirs = broker.lease("default", "history", "them", 10_000)
    assert mine.hold() and mine.hold()  # taken, then renewed
    assert not theirs.hold()
    theirs.release()  # not theirs: nothing changes
    assert not theirs.hold() and mine.hold()
    mine.release()
    assert theirs.hold() and not mine.hold()


def test_leases_of_other_queues_and_purposes_are_apart(broker: Broker) -> None:
    assert broker.lease("default", "history", "me", 10_000).hold()
    assert broker.lease("default", "metrics", "them", 10_000).hold()
    assert broker.lease("other", "history", "them", 10_000).hold()


def test_an_expired_holder_can_neither_renew_nor_release_its_successors(broker: Broker) -> None:
    old = broker.lease("default", "metrics", "old", 50)
    new = broker.lease("default", "metrics", "new", 10_000)
    assert old.hold()
    # The old holder stalls past its TTL: the new one takes the lease once it expired.
    wait_until(new.hold, timeout=5, message="the old holder's lease to expire")
    assert not old.hold()  # compare-and-renew: not its token any more
    old.release()  # compare-and-delete: not its token, nothing deleted
    assert not broker.lease("default", "metrics", "third", 10_000).hold()
    assert new.hold()


def test_an_unknown_purpose_is_refused(redis_broker: RedisBroker) -> None:
    with pytest.raises(ValueError):
        redis_broker.lease("default", "nothing", "me", 1000)


# -- progress ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_progress_fields_merge_and_read_back(broker: Broker) -> None:
    store = broker.progress
    store.write("default", "m1", {"u": "7"})
    await store.awrite("default", "m1", {"d": "1", "t": "4"}, b"{}")
    assert store.read("default", "m1") == {"u": "7", "d": "1", "t": "4"}
    assert await store.aread("default", "m1") == store.read("default", "m1")
    assert store.read("default", "none") == {}
    assert store.read_many([("default", "m1"), ("default", "none")]) == [
        {"u": "7", "d": "1", "t": "4"}, {}]
    assert await store.aread_many([("default", "m1")]) == [store.read("default", "m1")]


@pytest.mark.asyncio
async def test_a_watch_returns_by_its_timeout(broker: Broker) -> None:
    async with broker.progress.watch("default", "m1") as changes:
        started = time.monotonic()
        await changes.wait(0.2)
        assert time.monotonic() - started < 1.0


# -- periodic ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_an_occurrence_is_claimed_once(broker: Broker) -> None:
    store = broker.periodic
    occurrence = (1000, "p-1", b"\x80", b"", b"")
    assert await store.claim("default", None, "every", 1000, [occurrence], b"info") == (1, -1)
    assert await store.claim("default", None, "every", 1000, [occurrence], b"info") == (
        0, 1000)
    assert store.read("default", ["every", "never"]) == ([1000, None], [b"info", None])
    assert await store.handled("default", ["every"]) == [1000]


@pytest.mark.asyncio
async def test_a_change_is_told_to_the_listeners(broker: Broker) -> None:
    store = broker.periodic
    heard, listening = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(store.listen_changes(heard.set, listening.set))
    await asyncio.wait_for(listening.wait(), 5)
    before = await store.version()
    await asyncio.to_thread(store.changed)
    await asyncio.wait_for(heard.wait(), 5)
    task.cancel()
    assert await store.version() == before + 1


# -- metrics -------------------------------------------------------------------------


def test_metrics_add_in_one_step(broker: Broker) -> None:
    store = broker.metrics
    assert store.cursor("default") == "0" and store.read("default") == {}
    store.add("default", {"c:enqueued": 2}, "5-0", [], {"a": 100, "b": 200}, 10)
    store.add("default", {"c:enqueued": 1, "c:started": 1}, "6-0", ["a"], {}, 10)
    assert store.read("default") == {"c:enqueued": "3", "c:started": "1", "cursor": "6-0"}
    assert store.cursor("default") == "6-0"
    assert store.enqueue_times("default", ["a", "b"]) == [None, 200]
    store.add("default", {}, "7-0", [], {"c": 1, "d": 2}, 2)  # over the most kept
    assert store.enqueue_times("default", ["b", "c", "d"]) == [None, None, None]


def test_a_fold_counts_on_both_brokers(broker: Broker) -> None:
    from blitzq_django.engine import metrics

    client = Client(broker)
    broker.enqueue([Enqueue("default", f"m{i}", b"x", task="t") for i in range(3)])
    assert metrics.fold(client, "default") == 3
    assert metrics.fold(client, "default") == 0
    assert metrics.read(client, "default").counters["enqueued"] == 3


def test_no_fold_while_another_holds_the_lease(broker: Broker) -> None:
    from blitzq_django.engine import metrics

    broker.enqueue([Enqueue("default", "m1", b"x", task="t")])
    assert broker.lease("default", "metrics", "another", 10_000).hold()
    assert metrics.fold(Client(broker), "default") == 0


# -- history -------------------------------------------------------------------------


def test_history_health_counts_unwritable_events(broker: Broker) -> None:
    store = broker.history
    assert store.health("default", "writers") == ({}, None)
    store.add_unwritable("default", 1000, "first")
    store.add_unwritable("default", 2000, "second")
    fields, _unread = store.health("default", "writers")
    assert fields == {"unwritable": "2", "unwritable_last_ms": "2000",
                      "unwritable_last": "second"}


def test_a_history_read_delivers_the_events_once(broker: Broker) -> None:
    store = broker.history
    broker.enqueue([Enqueue("default", "m1", b"x", task="t")])
    assert store.read("default", "writers", "w", 0, 0, None).events == []
    found = store.read("default", "writers", "w", 10, 0, None)
    assert [e.id for e in found.events] == ["m1"] and (found.lost, found.gaps) == (0, 0)
    assert store.read("default", "writers", "w", 10, 0, 10).events == []


# -- records, idempotency keys, the server -----------------------------------------


@pytest.mark.asyncio
async def test_records_in_one_read(broker: Broker) -> None:
    record = Record(id="m1", task="t", queue="default", state="queued", created_ms=1)
    broker.enqueue([Enqueue("default", "m1", b"x", record=record.to_bytes())])
    assert broker.records("default", ["m1", "none"]) == [record.to_bytes(), None]
    assert await broker.arecords("default", ["none"]) == [None]
    assert broker.records("default", []) == []


@pytest.mark.asyncio
async def test_the_holder_of_an_idempotency_key(broker: Broker) -> None:
    broker.enqueue([Enqueue("default", "m1", b"x", idempotency_key="k")])
    assert broker.idempotency_holder("default", "k") == "m1"
    assert broker.idempotency_holder("default", "other") is None
    assert await broker.aidempotency_holder("default", "k") == "m1"


def test_server_facts(broker: Broker) -> None:
    broker.ping()
    facts = broker.server_facts()
    if isinstance(broker, MemoryBroker):
        assert facts is None
        return
    assert facts is not None
    info, policy, why = facts
    assert info["redis_version"] and policy and why == ""


@pytest.mark.asyncio
async def test_a_value_kept_beside_a_message(broker: Broker) -> None:
    record = Record(id="m1", task="t", queue="default", state="queued", created_ms=1)
    broker.enqueue([Enqueue("default", "m1", b"x", record=record.to_bytes())])
    store = broker.attachments
    assert store.read("default", "m1") is None
    store.write("default", "m1", b"call", 60_000)
    await store.awrite("default", "m2", b"other", 60_000)
    assert store.read("default", "m1") == b"call"
    assert store.read_with_record("default", "m1") == (record.to_bytes(), b"call")
    assert await store.aread_with_record("default", "m2") == (None, b"other")


def test_where_the_messages_are(broker: Broker) -> None:
    assert broker.in_process is isinstance(broker, MemoryBroker)
    assert broker.location == ("memory" if broker.in_process else broker.url)
