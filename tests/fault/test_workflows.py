"""Workflows under faults (docs/workflows.md, docs/architecture.md "Workflows"): workers
SIGKILLed over and over and a Redis restart (AOF) while chords and chains run. Every
callback and every chain step is enqueued exactly once, gets every result, in order, and
every workflow ends."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from blitzq_django.engine import chain, chord, group
from blitzq_django.engine.core import workflow as wf
from blitzq_django.engine.errors import BlitzqError

from ..support.redis_server import RedisServer
from ..support.waiting import wait_until
from .harness import FAST_ARGS, Scenario
from .ledger import REPORTS, Line

pytestmark = pytest.mark.fault

CHORDS, MEMBERS = 500, 10
CHAINS, STEPS = 100, 5
# Leases short enough to recover killed workers' messages fast, and a delivery budget no
# kill schedule here exhausts (a step dead-lettered for max deliveries would fail its
# workflow, which is right, but not what this test is about).
ARGS = ("--concurrency", "50", "--visibility-timeout", "2", "--max-deliveries", "50",
        "--shutdown-timeout", "5")
CALLBACK = 2 + MEMBERS  # chord 0, its group 1, members 2 .. 11, the callback
KILLS = 6


class Producer(threading.Thread):
    """Enqueues every workflow under a fixed id, again after an error (Redis down):
    enqueuing the same id twice adds nothing."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(daemon=True)
        self.scenario = scenario
        self.chords = [f"chord-{i}" for i in range(CHORDS)]
        self.chains = [f"chain-{i}" for i in range(CHAINS)]
        self.done = 0
        self.errors = 0

    def run(self) -> None:
        t = self.scenario.tasks
        flows: list[tuple[str, Any]] = []
        every = CHORDS // CHAINS
        for i, workflow_id in enumerate(self.chords):
            flows.append((workflow_id, chord(group(t["wf_member"].s(m) for m in range(MEMBERS)),
                                             t["wf_collect"].s())))
            if i % every == 0:
                flows.append((self.chains[i // every],
                              chain(t["wf_step"].s([], 0),
                                    *(t["wf_step"].s(s) for s in range(1, STEPS)))))
        for workflow_id, flow in flows:
            backoff = 0.05
            while True:
                try:
                    flow.enqueue(workflow_id=workflow_id)
                    break
                except BlitzqError:
                    self.errors += 1
                    time.sleep(backoff)  # (noqa: sleep) backs off before enqueuing again
                    backoff = min(backoff * 2, 1.0)
            self.done += 1


def _stuck(scenario: Scenario, ids: list[str], workers: list[Any]) -> str:
    """What the workflows that did not end are waiting for."""
    store = scenario.broker.workflows
    open_ = [i for i in ids if store.fields(i, ["state"])[0] == b"running"]
    out = [f"{len(open_)} of {len(ids)} workflows still running; "
           f"queue: {scenario.client.queue_stats()}"]
    for workflow_id in open_[:3]:
        info = scenario.client.workflows.inspect(workflow_id)
        assert info is not None
        out.append(f"{workflow_id}: " + ", ".join(f"{m.node}={m.state}" for m in info.members()))
    errors = [line for w in workers for line in w.text().splitlines()
              if "ERROR" in line or "Traceback" in line]
    return "\n".join(out + errors[:20])


def first_runs(lines: list[Line], message_id: str) -> list[Line]:
    """Starts of a message on its first delivery: two would mean it was enqueued twice."""
    return [x for x in lines if x.id == message_id and x.phase == "start" and x.dc == 1]


def test_chords_and_chains_under_kills_and_a_redis_restart(durable_redis: RedisServer,
                                                          tmp_path: Path) -> None:
    scenario = Scenario(durable_redis.url, tmp_path)
    rng = random.Random(22)
    try:
        workers = [scenario.worker(*ARGS) for _ in range(3)]
        producer = Producer(scenario)
        began = time.monotonic()
        producer.start()
        store = scenario.broker.workflows
        ids = producer.chords + producer.chains

        def finished() -> int:
            try:
                states = [store.fields(i, ["state"])[0] for i in ids]
            except BlitzqError:
                return -1  # Redis is coming back
            return sum(1 for s in states if s in (b"succeeded", b"failed", b"cancelled"))

        # The chaos: a worker SIGKILLed every second (a fresh one started for it), six
        # times, and Redis SIGKILLed and restarted from its AOF after the third kill.
        kills = restarts = 0
        while kills < KILLS:
            time.sleep(1.0)  # (noqa: sleep) the kill schedule: one SIGKILL a second
            victim = rng.choice([w for w in workers if w.alive()])
            victim.kill()
            kills += 1
            workers.append(scenario.worker(*ARGS, ready=False))
            if kills == KILLS // 2:
                durable_redis.kill()
                time.sleep(0.5)  # (noqa: sleep) the deliberate outage
                durable_redis.start()
                restarts += 1
        producer.join(60)
        assert not producer.is_alive(), "the producer did not finish enqueuing"
        try:
            wait_until(lambda: finished() == len(ids), 60, interval=0.1,
                       message="every workflow to end (none may hang)")
        except AssertionError:
            raise AssertionError(_stuck(scenario, ids, workers)) from None
        elapsed = time.monotonic() - began

        lines = scenario.ledger.lines()
        reruns = 0
        for workflow_id in producer.chords:
            handle = scenario.client.workflows.handle(workflow_id)
            assert handle.result(timeout=1) == list(range(MEMBERS)), workflow_id
            callback = wf.member_id(workflow_id, CALLBACK)
            assert len(first_runs(lines, callback)) <= 1, f"{callback} enqueued twice"
            done = [x for x in lines if x.id == callback and x.phase == "done"]
            assert done and all(x.extra["values"] == list(range(MEMBERS)) for x in done)
            reruns += len(done) - 1
        for workflow_id in producer.chains:
            handle = scenario.client.workflows.handle(workflow_id)
            assert handle.result(timeout=1) == list(range(STEPS)), workflow_id
            previous_done = 0.0
            for step in range(STEPS):
                step_id = wf.member_id(workflow_id, step + 1)
                assert len(first_runs(lines, step_id)) <= 1, f"{step_id} enqueued twice"
                runs = [x for x in lines if x.id == step_id]
                first_start = min(x.t for x in runs if x.phase == "start")
                assert first_start >= previous_done, f"{step_id} started before its step"
                previous_done = min(x.t for x in runs if x.phase == "done")
        line = (f"[fault] workflows: chords={CHORDS}x{MEMBERS} chains={CHAINS}x{STEPS} "
                f"kills={kills} redis_restarts={restarts} enqueue_errors={producer.errors} "
                f"callback_reruns={reruns} ended_in={elapsed:.1f}s")
        print(line, flush=True)
        REPORTS.append(line)
        assert restarts == 1 and kills == KILLS
    finally:
        scenario.close()


def test_a_step_run_twice_after_a_lost_lease_enqueues_the_next_once(
        scenario: Scenario) -> None:
    # The first delivery blocks its worker's event loop past the lease: the other worker
    # takes the message over and runs it (delivery 2); then the first finishes too and
    # records the same step again. The next step is enqueued once.
    scenario.worker(*FAST_ARGS)
    scenario.worker(*FAST_ARGS)
    t = scenario.tasks
    handle = chain(t["wf_block_once"].si(4.0), t["wf_step"].si([], 1)).enqueue()
    blocked, following = wf.member_id(handle.id, 1), wf.member_id(handle.id, 2)
    wait_until(lambda: len([x for x in scenario.ledger.of(blocked) if x.phase == "done"])
               >= 2, 20, interval=0.05, message="both runs of the blocked step to finish")
    assert handle.result(timeout=10) == [1]
    wait_until(scenario.drained, 10, message="the queue to drain")
    lines = scenario.ledger.lines()
    assert sorted(x.dc for x in lines if x.id == blocked and x.phase == "done") == [1, 2]
    assert len([x for x in lines if x.id == following and x.phase == "start"]) == 1
    assert handle.progress() == (2, 2)
