"""Queues: per-queue concurrency caps, no starvation of a quiet queue, and routes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from blitzq_django.engine import Client, MemoryBroker, WorkerConfig
from blitzq_django.engine.cli.main import parse_queue_concurrency, worker_config
from blitzq_django.engine.errors import ConfigurationError

from ..support.waiting import await_until
from .helpers import background_worker


def test_a_capped_queue_stays_within_its_cap_while_another_is_flooded(broker: Any) -> None:
    client = Client(broker)
    running = {"flood": 0, "quiet": 0}
    peak = {"flood": 0, "quiet": 0, "total": 0}
    finished: list[str] = []

    async def work(queue: str) -> None:
        running[queue] += 1
        peak[queue] = max(peak[queue], running[queue])
        peak["total"] = max(peak["total"], sum(running.values()))
        await asyncio.sleep(0.01)  # (noqa: sleep) the attempt's own work, so they overlap
        running[queue] -= 1
        finished.append(queue)

    @client.task(name="flood", queue="flood")
    async def flood() -> None:
        await work("flood")

    @client.task(name="quiet", queue="quiet")
    async def quiet() -> None:
        await work("quiet")

    flood.enqueue_many([()] * 2000)

    async def scenario() -> int:
        async with background_worker(client, concurrency=8, queues=("flood", "quiet"),
                                     queue_concurrency={"quiet": 2}):
            await await_until(lambda: running["flood"] > 0)
            quiet.enqueue_many([()] * 20)
            await await_until(lambda: finished.count("quiet") == 20, timeout=20)
            flood_left = broker.queue_stats("flood")["ready"]
        await broker.aclose()
        return flood_left

    flood_left = asyncio.run(scenario())
    # The quiet queue was served while the flood still had a backlog: not starved ...
    assert flood_left > 500
    # ... within its own cap, and the worker within its concurrency.
    assert peak["quiet"] == 2
    assert peak["total"] <= 8


def test_queue_concurrency_is_checked_where_it_enters() -> None:
    with pytest.raises(ConfigurationError, match="queue_concurrency"):
        WorkerConfig(queue_concurrency={"a": 0})
    with pytest.raises(ConfigurationError, match="queue name"):
        WorkerConfig(queue_concurrency={"a:b": 1})
    with pytest.raises(ConfigurationError, match="queue_concurrency must be a dict"):
        WorkerConfig(queue_concurrency=[("a", 1)])  # type: ignore[arg-type]
    assert parse_queue_concurrency(["a=10,b=2", "c=1"]) == {"a": 10, "b": 2, "c": 1}
    for bad in ("a", "a=x", "a=0", "a=nan", "a:b=1", "=3", "a=1.5"):
        with pytest.raises(ConfigurationError, match="--queue-concurrency"):
            parse_queue_concurrency([bad])
    config = worker_config({"queue_concurrency": ["b=3"]}, {"queue_concurrency": {"a": 1}})
    assert config.queue_concurrency == {"a": 1, "b": 3}
    assert config.prefetch_of("b") == 6 and config.prefetch_of("z") == config.prefetch_count


def test_routes_send_tasks_by_glob_with_the_documented_precedence() -> None:
    client = Client(MemoryBroker(), routes={"reports.*": "slow", "mail.send": "mail"})

    @client.task(name="reports.monthly")
    def monthly() -> None: ...

    @client.task(name="reports.daily", queue="daily")  # ROUTES win over the decorator
    def daily() -> None: ...

    @client.task(name="mail.send")
    def send() -> None: ...

    @client.task(name="other", queue="own")
    def other() -> None: ...

    assert monthly.enqueue().queue == "slow"
    assert daily.enqueue().queue == "slow"
    assert send.enqueue().queue == "mail"
    assert other.enqueue().queue == "own"
    assert monthly.options(queue="now").enqueue().queue == "now"  # the call wins over all
    assert client.known_queues() == {"slow", "mail", "own", "default"}


@pytest.mark.parametrize("routes", [{"a.*": "bad:queue"}, {"": "q"}, {1: "q"}, ["a"]])
def test_bad_routes_are_refused(routes: Any) -> None:
    with pytest.raises(ConfigurationError):
        Client(MemoryBroker(), routes=routes)
