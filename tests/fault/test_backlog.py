"""A backlog under faults: 20,000 queued tasks, 3 workers, SIGKILLs, SIGSTOPs, a Redis restart.

The hardening issue this proves: a backlog must not delay the recovery of orphans (the
messages a SIGKILLed worker was running), and a worker must never re-claim and re-run
its own messages. Every duplicate must come from a documented window
(docs/delivery-guarantees.md): a worker killed before its settlement was written, a
worker paused past its lease, or the Redis restart.

Schedule (seconds after the 3 workers serve, while 20,000 tasks wait in the stream):
a random worker is SIGKILLed every 2 s and replaced at once; three times a worker is
SIGSTOPped for 2 x visibility_timeout, then SIGCONTed; Redis (AOF, appendfsync always)
is SIGKILLed and restarted once in the middle. After FAULTS_S the faults stop and the
queue drains. Every fault is recorded as a FaultEvent; the checks read the ledger.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from ..support.redis_server import RedisServer
from ..support.waiting import wait_until
from .harness import FaultEvent, Scenario, WorkerProcess, serving_since
from .ledger import FINISHED, Ledger, LedgerTail, Line, check

pytestmark = [pytest.mark.fault, pytest.mark.slow]

TASKS, WORKERS, CONCURRENCY = 20_000, 3, 4
VT = 3.0  # --visibility-timeout
HEARTBEAT = VT / 3  # default heartbeat_interval: leases are renewed this often
RECOVERY = VT / 2  # default recovery_interval
ORPHAN_BOUND = VT + RECOVERY + 1.0  # SIGKILL -> the orphan starts again elsewhere
# An orphan that was itself a redelivery: recover.lua claims one such entry per call.
REDELIVERED_BOUND = 2 * ORPHAN_BOUND
# A log line's time is taken after the claim it reports: this much later still counts.
LOG_SLACK_S = 0.5
# A finished run's settlement is written within a round trip or so (group commit): a
# run that ended longer than this before its worker was killed or paused was settled,
# so a duplicate of it is not explained by that fault.
SETTLE_SLACK_S = 1.0
ARGS = ("--concurrency", str(CONCURRENCY), "--visibility-timeout", str(VT),
        "--max-deliveries", "10", "--shutdown-timeout", "5")
SEED = 20_240_601
MAX_SLEEP_S, FAIL_ONCE = 0.05, 0.01

FAULTS_S = 40.0  # faults are injected this long, then the queue drains
KILL_EVERY_S = 2.0
PAUSE_S = 2 * VT
PAUSES_AT = (4.0, 23.0, 31.0)  # never two at once, never across the Redis restart
REDIS_AT = 17.0
DRAIN_S = 90.0  # after the faults: everything executed and Redis drained


@pytest.fixture
def backlog(durable_redis: RedisServer, tmp_path: Path) -> Iterator[Scenario]:
    s = Scenario(durable_redis.url, tmp_path)
    try:
        yield s
    finally:
        s.close()  # SIGKILLs every worker process group, paused ones included


# -- the fault schedule -----------------------------------------------------------


@dataclass
class Faults:
    """Injects the schedule into a Scenario and records every FaultEvent."""

    scenario: Scenario
    redis: RedisServer
    rnd: random.Random

    def __post_init__(self) -> None:
        self.events: list[FaultEvent] = []
        self.killed: set[int] = set()
        self.paused: WorkerProcess | None = None
        self.unexpected_exits: list[tuple[int, int | None, str]] = []
        self.skipped_kills = 0

    def note(self, kind: str, pid: int = 0) -> None:
        self.events.append(FaultEvent(kind, time.time(), pid))

    def live(self) -> list[WorkerProcess]:
        return [w for w in self.scenario.workers if w.pid not in self.killed]

    def start_worker(self) -> WorkerProcess:
        w = self.scenario.worker(*ARGS, ready=False)  # a replacement starts at once
        self.note("start", w.pid)
        return w

    def candidates(self) -> list[WorkerProcess]:
        """Live workers serving and not paused: the ones a fault may hit."""
        return [w for w in self.live() if w is not self.paused and w.alive()
                and serving_since(w) is not None]

    def check_exits(self) -> None:
        """A worker that exited without being killed is a failure; keep 3 up meanwhile."""
        for w in self.live():
            if not w.alive():
                self.killed.add(w.pid)  # not live any more
                self.unexpected_exits.append((w.pid, w.process.returncode, w.text()[-2000:]))
                self.note("exit", w.pid)
                self.start_worker()

    def kill(self) -> None:
        choices = self.candidates()
        if not choices:
            self.skipped_kills += 1
            return
        victim = self.rnd.choice(choices)
        self.killed.add(victim.pid)
        victim.kill()  # SIGKILL its group, reaped before we go on
        # Noted once reaped: every ledger line of the victim is older than this.
        self.note("kill", victim.pid)
        self.start_worker()

    def stop(self) -> None:
        choices = self.candidates()
        if self.paused is not None or not choices:
            return
        self.paused = self.rnd.choice(choices)
        self.note("stop", self.paused.pid)
        self.paused.signal(signal.SIGSTOP)

    def cont(self) -> None:
        if self.paused is None:
            return
        self.paused.signal(signal.SIGCONT)
        self.note("cont", self.paused.pid)
        self.paused = None

    def restart_redis(self) -> None:
        # A worker still starting up would exit on a dead Redis: let every one serve first.
        wait_until(lambda: all(serving_since(w) or not w.alive() for w in self.live()), 20,
                   interval=0.05, message="every worker to serve before the Redis restart")
        self.note("redis_kill")
        self.redis.kill()
        self.redis.start(timeout=30)  # same port, same dir: it replays its AOF
        self.note("redis_back")

    def run(self, finished: Callable[[], bool]) -> None:
        """Play the schedule for FAULTS_S (or until ``finished()``); SIGCONT at the end."""
        plan = [(KILL_EVERY_S * i, self.kill) for i in range(1, int(FAULTS_S / KILL_EVERY_S) + 1)]
        plan += [(at, self.stop) for at in PAUSES_AT]
        plan += [(at + PAUSE_S, self.cont) for at in PAUSES_AT]
        plan += [(REDIS_AT, self.restart_redis)]
        # Ties: SIGCONT before anything else, then a kill, a pause, the Redis restart.
        order = {self.cont: 0, self.kill: 1, self.stop: 2, self.restart_redis: 3}
        plan.sort(key=lambda p: (p[0], order[p[1]]))
        begin = time.monotonic()
        try:
            for at, action in plan:
                delay = begin + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # (noqa: sleep) the fault schedule's deliberate gaps
                self.check_exits()
                if finished():
                    break
                action()
        finally:
            self.cont()
        self.check_exits()

    # -- what the events say -----------------------------------------------------

    def of(self, kind: str) -> list[FaultEvent]:
        return [e for e in self.events if e.kind == kind]

    def pauses(self) -> list[tuple[int, float, float]]:
        """(pid, stopped at, continued at) of every pause."""
        conts = self.of("cont")
        return [(s.pid, s.t, next(c.t for c in conts if c.pid == s.pid and c.t >= s.t))
                for s in self.of("stop")]

    def outages(self) -> list[tuple[float, float]]:
        return list(zip([e.t for e in self.of("redis_kill")],
                        [e.t for e in self.of("redis_back")], strict=True))

    def unavailable(self, end: float) -> list[tuple[float, float]]:
        """Intervals in which no worker was serving and unpaused (none by construction)."""
        spans: list[tuple[float, float, int]] = []  # (from, to, pid) when a worker could work
        stops = self.pauses()
        for w in self.scenario.workers:
            since = serving_since(w)
            if since is None:
                continue
            gone = next((e.t for e in self.events if e.kind in ("kill", "exit")
                         and e.pid == w.pid), end)
            cuts = sorted((s, c) for pid, s, c in stops if pid == w.pid)
            at = since
            for s, c in cuts:
                if s > at:
                    spans.append((at, min(s, gone), w.pid))
                at = max(at, c)
            if at < gone:
                spans.append((at, gone, w.pid))
        spans.sort()
        holes, covered = [], self.events[0].t if self.events else end
        for a, b, _pid in spans:
            if a > covered:
                holes.append((covered, a))
            covered = max(covered, b)
        if covered < end:
            holes.append((covered, end))
        return holes


# -- reading the ledger ---------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One completed run (a done or fail line) with the start line of the same delivery."""

    id: str
    attempt: int
    pid: int
    dc: int
    start: float
    end: float


