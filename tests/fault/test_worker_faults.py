"""One worker process dies, hangs, overruns or is stopped while it holds a message."""

from __future__ import annotations

import signal
import time

import pytest

from ..support.waiting import wait_until
from .harness import FAST_ARGS, Scenario, pid_gone
from .ledger import check

pytestmark = pytest.mark.fault

VT = 2.0  # visibility timeout of FAST_ARGS


def test_sigkill_mid_task_redelivers_same_id_and_attempt(scenario: Scenario) -> None:
    """Scenario 1: the task runs again elsewhere with the same id; its attempt is not reset."""
    a = scenario.worker(*FAST_ARGS)
    b = scenario.worker(*FAST_ARGS)
    # Attempt 1 fails and is retried; attempt 2 is the one killed mid-run, so a reset of
    # the attempt count on redelivery would show as attempt 1 in the ledger.
    h = scenario.tasks["fail_then_sleep"].enqueue(60)
    first = wait_until(lambda: [x for x in scenario.ledger.of(h.id)
                                if x.phase == "start" and x.attempt == 2], 10,
                       message="attempt 2 to start")[0]
    victim = a if first.pid == a.pid else b
    survivor = b if victim is a else a
    killed_at = time.monotonic()
    victim.signal(signal.SIGKILL)
    victim.wait(5)

    record = scenario.client.get_result(h.id, timeout=5 * VT)
    recovered_after = time.monotonic() - killed_at
    starts = [x for x in scenario.ledger.of(h.id) if x.phase == "start"]
    assert [(x.attempt, x.dc) for x in starts] == [(1, 1), (2, 1), (2, 2)]
    assert starts[2].pid == survivor.pid
    assert record.succeeded and record.result == 2 and record.attempt == 2
    assert "recovered " in survivor.text()
    wait_until(scenario.drained, 5, message="stream and PEL empty")
    report = check("1 sigkill-mid-task", scenario.ledger, [h.id],
                   recovered_s=round(recovered_after, 2), vt=VT)
    assert report.lost == 0
    assert report.duplicated == 0  # the killed run never completed


def test_long_task_is_not_run_twice_while_its_worker_lives(scenario: Scenario) -> None:
    """Scenario 2: a task running 3 x visibility_timeout keeps its lease the whole time."""
    workers = [scenario.worker(*FAST_ARGS), scenario.worker(*FAST_ARGS)]
    handles = [scenario.tasks["sleep"].enqueue(3 * VT),
               scenario.tasks["sync_sleep"].enqueue(3 * VT)]
    ids = [h.id for h in handles]
    scenario.wait_drained(ids, 6 * VT)
    for h in handles:
        assert h.record(timeout=1).succeeded
        assert [x.dc for x in scenario.ledger.of(h.id) if x.phase == "start"] == [1]
    logs = "".join(w.text() for w in workers)
    assert "recovered " not in logs and "lease lost" not in logs
    report = check("2 long-task-keeps-lease", scenario.ledger, ids, runtime_s=3 * VT, vt=VT)
    assert report.lost == 0 and report.duplicated == 0


