"""Worker processes under the supervisor (``--processes N``): poison messages and recycling."""

from __future__ import annotations

import threading
import time

import pytest

from blitzq_django.engine.core import deadletter as reasons

from ..support.waiting import wait_until
from .harness import FAST_ARGS, Scenario
from .ledger import check

pytestmark = pytest.mark.fault

VT, MAX_DELIVERIES = 2.0, 3  # FAST_ARGS


def test_poison_message_is_dead_lettered_and_the_pool_keeps_serving(scenario: Scenario) -> None:
    """Scenario 4: a task that kills its worker every time ends in the dead letters after
    max_deliveries deliveries, while other tasks keep completing."""
    pool = scenario.worker(*FAST_ARGS, "--processes", "2", processes=2)
    poison = scenario.tasks["kill_self"].enqueue().id
    normal: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        # Steady traffic for the whole episode, so the supervisor's restarts and the
        # recoveries happen while other work is in flight.
        while not stop.is_set():
            normal.append(scenario.tasks["sleep"].enqueue(0.02).id)
            stop.wait(0.02)  # the producer's pace, not a synchronisation

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        letter = wait_until(lambda: scenario.dead_letters().get(poison),
                            (MAX_DELIVERIES + 2) * 3 * VT, interval=0.1,
                            message="the poison message to be dead-lettered")
    finally:
        stop.set()
        producer.join(5)
    assert letter.reason == reasons.MAX_DELIVERIES == "max deliveries exceeded"
    assert letter.delivery_count == MAX_DELIVERIES + 1  # the delivery that dead-lettered it
    runs = [x for x in scenario.ledger.of(poison) if x.phase == "start"]
    assert [x.dc for x in runs] == list(range(1, MAX_DELIVERIES + 1))
    record = scenario.client.get_result(poison, timeout=1)
    assert record.state == "dead_lettered" and record.reason == reasons.MAX_DELIVERIES

    scenario.wait_drained(normal, 6 * VT, accounted={poison})
    dead = set(scenario.dead_letters())
    collateral = sorted(dead & set(normal))
    supervisor_log = pool.text()
    restarts = supervisor_log.count("died with SIGKILL; restarting")
    report = check("4 poison-message", scenario.ledger, [poison, *normal], accounted={poison},
                   poison_runs=len(runs), restarts=restarts,
                   collateral_dead_lettered=len(collateral))
    assert report.lost == 0
    assert collateral == [], f"healthy messages dead-lettered with the poison: {collateral}"
    assert dead == {poison}
    assert restarts == MAX_DELIVERIES
    assert all(scenario.records(normal)[i].succeeded for i in normal)  # type: ignore[union-attr]
    # No crash loop once it is gone: every child alive and serving.
    assert len(pool.children()) == 2


def test_poison_message_does_not_take_its_batch_mates_down(scenario: Scenario) -> None:
    """Healthy messages fetched in the same batch as a poison message still complete.

    They die with the poison's worker once (that is unavoidable); their redeliveries
    must not keep sharing its fate until they, too, exceed max_deliveries.
    """
    mates = [h.id for h in scenario.tasks["sleep"].enqueue_many([(0.5,)] * 8)]
    poison = scenario.tasks["kill_self"].enqueue().id
    pool = scenario.worker(*FAST_ARGS, "--processes", "2", processes=1)  # one batch: all 9
    wait_until(lambda: scenario.dead_letters().get(poison),
               (MAX_DELIVERIES + 2) * 3 * VT, interval=0.1,
               message="the poison message to be dead-lettered")
    scenario.wait_drained(mates, 6 * VT, accounted=set(scenario.dead_letters()))
    dead = scenario.dead_letters()
    collateral = sorted(set(dead) & set(mates))
    # Dead-lettered mates are not lost (they can be replayed); they are counted apart.
    report = check("4b poison-batch-mates", scenario.ledger, [poison, *mates],
                   accounted={poison, *collateral}, restarts=pool.text().count("died with SIGKILL"),
                   collateral_dead_lettered=len(collateral),
                   collateral_reasons=sorted({dead[i].reason for i in collateral}))
    assert collateral == [], f"{len(collateral)} healthy message(s) dead-lettered with the poison"
    assert report.lost == 0


def test_recycled_children_still_drain_the_queue(scenario: Scenario) -> None:
    """--max-tasks-per-child under --processes: children recycle, nothing is lost."""
    pool = scenario.worker(*FAST_ARGS, "--processes", "2", "--max-tasks-per-child", "50",
                           processes=2)
    ids = [h.id for h in scenario.tasks["sleep"].enqueue_many([(0.005,)] * 600)]
    started = time.monotonic()
    scenario.wait_drained(ids, 60)
    took = time.monotonic() - started
    recycled = pool.text().count("recycled")
    report = check("recycle max-tasks-per-child=50", scenario.ledger, ids,
                   recycled=recycled, drain_s=round(took, 1))
    assert report.lost == 0
    assert recycled >= 5  # 600 messages / 50 per child: children did recycle, repeatedly
    assert "died with" not in pool.text()
    assert all(r is not None and r.succeeded for r in scenario.records(ids).values())