def completed_runs(lines: list[Line]) -> dict[tuple[str, int], list[Run]]:
    starts: dict[tuple[str, int, int, int], float] = {}
    runs: dict[tuple[str, int], list[Run]] = defaultdict(list)
    for x in lines:
        key = (x.id, x.attempt, x.pid, x.dc)
        if x.phase == "start":
            starts[key] = x.t
        elif x.phase in FINISHED:
            runs[(x.id, x.attempt)].append(Run(x.id, x.attempt, x.pid, x.dc,
                                               starts.get(key, x.t), x.t))
    return runs


def classify(dup: Run, earlier: list[Run], faults: Faults, logs: dict[int, str]) -> str:
    """Why ``dup`` ran although ``earlier`` runs of the same attempt completed.

    same_pid: the bug (a worker re-claimed and re-ran its own message); killed: an earlier
    run completed on a worker SIGKILLed before its settlement was written (window 1);
    paused: one of the two runs was on a worker SIGSTOPped past its lease (window 2);
    lease_lost: the earlier run's settlement was refused as `lease lost` without a pause
    (window 2, a starved event loop); redis: the runs straddle the Redis restart
    (window 4); else unexplained.
    """
    if any(r.pid == dup.pid for r in earlier):
        return "same_pid"
    kills = {e.pid: e.t for e in faults.of("kill")}

    def unsettled(run: Run, fault_at: float) -> bool:
        """Whether ``run`` may still have been waiting for its settlement at ``fault_at``:
        it ended at most SETTLE_SLACK_S before (or a Redis outage held its settlement)."""
        return run.end >= fault_at - SETTLE_SLACK_S or any(
            down <= fault_at and back >= run.end for down, back in faults.outages())

    for r in earlier:
        k = kills.get(r.pid)
        if k is not None and r.end <= k <= dup.start and unsettled(r, k):
            return "killed"
    for r in earlier:
        for held, other in ((r, dup), (dup, r)):
            for pid, stopped, resumed in faults.pauses():
                if (pid == held.pid and resumed - stopped >= VT and unsettled(held, stopped)
                        and held.start <= resumed + VT and other.start >= stopped):
                    return "paused"
    for r in earlier:
        if f"lease lost; message may be executed again (message {dup.id}," in logs.get(r.pid, ""):
            return "lease_lost"
    for r in earlier:
        for down, back in faults.outages():
            if (r.end >= down - SETTLE_SLACK_S and r.start <= back + VT
                    and dup.start >= down):
                return "redis"
    return "unexplained"


