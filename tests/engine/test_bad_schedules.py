"""Schedules that can never fire are refused where they are declared, and a scheduler
survives any one bad schedule: it logs it at ERROR, leaves it out and dispatches the
others (a real Redis, an injected clock)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

from blitzq_django.engine import Client, MemoryBroker, RedisBroker
from blitzq_django.engine.core.schedules import Cron, build, cron_problem, occurrence_id
from blitzq_django.engine.errors import ConfigurationError
from blitzq_django.engine.scheduler import Scheduler

from .test_scheduler import MINUTE, T0, Clock, make_client, stream_ids

NEVER = ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *", "15 3 30-31 2 *"]


@pytest.mark.parametrize("cron", NEVER)
def test_a_cron_that_never_fires_is_refused_naming_the_schedule(cron: str) -> None:
    assert "never fires" in (cron_problem(cron) or "")
    with pytest.raises(ConfigurationError, match=r"schedule 'feb30': cron .* never fires"):
        build("feb30", "jobs.tick", cron=cron)
    client = Client(MemoryBroker())
    with pytest.raises(ConfigurationError, match="never fires"):
        @client.periodic(cron, name="feb30")
        def job() -> None: ...


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 30 2 1", "0 0 L 2 *", "@yearly"])
def test_a_rare_cron_is_accepted(cron: str) -> None:
    assert cron_problem(cron) is None
    schedule = build("rare", "jobs.tick", cron=cron)
    assert schedule.next_after(T0) is not None


def unchecked_cron(expression: str) -> Cron:
    """A Cron built without its checks: what an older version (or a hand-edited source)
    may hand a scheduler."""
    cron = object.__new__(Cron)
    object.__setattr__(cron, "expression", expression)
    object.__setattr__(cron, "tz", "UTC")
    object.__setattr__(cron, "_zone", ZoneInfo("UTC"))
    return cron


class Exploding:
    """A timing whose maths raises (any bug of any one schedule)."""

    def next_after(self, ms: int) -> int | None:
        raise RuntimeError("the maths broke")

    def last_at_or_before(self, ms: int) -> int | None:
        raise RuntimeError("the maths broke")

    def describe(self) -> str:
        return "exploding"


@pytest.mark.asyncio
async def test_a_scheduler_survives_a_bad_schedule_and_dispatches_the_others(
        redis_broker: RedisBroker, redis_client: redis.Redis, caplog: Any) -> None:
    client = make_client(redis_broker)
    good = build("good", "jobs.tick", every=60)
    client.schedule_registry.add(good)
    client.schedule_registry.add(replace(build("feb30", "jobs.tick", every=60),
                                         when=unchecked_cron("0 0 30 2 *")))
    client.schedule_registry.add(replace(build("boom", "jobs.tick", every=60),
                                         when=Exploding()))  # type: ignore[arg-type]
    clock = Clock(T0)
    s = Scheduler(client, clock=clock, promote=False)
    with caplog.at_level(logging.ERROR, logger="blitzq.scheduler"):
        await s.load()
        for minute in (1, 2, 3):
            clock.ms = T0 + minute * MINUTE
            await s.tick()
            s.next_due_ms()
    assert stream_ids(redis_client, redis_broker) == [
        occurrence_id("good", T0 + m * MINUTE) for m in (1, 2, 3)]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "'boom'" in errors[0].getMessage()
    assert "the maths broke" in errors[0].getMessage() and errors[0].exc_info
    assert "boom" not in s.schedules and any("'boom'" in p for p in s.problems)
    assert s.schedules["feb30"].next_after(T0) is None  # never: nothing due, nothing raised
    (boom,) = [i for i in client.schedules() if i.name == "boom"]
    assert boom.next_run_ms is None  # what is shown of it does not raise either


@pytest.mark.asyncio
async def test_a_bad_schedule_at_start_does_not_stop_a_running_scheduler(
        redis_broker: RedisBroker, redis_client: redis.Redis) -> None:
    """run() from the start: its first load meets the bad schedule, and the loop goes on."""
    import asyncio

    from ..support.waiting import await_until

    client = make_client(redis_broker)
    client.schedule_registry.add(replace(build("boom", "jobs.tick", every=60),
                                         when=Exploding()))  # type: ignore[arg-type]
    client.schedule_registry.add(build("fast", "jobs.tick", every=0.05))
    s = Scheduler(client, promote=False, poll_interval=0.05)
    running = asyncio.ensure_future(s.run())
    try:
        await await_until(lambda: len(stream_ids(redis_client, redis_broker)) >= 2,
                          timeout=10, message="the good schedule's occurrences")
        assert not running.done()
    finally:
        s.stop()
        await asyncio.wait_for(running, 10)
