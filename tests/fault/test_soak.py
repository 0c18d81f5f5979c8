"""Scenario 7: 5,000 tasks, 3 supervised worker processes, one SIGKILLed every 2 s."""

from __future__ import annotations

import random
import time

import pytest

from ..support.waiting import wait_until
from .harness import FAST_ARGS, Scenario, kill_pid, pid_gone
from .ledger import check, duplicates

pytestmark = pytest.mark.fault

TASKS, PROCESSES, CONCURRENCY = 5000, 3, 20
KILL_EVERY_S, KILLS = 2.0, 6


@pytest.mark.timeout(300)
def test_soak_random_sigkills_lose_nothing(scenario: Scenario) -> None:
    rnd = random.Random(7)
    pool = scenario.worker(*FAST_ARGS, "--processes", str(PROCESSES), processes=PROCESSES)
    # Async tasks of 50-250 ms: about 60 in flight at any time, so every kill lands on work.
    calls = [(round(rnd.uniform(0.05, 0.25), 3),) for _ in range(TASKS)]
    ids = [h.id for h in scenario.tasks["sleep"].enqueue_many(calls)]
    started = time.monotonic()
    killed: list[int] = []
    last_kill = started
    while len(killed) < KILLS and len(scenario.ledger.done_ids()) < TASKS:
        time.sleep(KILL_EVERY_S)  # (noqa: sleep) the deliberate gap between two kills
        children = wait_until(lambda: [p for p in pool.children() if not pid_gone(p)], 10,
                              interval=0.05, message="a live child to kill")
        victim = rnd.choice(children)
        kill_pid(victim)
        killed.append(victim)
        last_kill = time.monotonic()
    end = scenario.wait_drained(ids, 150)
    recovery_s = end - last_kill
    total_s = end - started

    records = scenario.records(ids)
    not_final = [i for i, r in records.items() if r is None or not r.succeeded]
    dups = duplicates(scenario.ledger)
    unexplained = [k for k, runs in dups.items() if runs[0].pid not in killed]
    report = check("7 soak", scenario.ledger, ids, kills=len(killed),
                   recovery_after_last_kill_s=round(recovery_s, 2), total_s=round(total_s, 1),
                   restarts=pool.text().count("died with SIGKILL; restarting"),
                   dup_unexplained=len(unexplained))
    assert len(killed) >= 4, "the queue drained before the kills: make the tasks longer"
    assert report.lost == 0
    assert not_final == []
    assert report.duplicated <= len(killed) * CONCURRENCY
    assert unexplained == [], "a duplicate whose first run was not on a killed worker"
    assert recovery_s < 60  # 5-15 s on a quiet machine; CI runs it beside other passes