def test_blocked_event_loop_loses_lease_and_late_ack_is_refused(scenario: Scenario) -> None:
    """Scenario 3: another worker recovers the message; the blocked one's late ack is refused."""
    a = scenario.worker(*FAST_ARGS)
    b = scenario.worker(*FAST_ARGS)
    block, later = 3 * VT, 4 * VT  # the redelivery is still running when the blocker wakes
    h = scenario.tasks["block_loop"].enqueue(block, later)
    first = wait_until(lambda: scenario.ledger.of(h.id), 10, message="first delivery")[0]
    blocker = a if first.pid == a.pid else b
    other = b if blocker is a else a
    second = wait_until(lambda: [x for x in scenario.ledger.of(h.id)
                                 if x.phase == "start" and x.dc == 2], 4 * VT,
                        message="redelivery to another worker")[0]
    assert second.pid == other.pid

    # The blocker wakes up, finishes its run, and tries to settle: refused, logged.
    wait_until(lambda: "lease lost" in blocker.text(), 3 * VT, interval=0.05,
               message="the blocked worker to log 'lease lost'")
    blocked_done = [x for x in scenario.ledger.of(h.id) if x.phase == "done" and x.dc == 1]
    assert blocked_done, "the blocked run finished"
    # ...and the redelivery it raced with is untouched: still pending, owned by the other.
    (entry,) = scenario.pending()
    assert entry["consumer"].split(":")[1] == str(other.pid) and entry["count"] == 2
    # The stale run wrote no record: what is known is the redelivery, running elsewhere.
    record = scenario.client.inspect(h.id)
    assert record is not None and record.state == "running"
    assert record.worker is not None and record.worker.split(":")[1] == str(other.pid)

    record = scenario.client.get_result(h.id, timeout=3 * later)
    assert record.succeeded and record.result == 2
    assert record.worker is not None and record.worker.split(":")[1] == str(other.pid)
    wait_until(scenario.drained, 5, message="stream and PEL empty")
    report = check("3 blocked-loop-lease-lost", scenario.ledger, [h.id],
                   stale_settlement_refused=True)
    assert report.lost == 0
    assert report.duplicated == 1  # the documented window: both runs completed


def test_paused_worker_loses_lease_and_its_late_ack_is_refused(scenario: Scenario) -> None:
    """Scenario 3, by SIGSTOP: a paused process is a blocked worker the task cannot help."""
    a = scenario.worker(*FAST_ARGS)
    b = scenario.worker(*FAST_ARGS)
    h = scenario.tasks["first_delivery_sleep"].enqueue(1.0, 2 * VT)
    first = wait_until(lambda: scenario.ledger.of(h.id), 10, message="first delivery")[0]
    paused = a if first.pid == a.pid else b
    other = b if paused is a else a
    paused.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: [x for x in scenario.ledger.of(h.id) if x.dc == 2], 5 * VT,
                   message="redelivery to the running worker")
    finally:
        paused.signal(signal.SIGCONT)
    wait_until(lambda: "lease lost" in paused.text(), 3 * VT, interval=0.05,
               message="the paused worker to log 'lease lost'")
    record = scenario.client.get_result(h.id, timeout=5 * VT)
    assert record.succeeded and record.result == 2
    assert record.worker is not None and record.worker.split(":")[1] == str(other.pid)
    wait_until(scenario.drained, 5, message="stream and PEL empty")
    report = check("3b paused-worker-lease-lost", scenario.ledger, [h.id])
    assert report.lost == 0 and report.duplicated <= 1


def test_graceful_sigterm_requeues_async_and_finishes_threads(scenario: Scenario) -> None:
    """Scenario 6: SIGTERM with async and thread tasks in flight loses nothing.

    Thread tasks finish inside shutdown_timeout; async ones still running at the
    deadline are cancelled and requeued at once, so a second worker completes them
    well before their lease would have expired.
    """
    vt, shutdown = 30.0, 1.5  # a long lease: recovery by lease expiry would be obvious
    args = ("--concurrency", "20", "--visibility-timeout", str(vt),
            "--shutdown-timeout", str(shutdown))
    first = scenario.worker(*args)
    slow = [scenario.tasks["resumable"].enqueue(60).id for _ in range(6)]
    threads = [scenario.tasks["sync_sleep"].enqueue(0.5).id for _ in range(4)]
    ids = slow + threads
    wait_until(lambda: scenario.ledger.count("start") >= len(ids), 10,
               message="every task to start")
    started = time.monotonic()
    first.signal(signal.SIGTERM)
    assert first.wait(shutdown + 10) == 0
    stopped_in = time.monotonic() - started
    assert all(x.pid == first.pid for x in scenario.ledger.lines() if x.id in threads
               and x.phase == "done"), "thread tasks finished on the stopping worker"
    # Requeued, not left pending for vt: ready in the stream, nobody's PEL.
    assert scenario.pending() == [] and scenario.stream_len() == len(slow)

    exited = time.monotonic()
    second = scenario.worker(*args)
    scenario.wait_drained(ids, vt / 2)
    took = time.monotonic() - exited
    assert took < vt / 3, f"requeued tasks took {took:.1f}s: waited for the lease?"
    for i in slow:
        runs = scenario.ledger.of(i)
        assert [x.phase for x in runs] == ["start", "start", "done"]
        assert runs[-1].pid == second.pid and runs[-1].extra["resumed"] is True
        assert scenario.client.get_result(i).succeeded
    report = check("6 graceful-sigterm", scenario.ledger, ids, stop_s=round(stopped_in, 2),
                   requeued=len(slow), completed_after_requeue_s=round(took, 2), vt=vt)
    assert report.lost == 0 and report.duplicated == 0
    # Every thread attempt finished inside shutdown_timeout and every async one was
    # requeued: nothing is left for lease expiry, and the log must not claim otherwise.
    assert "still running at shutdown" not in first.text()