def recovery_times(log: str) -> list[float]:
    """Wall-clock times of a worker's ``recovered`` log lines (its claims of orphans)."""
    import datetime

    out = []
    for line in log.splitlines():
        if "recovered " in line:
            try:
                out.append(datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                           .timestamp())
            except ValueError:
                continue
    return out


def claimed_then_paused(kill: FaultEvent, faults: Faults, recovered: dict[int, list[float]]
                        ) -> float | None:
    """When a worker that claimed orphans after ``kill`` was SIGSTOPped before it could
    start them (they stay its own until that claim's lease runs out): the SIGSTOP's time,
    else None."""
    for pid, stopped, _resumed in faults.pauses():
        if kill.t < stopped <= kill.t + ORPHAN_BOUND and any(
                kill.t < at <= stopped + LOG_SLACK_S for at in recovered.get(pid, ())):
            return stopped
    return None


def orphan_delays(lines: list[Line], faults: Faults, end: float,
                  logs: dict[int, str]) -> dict[str, Any]:
    """For every SIGKILL: each message the killed pid started and never finished, and how
    long until it started again in another pid."""
    by_key: dict[tuple[str, int], list[Line]] = defaultdict(list)
    for x in lines:
        by_key[(x.id, x.attempt)].append(x)
    holes = faults.unavailable(end)
    measured: list[tuple[float, str, int, int]] = []  # (delay, id, killed pid, dc)
    redelivered: list[tuple[float, str, int, int]] = []  # the same, killed at delivery >= 2
    # (delay, id, killed pid, its bound): perhaps claimed by a worker paused right after
    paused_claims: list[tuple[float, str, int, float]] = []
    recovered = {pid: recovery_times(text) for pid, text in logs.items()}
    excluded: dict[str, list[float]] = defaultdict(list)
    never: list[str] = []
    for kill in faults.of("kill"):
        mine: dict[tuple[str, int], list[Line]] = defaultdict(list)
        for x in lines:
            if x.pid == kill.pid:
                mine[(x.id, x.attempt)].append(x)
        for key, own in mine.items():
            if any(x.phase in FINISHED for x in own):
                continue  # it finished there: a duplicate at worst, not an orphan
            others = [x for x in by_key[key] if x.pid != kill.pid]
            finishers = {x.pid for x in others if x.phase in FINISHED}
            if any(x.phase == "start" and x.t <= kill.t and x.pid in finishers
                   for x in others):
                # Another worker had it before the kill and completed it: the killed run
                # was a stale copy (its worker was paused past its lease), not an orphan.
                excluded["run_elsewhere"].append(0.0)
                continue
            nxt = min((x.t for x in others if x.phase == "start" and x.t > kill.t),
                      default=None)
            if nxt is None:
                never.append(key[0])
                continue
            delay = nxt - kill.t
            # Where its restart was due: a fault in there (not the delay itself) excuses it.
            window = (kill.t, kill.t + ORPHAN_BOUND)
            dc = max(x.dc for x in own)
            if any(a <= window[1] and b >= window[0] for a, b in faults.outages()) or any(
                    kill.t <= a <= nxt and nxt - b <= ORPHAN_BOUND
                    for a, b in faults.outages()):
                # Due during a Redis outage; or Redis went down before it restarted
                # (late on a loaded machine) and it restarted within the bound of
                # Redis coming back.
                excluded["redis_restart"].append(delay)
            elif any(a <= window[1] and b >= window[0] for a, b in holes):
                excluded["all_paused"].append(delay)
            elif delay > ORPHAN_BOUND and (
                    stopped := claimed_then_paused(kill, faults, recovered)) is not None:
                # Late, and window 2 of the guarantees explains it: a paused worker's
                # messages wait for its lease, claims included (an orphan on time is held
                # to the plain bound, below).
                bound = stopped - kill.t + ORPHAN_BOUND
                paused_claims.append((delay, key[0], kill.pid, bound))
            elif dc >= 2:
                # recover.lua claims at most one already-recovered entry per call (the
                # poison-message rule), so these may wait a few recovery rounds more.
                redelivered.append((delay, key[0], kill.pid, dc))
            else:
                measured.append((delay, key[0], kill.pid, dc))
    measured.sort(reverse=True)
    redelivered.sort(reverse=True)
    paused_claims.sort(reverse=True)
    return {"measured": measured, "redelivered": redelivered, "excluded": excluded,
            "paused_claims": paused_claims, "never": never, "holes": holes}


