"""Events under SIGKILLs: every message's events are a valid path of the state machine
(core/events.py) and end in exactly one terminal event.

Each event is written by the same script as its transition, so a worker killed at any
point can neither lose one (the transition happened: so did its event) nor invent one
(the transition did not happen: nor did its event). The run mixes quick and long
(`async def` and `def`) tasks, retries, dead letters and failures, kills two of the
workers while they hold work, and checks the whole stream once everything settled.
"""

from __future__ import annotations

import random
import signal
import time
from collections import defaultdict

import pytest

from blitzq_django.engine.core.events import TERMINAL, Event, valid_path

from ..support.waiting import wait_until
from .harness import FAST_ARGS, Scenario
from .ledger import check

pytestmark = pytest.mark.fault

#: record state -> the terminal event it must come with
_TERMINAL_OF = {"succeeded": "succeeded", "failed": "failed", "dead_lettered": "dead_lettered"}


def _all_events(s: Scenario) -> list[Event]:
    out: list[Event] = []
    after = "0"
    while True:
        page = s.client.events(s.queue, after=after, count=10_000)
        if not page:
            return out
        out += page
        after = page[-1].cursor


def _settled(s: Scenario, ids: list[str]) -> bool:
    if not s.drained() or s.scheduled():
        return False
    records = s.records(ids)
    return all(r is not None and r.is_final for r in records.values())


@pytest.mark.timeout(180)
def test_every_message_has_a_valid_event_path_after_sigkills(scenario: Scenario) -> None:
    rnd = random.Random(11)
    t = scenario.tasks
    a = scenario.worker(*FAST_ARGS)
    b = scenario.worker(*FAST_ARGS)
    ids: list[str] = []
    ids += [h.id for h in t["sleep"].enqueue_many(
        [(round(rnd.uniform(0.02, 0.4), 3),) for _ in range(240)])]
    ids += [h.id for h in t["sync_sleep"].enqueue_many(
        [(round(rnd.uniform(0.02, 0.3), 3),) for _ in range(60)])]
    ids += [h.id for h in t["flaky"].enqueue_many([(1, 0.1) for _ in range(60)])]
    ids += [h.id for h in t["always_fail"].enqueue_many([(0.05,) for _ in range(20)])]
    ids += [h.id for h in t["always_fail_quietly"].enqueue_many([(0.05,) for _ in range(20)])]

    # Two SIGKILLs while the workers hold work; a replacement each time.
    wait_until(lambda: scenario.ledger.count("start") >= 60, 30, interval=0.02,
               message="the run to be under way")
    a.signal(signal.SIGKILL)
    a.wait(5)
    scenario.worker(*FAST_ARGS)
    wait_until(lambda: scenario.ledger.count("start") >= 200, 60, interval=0.02,
               message="the run to go on after the first kill")
    b.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    b.wait(5)
    scenario.worker(*FAST_ARGS)
    wait_until(lambda: _settled(scenario, ids), 90, interval=0.1,
               message="every message to settle after the kills")
    settled_s = time.monotonic() - killed_at

    events = _all_events(scenario)
    paths: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        paths[e.id].append(e)
    assert set(paths) == set(ids), "an event of a message nobody enqueued, or one missing"
    records = scenario.records(ids)
    invalid, terminals = {}, {}
    for message_id in ids:
        kinds = [e.kind for e in paths[message_id]]
        if not valid_path(kinds):
            invalid[message_id] = kinds
        terminals[message_id] = [k for k in kinds if k in TERMINAL]
    assert not invalid, f"{len(invalid)} invalid paths: {list(invalid.items())[:5]}"
    wrong = {i: ts for i, ts in terminals.items()
             if len(ts) != 1 or paths[i][-1].kind != ts[0]
             or ts[0] != _TERMINAL_OF[records[i].state]}  # type: ignore[union-attr]
    assert not wrong, f"{len(wrong)} messages without exactly one terminal event (or not " \
                      f"last, or not their record's): {list(wrong.items())[:5]}"
    recovered = sum(1 for e in events if e.kind == "recovered")
    assert recovered >= 1, "the kills left nothing to recover: kill earlier"
    # Every outcome event of an attempt says who ran it and for how long.
    outcomes = [e for e in events if e.kind in ("succeeded", "retried")]
    assert all(e.worker and e.duration_ms is not None and e.attempt for e in outcomes)

    report = check("event-paths sigkill", scenario.ledger, ids, finished=("done", "fail"),
                   kills=2, events=len(events), recovered=recovered,
                   settled_after_last_kill_s=round(settled_s, 1))
    assert report.lost == 0