def test_thread_task_overrunning_shutdown_timeout_runs_again(scenario: Scenario) -> None:
    """The documented window: a `def` task still running when shutdown_timeout ends.

    A thread cannot be interrupted, so its message is neither settled nor requeued by
    the stopping worker; it is recovered after visibility_timeout and runs again. What
    must hold: nothing is lost, and the final record is written.
    """
    shutdown = 1.0
    args = ("--concurrency", "5", "--visibility-timeout", str(VT), "--shutdown-timeout",
            str(shutdown))
    first = scenario.worker(*args)
    h = scenario.tasks["sync_sleep"].enqueue(3 * VT)
    wait_until(lambda: scenario.ledger.of(h.id), 10, message="the thread task to start")
    first.signal(signal.SIGTERM)
    second = scenario.worker(*args)
    record = scenario.client.get_result(h.id, timeout=10 * VT)
    assert record.succeeded
    exit_code = first.wait(10 * VT)
    wait_until(scenario.drained, 5, message="stream and PEL empty")
    runs = [x for x in scenario.ledger.of(h.id) if x.phase == "done"]
    report = check("6b thread-overruns-shutdown", scenario.ledger, [h.id],
                   runs=len(runs), first_exit=exit_code,
                   rerun_on=("second" if runs[-1].pid == second.pid else "first"))
    assert report.lost == 0
    assert report.duplicated <= 1


def test_entry_deleted_while_pending_is_logged_not_fatal(scenario: Scenario) -> None:
    """An entry XDEL'd from the stream while pending: recovery logs it and goes on."""
    r, keys = scenario.redis, scenario.keys
    doomed = scenario.tasks["noop"].enqueue("doomed").id
    r.xgroup_create(keys.stream, "workers", id="0", mkstream=True)
    # A consumer that read the entry and died (the test plays it), then the entry is deleted.
    ((_s, [(entry_id, _f)]),) = r.xreadgroup("workers", "ghost", {keys.stream: ">"}, count=1)
    assert r.xdel(keys.stream, entry_id) == 1
    w = scenario.worker(*FAST_ARGS)
    wait_until(lambda: "was deleted while pending" in w.text(), 15 * VT, interval=0.05,
               message="the deleted entry to be logged")
    assert "ERROR" in next(ln for ln in w.text().splitlines() if "deleted while pending" in ln)
    after = scenario.tasks["noop"].enqueue("after").id
    scenario.wait_drained([after], 10)
    assert w.alive() and scenario.pending() == []
    assert scenario.client.get_result(after).succeeded
    report = check("xdel-pending-entry", scenario.ledger, [doomed, after], accounted=[doomed],
                   deleted_entries_logged=1)
    assert report.lost == 0
    assert not pid_gone(w.pid)
