"""Time limits in real worker processes (issue 19, item 7): a `def` task blocked in
``time.sleep(3600)`` (one C call: the interrupt raised at its ``timeout=1`` cannot land)
makes its worker recycle once the grace is over. A plain worker starts afresh in the same
process (exec: the pid systemd watches stays), a supervised one exits for its supervisor
to replace it. The stuck message is settled once (retries=0: dead-lettered with
TimeLimitExceeded), never run again, and a fresh worker serves the next task.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from ..support.waiting import wait_until
from .harness import APP, Scenario
from .pools import PY, producer, serving, started

pytestmark = pytest.mark.fault

GRACE = ("--time-limit-grace", "1")


@pytest.mark.parametrize("variant", ["engine", "runworker", "runworker --processes 2"])
def test_a_thread_stuck_past_its_time_limit_recycles_the_worker(
        scenario: Scenario, pools: Any, variant: str) -> None:
    supervised = variant.endswith("--processes 2")
    if variant == "engine":
        command = [PY, "-m", "blitzq_django.engine", "worker", APP, "--concurrency", "4",
                   *GRACE]
        stuck, after = scenario.tasks["stuck"], scenario.tasks["sync_sleep"]
    else:
        command = [PY, "manage.py", "runworker", "--queues", "default", "--concurrency", "4",
                   *GRACE, *(["--processes", "2"] if supervised else [])]
        stuck, after = producer(scenario, "pool.stuck"), producer(scenario, "pool.sleep")
    workers = 2 if supervised else 1
    pool = pools(command)
    serving(scenario, pool, workers)
    before = {w.name for w in scenario.client.workers()}

    handle = stuck.enqueue()
    started(scenario, handle.id)
    record = scenario.client.final_record(handle.id, 30)
    assert record.state == "dead_lettered" and record.error_type == "TimeLimitExceeded"

    def fresh() -> list[Any]:
        assert pool.process.poll() is None, pool.text()
        return [w for w in scenario.client.workers() if w.name not in before]

    new = wait_until(fresh, 60, interval=0.1, message="a fresh worker")
    if not supervised:
        assert [w.pid for w in new] == [pool.process.pid]  # the same process, afresh
    next_one = after.enqueue(0.1)
    scenario.wait_drained([next_one.id], 30)
    text = pool.text()
    # Settled once: one start, never redelivered, dead-lettered once.
    assert [x.phase for x in scenario.ledger.of(handle.id)] == ["start"], text
    letters = scenario.dead_letters()
    assert list(letters) == [handle.id] and letters[handle.id].delivery_count == 1
    assert scenario.client.get_result(next_one.id, timeout=5).succeeded
    assert "still runs 1 s after its time limit of 1 s" in text, text
    if supervised:
        assert "recycled" in text and text.count("started worker process") == 3, text
    else:
        assert "starting a fresh worker in this process" in text, text
    pool.process.send_signal(signal.SIGTERM)
    assert pool.wait(30) == 0, pool.text()
    assert "Traceback" not in pool.text()