def pause_orphan_delays(lines: list[Line], faults: Faults) -> tuple[int, list[float]]:
    """For every pause: what the paused pid had started and not finished when stopped
    (returned: how many), and how long after the SIGSTOP each started in another pid."""
    delays, count = [], 0
    for pid, stopped, _resumed in faults.pauses():
        held = {(x.id, x.attempt) for x in lines if x.pid == pid and x.phase == "start"
                and x.t <= stopped}
        held -= {(x.id, x.attempt) for x in lines if x.pid == pid and x.phase in FINISHED
                 and x.t <= stopped}
        count += len(held)
        for key in held:
            nxt = [x.t for x in lines if (x.id, x.attempt) == key and x.pid != pid
                   and x.phase == "start" and x.t > stopped]
            if nxt:
                delays.append(min(nxt) - stopped)
    return count, delays


def self_reclaims(lines: list[Line]) -> list[tuple[str, int, int]]:
    """(id, attempt, pid) of runs a pid started again under the very next delivery count:
    no other worker claimed it in between, so the pid re-claimed its own message (the bug,
    whether or not both runs completed)."""
    starts: dict[tuple[str, int], list[Line]] = defaultdict(list)
    for x in lines:
        if x.phase == "start":
            starts[(x.id, x.attempt)].append(x)
    found = []
    for (message_id, attempt), runs in starts.items():
        runs.sort(key=lambda x: x.dc)
        for a, b in itertools.pairwise(runs):
            if a.pid == b.pid and b.dc == a.dc + 1:
                found.append((message_id, attempt, a.pid))
    return found


