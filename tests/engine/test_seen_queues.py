"""The seen queues: Redis keeps every queue a message was written to (a default runworker
serves them, the listings show them), whoever wrote it; the client's queue check; the
ops CLI lists and flags them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from blitzq_django.engine import CallOptions, Client, MemoryBroker, RedisBroker
from blitzq_django.engine.brokers.redis import broker as redis_broker_module
from blitzq_django.engine.cli import ops as ops_cli
from blitzq_django.engine.core.schedules import build
from blitzq_django.engine.errors import ConfigurationError, QueueBusy
from blitzq_django.engine.scheduler import Scheduler

from ..support.clients import info_of
from .helpers import background_worker, raw_redis, run_burst
from .test_ops_cli import run


def make_client(broker: Any, **options: Any) -> Client:
    client = Client(broker, **options)

    @client.task(name="jobs.ok", queue="jobs")
    def ok(x: int = 0) -> int:
        return x

    return client


def test_every_producer_path_records_its_queue(broker: RedisBroker | MemoryBroker) -> None:
    client = make_client(broker)
    ok = client.registry.get("jobs.ok")
    assert client.seen_queues() == []
    client.enqueue(ok, (1,))
    client.enqueue_many(ok, [((2,), {})] * 3, call=client_call(queue="bulk"))
    client.enqueue(ok, (3,), call=client_call(queue="later", delay=3600))

    async def from_async() -> None:
        await client.aenqueue(ok, (4,), call=client_call(queue="async-one"))
        await client.aenqueue_many(ok, [((5,), {})] * 2, call=client_call(queue="async-many"))
        await broker.aclose()

    asyncio.run(from_async())
    assert client.seen_queues() == ["async-many", "async-one", "bulk", "jobs", "later"]


def client_call(**options: Any) -> CallOptions:
    return CallOptions(**options)


@pytest.mark.asyncio
async def test_a_scheduler_dispatch_records_its_queue(broker: RedisBroker | MemoryBroker
                                                      ) -> None:
    client = make_client(broker)
    client.schedule_registry.add(build("nightly", "jobs.ok", every=60, queue="nightly"))
    now = int(time.time() * 1000)
    scheduler = Scheduler(client, clock=lambda: now / 1000, promote=False)
    await scheduler.load()
    (done,) = await scheduler.tick(now + 61_000)
    assert done.dispatched == 1
    assert await client.aseen_queues() == ["nightly"]


def test_a_replayed_dead_letter_records_its_queue(redis_broker: RedisBroker) -> None:
    client = make_client(redis_broker)

    @client.task(name="jobs.fail", queue="flaky", retries=0)
    def fail() -> None:
        raise RuntimeError("no")

    client.enqueue(client.registry.get("jobs.fail"))
    run_burst(client)
    assert client.queue_stats("flaky").dead_letters == 1
    raw_redis(redis_broker).delete(redis_broker.keys.seen_queues)  # as a FLUSH would
    redis_broker._seen.clear()  # a new process  # noqa: SLF001
    assert client.dead_letters.replay_all("flaky") == 1
    assert client.seen_queues() == ["flaky"]


def test_the_seen_queues_come_back_after_redis_lost_them(
        redis_broker: RedisBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    # FLUSHALL, or a restart without persistence: the set is gone. A producer that still
    # writes to the queue adds it again at its first write after SEEN_REFRESH_S.
    client = make_client(redis_broker)
    ok = client.registry.get("jobs.ok")
    client.enqueue(ok, (1,))
    raw_redis(redis_broker).delete(redis_broker.keys.seen_queues)
    client.enqueue(ok, (2,))  # within SEEN_REFRESH_S: not written again (no extra cost)
    assert client.seen_queues() == []
    # SEEN_REFRESH_S later (the clock moved, not the test: no wait on a loaded machine)
    later = redis_broker_module.clock_ms() + int(redis_broker_module.SEEN_REFRESH_S * 1000)
    monkeypatch.setattr(redis_broker_module, "clock_ms", lambda: later)
    client.enqueue(ok, (3,))
    assert client.seen_queues() == ["jobs"]


def test_the_queue_goes_in_with_the_message_in_one_round_trip(
        redis_broker: RedisBroker) -> None:
    # The first write of a process to a queue adds it to the set in the same pipeline:
    # a new queue costs no round trip of its own, and later writes send nothing more.
    client = make_client(redis_broker)
    ok = client.registry.get("jobs.ok")
    r = raw_redis(redis_broker)
    client.enqueue(ok, (0,), call=client_call(queue="warm"))  # connects, loads the scripts
    key = redis_broker.keys.seen_queues
    before = _calls(r, key)
    client.enqueue(ok, (1,))
    first = _calls(r, key)
    client.enqueue(ok, (2,))
    second = _calls(r, key)
    assert first["sadd"] - before["sadd"] == 1
    assert second["sadd"] == first["sadd"]
    assert client.seen_queues() == ["jobs", "warm"]


def _calls(r: Any, key: str) -> dict[str, int]:
    stats = info_of(r, key, "commandstats")
    return {"sadd": stats.get("cmdstat_sadd", {}).get("calls", 0)}


def test_forget_queue_is_refused_while_the_queue_holds_anything(
        broker: RedisBroker | MemoryBroker) -> None:
    client = make_client(broker)
    ok = client.registry.get("jobs.ok")
    client.enqueue(ok, (1,), call=client_call(queue="typo"))
    with pytest.raises(QueueBusy, match="queue 'typo' still holds 1"):
        client.forget_queue("typo")
    client.purge("typo")
    client.forget_queue("typo")
    assert "typo" not in client.seen_queues()


def test_the_queue_check_refuses_before_anything_is_written(
        broker: RedisBroker | MemoryBroker) -> None:
    asked: list[str] = []

    def check(queue: str) -> None:
        asked.append(queue)
        if queue == "defualt":
            raise ConfigurationError("no worker serves 'defualt'")

    client = make_client(broker, queue_check=check)
    ok = client.registry.get("jobs.ok")
    for _ in range(3):
        client.enqueue(ok, (1,))
    with pytest.raises(ConfigurationError, match="defualt"):
        client.enqueue(ok, (1,), call=client_call(queue="defualt"))
    with pytest.raises(ConfigurationError, match="defualt"):
        client.enqueue_many(ok, [((1,), {})], call=client_call(queue="defualt"))
    assert asked == ["jobs", "defualt", "defualt"]  # an accepted queue is asked once
    assert client.queue_stats("defualt").ready == 0
    assert "defualt" not in client.seen_queues()


# -- the ops command line -------------------------------------------------------------------


def test_stats_lists_a_queue_only_redis_knows_and_flags_it_unserved(
        redis_broker: RedisBroker) -> None:
    producer = make_client(redis_broker)  # another process's client: it names "reports"
    producer.enqueue(producer.registry.get("jobs.ok"), (1,), call=client_call(queue="reports"))
    # This one was never told of "reports" (no task, no setting names it).
    here = Client(RedisBroker(redis_broker.url, namespace=redis_broker.keys.namespace))
    try:
        code, out, err = run(here, "stats").__dict__.values()
        assert code == 0, err
        row = next(line for line in out.splitlines() if line.startswith("reports"))
        assert row.split()[1] == "1"  # READY
        assert "WORKERS" in out.splitlines()[0]
        assert "queue 'reports' has messages waiting and no live worker serves it" in err

        async def served() -> Any:
            here.task(name="jobs.ok", queue="reports")(lambda x=0: x)
            async with background_worker(here, queues=("reports",)) as worker:
                await worker.beat()
                ran = await asyncio.to_thread(run, here, "stats", "--json")
            await here.broker.aclose()
            return ran

        ran = asyncio.run(served())
        assert ran.code == 0 and "no live worker" not in ran.err
        queues = {q["queue"]: q for q in ran.json()["queues"]}
        assert queues["reports"]["workers"] == 1
    finally:
        here.broker.close()


def test_forget_queue_command(redis_broker: RedisBroker) -> None:
    client = make_client(redis_broker)
    client.enqueue(client.registry.get("jobs.ok"), (1,), call=client_call(queue="typo"))
    refused = run(client, "forget-queue", "typo")
    assert refused.code == ops_cli.EXIT_REFUSED and "still holds 1" in refused.err
    client.purge("typo")
    done = run(client, "forget-queue", "typo")
    assert done.code == 0 and "forgot 'typo'" in done.out
    assert client.seen_queues() == []
