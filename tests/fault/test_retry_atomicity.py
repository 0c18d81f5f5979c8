"""Scenario 5: a failed attempt is acknowledged together with what comes next, atomically.

After the run, every message is in exactly one of: a scheduled retry, the dead letters,
or a final record (succeeded / failed). Never none (acknowledged and lost), never two
(a retry forked from a dead letter, say).
"""

from __future__ import annotations

import random
import signal
import time

import pytest

from blitzq_django.engine.core import deadletter as reasons

from ..support.waiting import wait_until
from .harness import FAST_ARGS, Scenario
from .ledger import check, duplicates

pytestmark = pytest.mark.fault

CONCURRENCY = 20  # FAST_ARGS


def _enqueue_mix(s: Scenario, scale: int, seconds: float = 0.0) -> dict[str, str]:
    """Failing messages of every flavour; returns id -> the category it must end in."""
    t = s.tasks
    rnd = random.Random(scale)
    expect: dict[str, str] = {}

    def pause() -> float:
        return round(rnd.uniform(0, seconds), 3) if seconds else 0.0

    for i in range(4 * scale):
        expect[t["flaky"].enqueue(1 + i % 2, pause()).id] = "final:succeeded"
    for _ in range(3 * scale):
        expect[t["always_fail"].enqueue(pause()).id] = "dead:" + reasons.RETRIES_EXHAUSTED
    for _ in range(3 * scale):
        expect[t["always_fail_quietly"].enqueue(pause()).id] = "final:failed"
    later = t["always_fail"].options(initial_delay=3600, max_delay=3600, jitter=False)
    for _ in range(2 * scale):
        expect[later.enqueue(pause()).id] = "scheduled"
    for _ in range(scale):
        expect[t["not_retryable"].enqueue().id] = "dead:" + reasons.NOT_RETRYABLE
    return expect


def _where(s: Scenario, ids: list[str]) -> dict[str, list[str]]:
    """Every place each message is found once nothing is in flight."""
    scheduled, dead, records = s.scheduled(), s.dead_letters(), s.records(ids)
    out: dict[str, list[str]] = {}
    for i in ids:
        found = []
        if i in scheduled:
            found.append("scheduled")
        if i in dead:
            found.append("dead:" + dead[i].reason)
        r = records[i]
        if r is not None and r.state == "dead_lettered" and i not in dead:
            found.append("dead-record-without-letter")
        elif r is not None and r.is_final and r.state != "dead_lettered":
            found.append(f"final:{r.state}")
        out[i] = found
    return out


def _settled(s: Scenario, ids: list[str]) -> dict[str, list[str]] | None:
    """Where each message is, once nothing runs and no retry is due within the hour."""
    soon = int(time.time() * 1000) + 600_000
    if not s.drained() or s.redis.zcount(s.keys.schedule, "-inf", soon):
        return None
    where = _where(s, ids)
    return where if all(where.values()) else None


def _assert_exactly_one(where: dict[str, list[str]], expect: dict[str, str]) -> None:
    wrong = {i: (found, expect[i]) for i, found in where.items() if found != [expect[i]]}
    assert not wrong, f"{len(wrong)} message(s) not in exactly their one place: " \
                      f"{list(wrong.items())[:5]}"


def test_every_failed_message_ends_in_exactly_one_place(scenario: Scenario) -> None:
    scenario.worker(*FAST_ARGS)
    expect = _enqueue_mix(scenario, 10)
    ids = list(expect)
    where = wait_until(lambda: _settled(scenario, ids), 30, interval=0.1,
                       message="every message to settle")
    _assert_exactly_one(where, expect)
    # Attempt numbers are exact: each attempt ran once, none was skipped.
    attempts = {i: sorted(x.attempt for x in scenario.ledger.of(i) if x.phase == "start")
                for i in ids}
    for i, kind in expect.items():
        n = len(attempts[i])
        assert attempts[i] == list(range(1, n + 1)), (i, attempts[i])
        if kind == "dead:" + reasons.RETRIES_EXHAUSTED:
            assert n == 3
        elif kind == "final:failed":
            assert n == 2
        elif kind == "scheduled" or kind == "dead:" + reasons.NOT_RETRYABLE:
            assert n == 1
    report = check("5a retry-ack-atomicity", scenario.ledger, ids, finished=("done", "fail"),
                   **_counts(where))
    assert report.lost == 0 and report.duplicated == 0


def test_retry_heavy_run_with_a_worker_killed_keeps_exactly_one_place(
        scenario: Scenario) -> None:
    a = scenario.worker(*FAST_ARGS)
    scenario.worker(*FAST_ARGS)
    expect = _enqueue_mix(scenario, 30, seconds=0.3)
    ids = list(expect)
    wait_until(lambda: scenario.ledger.count("fail") >= 200, 30, interval=0.05,
               message="the run to be well under way")
    a.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    a.wait(5)
    scenario.worker(*FAST_ARGS)  # a replacement, as a supervisor would start
    where = wait_until(lambda: _settled(scenario, ids), 60, interval=0.1,
                       message="every message to settle after the kill")
    recovered_s = time.monotonic() - killed_at
    _assert_exactly_one(where, expect)
    dups = duplicates(scenario.ledger)
    assert all(run.pid == a.pid for runs in dups.values() for run in runs[:-1]), \
        "only runs of the killed worker may have been repeated"
    report = check("5b retry-ack-atomicity+sigkill", scenario.ledger, ids,
                   finished=("done", "fail"), kills=1, recovery_s=round(recovered_s, 1),
                   **_counts(where))
    assert report.lost == 0
    assert report.duplicated <= CONCURRENCY


def _counts(where: dict[str, list[str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for found in where.values():
        key = found[0].split(":")[0] if found else "nowhere"
        out[key] = out.get(key, 0) + 1
    return out