# -- the test ---------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_backlog_under_faults_loses_nothing_and_recovers_orphans_promptly(
        backlog: Scenario, durable_redis: RedisServer) -> None:
    scenario = backlog
    rnd = random.Random(SEED)
    calls = [(round(rnd.uniform(0, MAX_SLEEP_S), 4), rnd.random() < FAIL_ONCE)
             for _ in range(TASKS)]
    fail_once = sum(1 for _s, f in calls if f)
    # Half `def`, half `async def`, interleaved in chunks so the stream mixes them.
    ids: list[str] = []
    began = time.monotonic()
    for n, start in enumerate(range(0, TASKS, 500)):
        task = scenario.tasks["backlog_sync" if n % 2 else "backlog_async"]
        ids += [h.id for h in task.enqueue_many(calls[start:start + 500])]
    enqueue_s = time.monotonic() - began
    assert len(set(ids)) == TASKS

    tail = LedgerTail(scenario.ledger.path)
    faults = Faults(scenario, durable_redis, random.Random(SEED + 1))
    for _ in range(WORKERS):
        faults.start_worker()
    for w in scenario.workers:
        w.wait_ready()
    started = time.monotonic()

    wanted = set(ids)

    def finished() -> bool:
        tail.update()
        return wanted <= tail.done

    faults.run(finished)
    faults_s = time.monotonic() - started
    done_at_faults_end = len(tail.done)

    def drained() -> bool:
        return finished() and scenario.drained()

    drain_error = ""
    try:
        wait_until(drained, DRAIN_S, interval=0.25, message="every task to run and drain")
    except AssertionError as exc:
        drain_error = str(exc)
    total_s = time.monotonic() - started
    end = time.time()
    tail.update()
    lines = tail.lines
    live = [w for w in scenario.workers if w.pid not in faults.killed]

    # Duplicates, by documented window.
    logs = {w.pid: w.text() for w in scenario.workers}
    by_class: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for key, runs in completed_runs(lines).items():
        if key[0] not in wanted:
            continue
        runs.sort(key=lambda r: r.end)
        for i in range(1, len(runs)):
            by_class[classify(runs[i], runs[:i], faults, logs)].append(key)
    recovered_own = sum(text.count("recovered ") for text in logs.values())

    orphans = orphan_delays(lines, faults, end, logs)
    measured = orphans["measured"]
    excluded = orphans["excluded"]
    max_delay = measured[0][0] if measured else 0.0
    over = [m for m in measured if m[0] > ORPHAN_BOUND]
    redelivered = orphans["redelivered"]
    over_redelivered = [m for m in redelivered if m[0] > REDELIVERED_BOUND]
    paused_claims = orphans["paused_claims"]
    over_paused = [m for m in paused_claims if m[0] > m[3]]
    pause_held, pause_delays = pause_orphan_delays(lines, faults)
    reclaimed = self_reclaims(lines)
    t0 = faults.events[0].t
    timeline = " ".join(f"{e.kind}@{e.t - t0:.1f}" + (f":{e.pid}" if e.pid else "")
                        for e in faults.events if e.kind != "start")
    print(f"\n  faults: {timeline}", flush=True)

    records = scenario.records(ids) if not drain_error else {}
    not_final = [i for i, r in records.items() if r is None or not r.succeeded]
    dead = scenario.dead_letters()

    report = check(
        "backlog 20k (3 workers, kills, pauses, redis restart)",
        Ledger(scenario.ledger.path), ids,
        kills=len(faults.of("kill")), pauses=len(faults.pauses()),
        redis_restarts=len(faults.outages()), fail_once=fail_once,
        orphans=len(measured), max_orphan_delay=round(max_delay, 2), bound=ORPHAN_BOUND,
        orphans_over_bound=len(over), redelivered_orphans=len(redelivered),
        max_redelivered_orphan_delay=round(redelivered[0][0] if redelivered else 0.0, 2),
        paused_claim_orphans=len(paused_claims),
        max_paused_claim_delay=round(paused_claims[0][0] if paused_claims else 0.0, 2),
        excluded=",".join(f"{k}:{len(v)}(max {max(v):.1f}s)" for k, v in excluded.items())
        or "0",
        pause_held=pause_held, pause_held_rerun_elsewhere=len(pause_delays),
        max_pause_rerun_delay=round(max(pause_delays, default=0.0), 2),
        redis_outage_s=round(sum(b - a for a, b in faults.outages()), 2),
        dup_killed=len(by_class["killed"]), dup_paused=len(by_class["paused"]),
        dup_lease_lost=len(by_class["lease_lost"]), dup_redis=len(by_class["redis"]),
        dup_same_pid=len(by_class["same_pid"]), dup_unexplained=len(by_class["unexplained"]),
        recovered_log_lines=recovered_own, self_reclaimed_starts=len(reclaimed),
        dead_letters=len(dead),
        unexpected_exits=len(faults.unexpected_exits), corrupt_lines=len(tail.corrupt),
        enqueue_s=round(enqueue_s, 1), faults_s=round(faults_s, 1),
        done_at_faults_end=done_at_faults_end, total_s=round(total_s, 1))
    for delay, message_id, pid, dc in (measured[:5] + redelivered[:2]):
        print(f"  orphan {message_id} of killed pid {pid} (delivery {dc}) restarted after "
              f"{delay:.2f}s", flush=True)
    (scenario.tmp / "faults.json").write_text(json.dumps({
        "events": [asdict(e) for e in faults.events],
        "duplicates": dict(by_class),
        "orphans": orphans["measured"], "redelivered": redelivered,
        "excluded": orphans["excluded"]}))
    for cls in ("same_pid", "unexplained", "redis", "lease_lost"):
        for message_id, attempt in by_class[cls][:5]:
            runs = [(x.pid, x.dc, x.phase, round(x.t - t0, 2)) for x in lines
                    if x.id == message_id and x.attempt == attempt]
            print(f"  {cls}: {message_id} attempt {attempt}: {runs}", flush=True)

    problems = []
    if faults.unexpected_exits:
        pid, code, text = faults.unexpected_exits[0]
        problems.append(f"{len(faults.unexpected_exits)} worker(s) exited unasked; first "
                        f"pid {pid} code {code}:\n{text}")
    if drain_error:
        problems.append(f"{drain_error}: {len(tail.done & wanted)}/{TASKS} done, "
                        f"stream {scenario.stream_len()}, pending {len(scenario.pending())}")
    if report.lost:
        problems.append(f"lost {report.lost}: {report.lost_ids}")
    if orphans["never"]:
        problems.append(f"{len(orphans['never'])} orphans never restarted elsewhere")
    if not_final:
        problems.append(f"{len(not_final)} records not succeeded: {not_final[:5]}")
    if dead:
        problems.append(f"{len(dead)} dead letters: {list(dead.items())[:3]}")
    if by_class["same_pid"]:
        problems.append(f"{len(by_class['same_pid'])} duplicates ran twice in the same pid "
                        "(a worker re-claimed its own message)")
    if reclaimed:
        problems.append(f"{len(reclaimed)} runs restarted by their own pid under the next "
                        f"delivery count (self-reclaim): {reclaimed[:3]}")
    if by_class["unexplained"]:
        problems.append(f"{len(by_class['unexplained'])} duplicates no documented window "
                        "explains")
    if over:
        problems.append(f"{len(over)} of {len(measured)} orphans restarted later than "
                        f"{ORPHAN_BOUND}s after their worker's SIGKILL (max {max_delay:.1f}s; "
                        f"delay, id, killed pid, delivery: {over[:3]})")
    if over_paused:
        problems.append(f"{len(over_paused)} of {len(paused_claims)} orphans claimed by a "
                        "worker paused right after restarted later than their bound: "
                        f"{over_paused[:3]}")
    if over_redelivered:
        problems.append(f"{len(over_redelivered)} of {len(redelivered)} redelivered orphans "
                        f"restarted later than {REDELIVERED_BOUND}s after their worker's "
                        f"SIGKILL (max {redelivered[0][0]:.1f}s)")
    if tail.corrupt:
        problems.append(f"{len(tail.corrupt)} corrupt ledger lines: {tail.corrupt[:2]}")
    # The harness itself: the schedule must have run, or the test proves nothing.
    if len(faults.of("kill")) < 10 or len(faults.pauses()) < 2 or not faults.outages():
        problems.append(f"the schedule did not run: {len(faults.of('kill'))} kills, "
                        f"{len(faults.pauses())} pauses, {len(faults.outages())} restarts "
                        f"(skipped kills {faults.skipped_kills}): the backlog drained early?")
    if len(live) != WORKERS:
        problems.append(f"{len(live)} workers up at the end, not {WORKERS}")
    assert not problems, "\n".join(problems)
