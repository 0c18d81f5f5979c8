"""The scheduler on a real Redis: occurrence claims (exactly once, whatever the number of
schedulers), missed-run policies after a downtime (an injected clock), what
``client.schedules()`` shows, schedule changes pushed to running schedulers, and the
promotion of delayed messages by a scheduler."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest
import redis

from blitzq_django.engine import CallOptions, Client, MemoryBroker, RedisBroker
from blitzq_django.engine.client.schedules import ScheduleRegistry
from blitzq_django.engine.core.message import decode
from blitzq_django.engine.core.schedules import Schedule, build, occurrence_id
from blitzq_django.engine.errors import ConfigurationError
from blitzq_django.engine.scheduler import Scheduler

from ..support.clients import Listener, subscribers
from ..support.waiting import await_until
from .helpers import arun_burst

MINUTE = 60_000
T0 = 1_800_000_000_000 // MINUTE * MINUTE  # a whole minute, 2027


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def make_client(broker: Any, **options: Any) -> Client:
    client = Client(broker, **options)

    @client.task(name="jobs.tick")
    async def tick(label: str = "") -> str:
        return label

    return client


def stream_ids(r: redis.Redis, broker: RedisBroker, queue: str = "default") -> list[str]:
    return [decode(fields[b"m"]).id
            for _id, fields in r.xrange(broker.keys.queue(queue).stream)]


def scheduler(client: Client, now: int, schedules: Iterable[Schedule] = (),
              **options: Any) -> Scheduler:
    for schedule in schedules:
        client.schedule_registry.add(schedule)
    return Scheduler(client, clock=Clock(now), promote=False, **options)


@pytest.mark.asyncio
async def test_two_schedulers_racing_each_occurrence_dispatch_it_once(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = make_client(redis_broker)
    client.schedule_registry.add(build("every-minute", "jobs.tick", every=60))
    a, b = (Scheduler(client, clock=Clock(T0), promote=False) for _ in range(2))
    await asyncio.gather(a.load(), b.load())
    dispatched = 0
    for n in range(1, 21):
        now = T0 + n * MINUTE
        results = await asyncio.gather(a.tick(now), b.tick(now))
        counts = [d.dispatched for batch in results for d in batch]
        assert sorted(counts) == [0, 1], counts  # one claim wins, the other writes nothing
        dispatched += 1
    ids = stream_ids(redis_client, redis_broker)
    assert ids == [occurrence_id("every-minute", T0 + n * MINUTE) for n in range(1, 21)]
    assert dispatched == 20


@pytest.mark.asyncio
async def test_a_stale_scheduler_cannot_dispatch_an_occurrence_again(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = make_client(redis_broker)
    client.schedule_registry.add(build("m", "jobs.tick", every=60, missed="run_all"))
    fresh, stale = (Scheduler(client, clock=Clock(T0), promote=False) for _ in range(2))
    await fresh.load()
    await stale.load()
    for n in range(1, 4):
        await fresh.tick(T0 + n * MINUTE)
    # The stale one still believes nothing was handled since T0: its catch-up claims
    # three occurrences and the fourth; only the fourth is new.
    (result,) = await stale.tick(T0 + 4 * MINUTE)
    assert result.occurrences == tuple(T0 + n * MINUTE for n in range(1, 5))
    assert result.dispatched == 1 and result.previous_ms == T0 + 3 * MINUTE
    assert stale.handled["m"] == T0 + 4 * MINUTE
    assert len(stream_ids(redis_client, redis_broker)) == 4


@pytest.mark.parametrize(("policy", "expected"), [
    ("run_all", list(range(2, 13))),  # 11 occurrences: the 10 missed and the current one
    ("run_once", [12]),
    ("skip", []),
])
@pytest.mark.asyncio
async def test_missed_runs_after_a_downtime_follow_the_policy(
        redis_broker: RedisBroker, redis_client: redis.Redis, policy: str,
        expected: list[int]) -> None:
    client = make_client(redis_broker)
    client.schedule_registry.add(build("m", "jobs.tick", every=60, missed=policy, grace=5))
    first = Scheduler(client, clock=Clock(T0), promote=False)
    await first.load()
    await first.tick(T0 + MINUTE)  # ran once, then every scheduler went down
    # 11 minutes later (plus 30 s: the current occurrence is late too) a new one starts.
    later = T0 + 12 * MINUTE + 30_000
    second = Scheduler(client, clock=Clock(later), promote=False)
    await second.load()
    await second.tick()
    ids = stream_ids(redis_client, redis_broker)
    assert ids == [occurrence_id("m", T0 + n * MINUTE) for n in [1, *expected]]
    # Handled through the latest occurrence, whatever the policy: nothing runs twice.
    assert second.handled["m"] == T0 + 12 * MINUTE
    assert await second.tick(later + 1000) == []


@pytest.mark.parametrize("policy", ["run_once", "skip"])
@pytest.mark.asyncio
async def test_a_hole_is_reported_missed_by_one_scheduler_only(
        redis_broker: RedisBroker, policy: str, caplog: pytest.LogCaptureFixture) -> None:
    # Two schedulers come back after an outage, one a period after the other: the
    # occurrences of the outage are reported missed once (by the first), not by each.
    client = make_client(redis_broker)
    client.schedule_registry.add(build("m", "jobs.tick", every=60, missed=policy, grace=5))
    a, b = (Scheduler(client, clock=Clock(T0), promote=False) for _ in range(2))
    await a.load()
    await b.load()
    await a.tick(T0 + MINUTE)
    await b.tick(T0 + MINUTE)
    (first,) = await a.tick(T0 + 12 * MINUTE)  # minutes 2 to 11 missed
    (second,) = await b.tick(T0 + 13 * MINUTE)  # still believes minute 1 was the last
    assert first.missed == 10
    assert second.missed == 0
    reports = [r.getMessage() for r in caplog.records if "missed occurrence" in r.getMessage()]
    assert len(reports) == 1, reports


@pytest.mark.asyncio
async def test_run_all_catches_up_at_most_catch_up_occurrences(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = make_client(redis_broker)
    client.schedule_registry.add(build("m", "jobs.tick", every=60, missed="run_all",
                                       catch_up=3))
    s = Scheduler(client, clock=Clock(T0), promote=False)
    await s.load()
    (result,) = await s.tick(T0 + 10 * MINUTE)
    assert result.dispatched == 3 and result.missed == 7
    assert stream_ids(redis_client, redis_broker) == [
        occurrence_id("m", T0 + n * MINUTE) for n in (8, 9, 10)]


@pytest.mark.asyncio
async def test_a_dispatched_occurrence_runs_with_its_arguments_and_options(
        broker: RedisBroker | MemoryBroker) -> None:
    client = make_client(broker, store_results=True)
    client.schedule_registry.add(build("labelled", "jobs.tick", every=60,
                                       kwargs={"label": "nightly"}, priority="high",
                                       retries=0, headers={"team": "ops"}))
    s = Scheduler(client, clock=Clock(T0), promote=False)
    await s.load()
    (result,) = await s.tick(T0 + MINUTE)
    assert result.dispatched == 1
    await arun_burst(client)
    record = client.get_result(occurrence_id("labelled", T0 + MINUTE))
    assert record.result == "nightly"
    (info,) = client.schedules()
    assert info.last_message_id == occurrence_id("labelled", T0 + MINUTE)
    assert info.last_run_ms == info.last_dispatch_ms == T0 + MINUTE
    assert info.outcome == "succeeded" and info.dispatched_by == s.name
    assert info.next_run_ms is not None and info.next_run_ms > time.time() * 1000
    assert info.schedule == "every 60s" and info.queue == "default"


@pytest.mark.asyncio
async def test_schedules_shows_never_then_skipped(redis_broker: RedisBroker) -> None:
    client = make_client(redis_broker)
    client.schedule_registry.add(build("m", "jobs.tick", every=60, missed="skip", grace=1))
    (info,) = client.schedules()
    assert info.outcome == "never" and info.last_run_ms is None
    s = Scheduler(client, clock=Clock(T0), promote=False)
    await s.load()
    await s.tick(T0 + MINUTE)
    await s.tick(T0 + 5 * MINUTE + 30_000)  # late: skipped
    (info,) = client.schedules()
    assert info.outcome == "skipped" and info.last_run_ms == T0 + 5 * MINUTE
    assert info.last_message_id == occurrence_id("m", T0 + MINUTE)


@pytest.mark.asyncio
async def test_a_schedule_of_an_unknown_task_is_reported_and_not_dispatched(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = make_client(redis_broker)
    client.schedule_registry.add(build("ghost", "jobs.missing", every=60))
    s = Scheduler(client, clock=Clock(T0), promote=False)
    await s.load()
    assert "ghost" not in s.schedules
    assert any("jobs.missing" in p and "'ghost'" in p for p in s.problems)
    assert await s.tick(T0 + MINUTE) == []


def test_duplicate_schedule_names_are_refused() -> None:
    registry = ScheduleRegistry()
    registry.add(build("n", "a", every=60))
    registry.add(build("n", "a", every=60))  # the same again (a module imported twice)
    with pytest.raises(ConfigurationError, match=r"'n' is declared twice"):
        registry.add(build("n", "b", every=60))


def test_the_periodic_decorator_registers_a_task_and_its_schedule() -> None:
    client = Client(MemoryBroker())

    @client.periodic("*/5 * * * *", tz="Europe/Berlin", args=(1,), name="five", retries=2)
    def job(x: int) -> int:
        return x

    schedule = client.schedule_registry.get("five")
    assert schedule is not None and schedule.task == job.name and schedule.args == (1,)
    assert client.registry.find(job.name).retry.retries == 2  # type: ignore[union-attr]
    with pytest.raises(ConfigurationError, match=r"'bad'.*tz"):
        client.periodic(every=5, tz="Nowhere/Land", name="bad")(lambda: None)


@contextlib.asynccontextmanager
async def running(s: Scheduler) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(s.run())
    try:
        yield task
    finally:
        s.stop()
        await asyncio.wait_for(task, 10)


class Source:
    def __init__(self, *schedules: Schedule) -> None:
        self.schedules = list(schedules)

    def load(self) -> list[Schedule]:
        return list(self.schedules)


@pytest.mark.asyncio
async def test_a_schedule_change_reaches_a_running_scheduler_within_two_seconds(
        broker: RedisBroker | MemoryBroker) -> None:
    client = make_client(broker)
    source = Source(build("a", "jobs.tick", every=3600, source="db"))
    s = Scheduler(client, sources=[source], promote=False)
    async with running(s):
        await await_until(lambda: "a" in s.schedules and s.listening, 5,
                          message="first load, and listening for changes")
        source.schedules.append(build("b", "jobs.tick", every=3600, source="db"))
        started = time.monotonic()
        await asyncio.to_thread(client.notify_schedules_changed)
        await await_until(lambda: "b" in s.schedules, 2.0, message="the edit to arrive")
        assert time.monotonic() - started < 2.0


@pytest.mark.asyncio
async def test_a_missed_publish_is_caught_by_the_version(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = make_client(redis_broker)
    source = Source(build("a", "jobs.tick", every=3600, source="db"))
    s = Scheduler(client, sources=[source], promote=False)
    async with running(s):
        await await_until(lambda: "a" in s.schedules, 5, message="first load")
        source.schedules.append(build("b", "jobs.tick", every=3600, source="db"))
        redis_client.incr(redis_broker.keys.schedules_version)  # no publish
        await await_until(lambda: "b" in s.schedules, 4.0, message="the version poll")


@pytest.mark.asyncio
async def test_a_running_scheduler_dispatches_on_time(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = make_client(redis_broker)
    client.schedule_registry.add(build("fast", "jobs.tick", every=0.1))
    s = Scheduler(client, promote=False)
    async with running(s):
        await await_until(lambda: len(stream_ids(redis_client, redis_broker)) >= 5, 5,
                          message="five occurrences")
    ids = stream_ids(redis_client, redis_broker)
    stamps = [int(i.rsplit(":", 1)[1]) for i in ids]
    assert all(b - a == 100 for a, b in itertools.pairwise(stamps)), stamps


@pytest.mark.asyncio
async def test_a_scheduler_promotes_due_delayed_messages(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = make_client(redis_broker)
    tick = client.registry.find("jobs.tick")
    assert tick is not None
    handle = client.enqueue(tick, ("late",), {}, CallOptions(delay=0.3))
    s = Scheduler(client, promote=True)
    async with running(s):
        await await_until(lambda: handle.id in stream_ids(redis_client, redis_broker), 5,
                          message="the delayed message to be promoted")


@pytest.mark.asyncio
async def test_scheduler_stops_promptly(redis_broker: RedisBroker) -> None:
    client = make_client(redis_broker)
    client.schedule_registry.add(build("hourly", "jobs.tick", cron="@hourly"))
    s = Scheduler(client)
    task = asyncio.create_task(s.run())
    await await_until(lambda: "hourly" in s.schedules, 5, message="load")
    started = time.monotonic()
    s.stop()
    await asyncio.wait_for(task, 5)
    assert time.monotonic() - started < 2


@pytest.mark.asyncio
@pytest.mark.parametrize("promoter", ["scheduler", "worker"])
async def test_a_new_earliest_delayed_message_wakes_the_promoter_at_once(
        redis_broker: RedisBroker, redis_client: redis.Redis, promoter: str) -> None:
    """A promoter sleeping a long poll (5 s) is woken by enqueue.lua's publish when a new
    delayed message becomes the earliest: it is promoted on time, not a poll late."""
    from .helpers import background_worker

    client = make_client(redis_broker)
    tick = client.registry.find("jobs.tick")
    assert tick is not None
    channel = redis_broker.keys.queue("default").wake_channel

    async def listening() -> bool:
        return subscribers(redis_client, channel) >= 1

    async with contextlib.AsyncExitStack() as stack:
        if promoter == "scheduler":
            await stack.enter_async_context(running(Scheduler(client, poll_interval=5.0)))
        else:
            await stack.enter_async_context(background_worker(
                client, schedule_poll_interval=5.0, queues=("other",), block_timeout=0.05))
            channel = redis_broker.keys.queue("other").wake_channel
        queue = "default" if promoter == "scheduler" else "other"
        await await_until(listening, 5, message="the promoter to listen for wake-ups")
        client.enqueue(tick, ("far",), {}, CallOptions(delay=3600, queue=queue))
        started = time.monotonic()
        handle = client.enqueue(tick, ("soon",), {}, CallOptions(delay=0.2, queue=queue))
        stream = redis_broker.keys.queue(queue).stream

        def promoted() -> bool:
            if promoter == "worker":  # the worker may already have run it
                return redis_client.exists(redis_broker.keys.queue(queue).record(handle.id)) \
                    or any(decode(f[b"m"]).id == handle.id
                           for _i, f in redis_client.xrange(stream))
            return any(decode(f[b"m"]).id == handle.id for _i, f in redis_client.xrange(stream))

        await await_until(promoted, 3, message="the delayed message to be promoted")
        late = time.monotonic() - started - 0.2
        assert late < 1.0, late


def test_enqueue_publishes_only_a_new_earliest_delayed_message(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = make_client(redis_broker)
    tick = client.registry.find("jobs.tick")
    assert tick is not None
    listener = Listener(redis_client, redis_broker.keys.queue("default").wake_channel)
    try:
        assert listener.get(timeout=1.0) is None  # the subscription confirmation

        def published() -> list[int]:
            out = []
            while (message := listener.get(timeout=0.2)) is not None:
                out.append(int(message["data"]))
            return out

        first = client.enqueue(tick, (), {}, CallOptions(delay=100))
        assert len(published()) == 1
        client.enqueue(tick, (), {}, CallOptions(delay=200))  # not the earliest: quiet
        client.enqueue(tick, (), {}, None)  # not delayed: quiet
        assert published() == []
        client.enqueue(tick, (), {}, CallOptions(delay=50))
        (due,) = published()
        assert due < redis_client.zscore(redis_broker.keys.queue("default").schedule,
                                         first.id)
    finally:
        listener.close()


@pytest.mark.asyncio
async def test_a_new_timing_starts_afresh_instead_of_catching_up(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    client = make_client(redis_broker)
    source = Source(build("m", "jobs.tick", every=3600, missed="run_all", source="db"))
    clock = Clock(T0)
    s = Scheduler(client, sources=[source], clock=clock, promote=False)
    await s.load()
    await s.tick(T0 // 3_600_000 * 3_600_000 + 3_600_000)
    source.schedules[0] = build("m", "jobs.tick", every=60, missed="run_all", source="db")
    clock.ms = T0 + 3_600_000 + 30 * MINUTE
    await s.load()
    (result,) = await s.tick(clock.ms + MINUTE)  # the next minute only, not 30 owed ones
    assert result.dispatched == 1 and result.missed == 0
