"""The running index under a real SIGKILL (issue 19, item 5): a running task shows as
running on its worker without TRACK_STATE; once that worker is killed, its entry goes
with its registry entry (never "running forever" on a dead worker), and the worker that
recovers the message shows it running at once."""

from __future__ import annotations

import signal
import time

import pytest

from blitzq_django.engine.core.record import Record

from ..support.waiting import wait_until
from .harness import FAST_ARGS, Scenario, WorkerProcess

pytestmark = pytest.mark.fault

REGISTRY_TTL_S = 5.0  # FAST_ARGS: heartbeat every 2/3 s, an entry kept max(3 beats, 5 s)


def on(record: Record | None, worker: WorkerProcess) -> Record | None:
    """The record, if it says running on ``worker`` (names are host:pid:suffix)."""
    if record is None or record.state != "running" or record.worker is None:
        return None
    return record if record.worker.split(":")[1] == str(worker.pid) else None


def test_a_killed_workers_task_leaves_it_with_its_registry_entry(scenario: Scenario) -> None:
    client = scenario.client
    assert not client.track_state
    victim = scenario.worker(*FAST_ARGS)
    h = scenario.tasks["sync_sleep"].enqueue(30)
    first = wait_until(lambda: on(client.inspect(h.id), victim), 10, interval=0.05,
                       message="the task to show as running on its worker")
    assert [r.id for r in client.running()] == [h.id]
    survivor = scenario.worker(*FAST_ARGS)

    victim.signal(signal.SIGKILL)
    victim.wait(5)
    killed = time.monotonic()
    # Recovered after the visibility timeout (2 s): running again, on the survivor, with a
    # later start; the dead worker's entry is no longer what anyone is told.
    again = wait_until(lambda: on(client.inspect(h.id), survivor), 15, interval=0.05,
                       message="the recovered task to show as running on the survivor")
    assert again.started_ms > first.started_ms  # type: ignore[operator]
    assert [(r.id, r.worker) for r in client.running()] == [(h.id, again.worker)]

    # The dead worker's entry: gone from the registry's view and from Redis within its
    # registry TTL of the kill (its last heartbeat was before it).
    name = first.worker
    assert name is not None
    wait_until(lambda: name not in {w.name for w in client.workers()},
               REGISTRY_TTL_S + 3, interval=0.1, message="the dead worker's registry entry")
    wait_until(lambda: not scenario.redis.exists(scenario.keys.running(name)),
               REGISTRY_TTL_S + 3, interval=0.1, message="its running index to expire")
    assert time.monotonic() - killed < REGISTRY_TTL_S + 3
    assert on(client.inspect(h.id), survivor) is not None
