"""Fast mode's loss window, measured: a worker SIGKILLed in the middle of a backlog.

Fast mode (Redis lists, at-most-once) has no lease: a message is the worker's alone
from the moment it is popped. A worker killed without a graceful stop loses what it
held: the attempts it was running and the messages it had fetched and not started,
at most ``batch_size`` per fetch on top of ``concurrency`` running
(docs/delivery-guarantees.md). Nothing runs twice: nothing is ever recovered.

The reliable counterpart (Redis streams) runs the same scenario and loses nothing: the
killed worker's entries stay pending and the next worker recovers them.

Each run: BACKLOG tasks wait on the queue; one worker drains it; once it has finished
KILL_AFTER of them it is SIGKILLed (the queue still holds a backlog); a second worker
drains the rest and is stopped gracefully; the ledger (written by the task bodies,
fsync'd) is the count.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.redis_server import RedisServer
from ..support.waiting import wait_until
from .harness import Scenario
from .ledger import check

pytestmark = pytest.mark.fault

BACKLOG = 2000
KILL_AFTER = 300  # finished tasks before the SIGKILL
CONCURRENCY, BATCH = 10, 20
TASK_S = 0.01
VT = 2.0
ARGS = ("--concurrency", str(CONCURRENCY), "--batch-size", str(BATCH),
        "--visibility-timeout", str(VT), "--shutdown-timeout", "5")
#: The loss bound of fast mode: one fetch batch on top of the running attempts. (The
#: worker holds at most its prefetch, concurrency + min(batch, concurrency), below it.)
LOSS_BOUND = BATCH + CONCURRENCY
PREFETCH = CONCURRENCY + min(BATCH, CONCURRENCY)


@pytest.fixture(params=["fast", "reliable"])
def kill_scenario(request: pytest.FixtureRequest, fault_redis: RedisServer,
                  tmp_path: Path) -> Iterator[Scenario]:
    s = Scenario(fault_redis.url, tmp_path, mode=request.param)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.timeout(180)
def test_sigkill_mid_drain_loses_at_most_what_the_worker_held(kill_scenario: Scenario) -> None:
    scenario = kill_scenario
    fast = scenario.mode == "fast"
    ids: list[str] = []
    for start in range(0, BACKLOG, 500):
        ids += [h.id for h in scenario.tasks["sleep"].enqueue_many(
            [(TASK_S,)] * min(500, BACKLOG - start))]
    assert scenario.stream_len() == BACKLOG

    first = scenario.worker(*ARGS)
    wait_until(lambda: scenario.ledger.count("done") >= KILL_AFTER, 60, interval=0.01,
               message=f"{KILL_AFTER} tasks to finish")
    first.kill()  # SIGKILL, reaped
    waiting_at_kill = scenario.stream_len()
    assert waiting_at_kill > 0 if fast else waiting_at_kill > PREFETCH, \
        "the worker was killed after the backlog drained: the test measures nothing"
    lines = scenario.ledger.lines()
    started = {x.id for x in lines if x.pid == first.pid and x.phase == "start"}
    finished = {x.id for x in lines if x.pid == first.pid and x.phase == "done"}
    running_at_kill = started - finished

    if fast:
        # A burst worker: it exits once the list is empty and it holds nothing (a worker
        # stopped as soon as the list looked empty would put back what it had fetched).
        second = scenario.worker(*ARGS, "--burst")
        assert second.wait(60) == 0, second.text()[-2000:]
    else:  # the killed worker's entries are recovered after the visibility timeout
        second = scenario.worker(*ARGS)
        scenario.wait_drained(ids, 60)
        second.signal(signal.SIGTERM)  # a graceful stop: what it holds finishes or goes back
        assert second.wait(15) == 0, second.text()[-2000:]
    assert scenario.stream_len() == 0 and not scenario.pending()

    lines = scenario.ledger.lines()
    done = {x.id for x in lines if x.phase == "done"}
    lost = set(ids) - done
    starts = Counter(x.id for x in lines if x.phase == "start")
    started_twice = [i for i, n in starts.items() if n > 1]
    report = check(f"fast-mode kill mid-drain ({scenario.mode})", scenario.ledger, ids,
                   waiting_at_kill=waiting_at_kill, running_at_kill=len(running_at_kill),
                   lost_running=len(lost & running_at_kill),
                   lost_prefetched=len(lost - running_at_kill), bound=LOSS_BOUND,
                   prefetch=PREFETCH, started_twice=len(started_twice))
    assert report.lost == len(lost)
    if fast:
        # At-most-once: the loss is what the killed worker held, never more...
        assert 0 < len(lost) <= LOSS_BOUND, (len(lost), LOSS_BOUND)
        assert len(lost) <= PREFETCH
        # ...every lost message is one it had popped (running, or fetched and waiting)...
        assert lost - running_at_kill <= set(ids) - started
        # ...and nothing ever runs twice: nothing is recovered.
        assert report.duplicated == 0
        assert started_twice == []
        assert "recovered " not in second.text()
    else:
        # At-least-once: nothing is lost; a duplicate is only a run the kill interrupted
        # after its body ended and before its settlement was written.
        assert report.lost == 0
        assert set(started_twice) <= running_at_kill | finished
        assert report.duplicated <= CONCURRENCY
