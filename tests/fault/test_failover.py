"""Scenario 21: the master is SIGKILLed under load, on a Sentinel set and on a Redis
Cluster, and a replica takes over (tests/fault/failover.py runs it; bench/failover.py
runs more kills and prints the table docs/delivery-guarantees.md quotes).

Every message is enqueued with a 1 s delay, so at each kill the last second of
messages waits in Redis (a message that already ran counts as run, whatever Redis
forgets afterwards). On Sentinel the replicas are also cut off from the master for
0.3 s before the kill (pointed elsewhere, as a network partition would): what the
master acknowledges then reaches no replica. With the replica wait (REPLICA_WAIT) none
of that is acknowledged, so no enqueue that returned an id is lost. Without it the
docs promise less (a failover may forget acknowledged writes): that run asserts only
that producer and workers carry on by themselves and that nothing enqueued after the
kill is lost, and reports what was."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support import topology
from .failover import run

pytestmark = [pytest.mark.fault,
              pytest.mark.skipif(topology.missing_reason() is not None,
                                 reason=topology.missing_reason() or "")]

WAIT = (1, 1000)  # one replica, at most 1 s: a loaded CI machine must not time out
CUT = {"sentinel": 0.3, "cluster": 0.0}  # a cluster replica takes no REPLICAOF
#: A master silent this long is failed over. 1 s (the benchmark's) failed over a live
#: master busy with the dead one's resync on a loaded CI machine: that second failover
#: dropped what the first promoted master had acknowledged, as a failover without the
#: replica wait may.
DOWN_AFTER_MS = 3000


@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
def test_with_the_replica_wait_no_acknowledged_enqueue_is_lost(kind: str,
                                                              tmp_path: Path) -> None:
    outcome = run(kind, tmp_path, wait=WAIT, kills=2, rate=100, steady_s=1.5,
                  cut_s=CUT[kind], delay_s=1.0, label=f"21 failover {kind}, replica wait on",
                  down_after_ms=DOWN_AFTER_MS)
    assert outcome.acked > 200
    assert outcome.lost == 0, outcome.lost_ids
    assert len(outcome.recovery_s) == 2  # a message enqueued after each kill ran


@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
def test_without_the_replica_wait_work_goes_on_after_a_failover(kind: str,
                                                               tmp_path: Path) -> None:
    outcome = run(kind, tmp_path, wait=None, kills=1, rate=100, steady_s=1.5,
                  cut_s=CUT[kind], delay_s=1.0, label=f"21 failover {kind}, replica wait off",
                  down_after_ms=DOWN_AFTER_MS)
    assert outcome.acked > 100
    # The service came back (a message enqueued after the kill ran), and a failover
    # forgets only what the dead master acknowledged: nothing enqueued after the kill.
    assert len(outcome.recovery_s) == 1
    assert outcome.lost_after_last_kill == 0, outcome.lost_ids
