#!/usr/bin/env python3
"""Where a blocking ``def`` attempt's time goes on the worker's task threads.

    python3 bench/thread_handoff.py                  # 5,000 tasks, 5 repeats
    python3 bench/thread_handoff.py --n 10000 --repeats 7

The io-bound row of docs/benchmarks.md (``def`` tasks that ``time.sleep(0.01)``, 100 at a
time) reaches 70-90% of its ideal 10,000 tasks/s. This splits one attempt's cycle on its
slot into: job queued to a thread -> body starts; the body (10 ms asked); body ends ->
the loop concludes it; conclusion -> the slot's next job is queued. Each phase is stamped
by wrapping ``TaskThreads.submit`` in the worker process (a measurement only: the
worker's code is unchanged).

Two arms, interleaved, each a fresh process on one private redis-server (or REDIS_URL:
its DB is FLUSHED): ``alone``, and ``beside-busy``, with a process that spins on the CPU
10 nicer than the worker (as runworker's history writer runs beside it while it has
events to write). Prints one JSON line per run, then the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import asyncio, bisect, json, os, statistics, sys, time
from blitzq_django.engine import Client, RedisBroker, Worker
from blitzq_django.engine.worker import threads

n, sleep_s = int(sys.argv[1]), float(sys.argv[2])
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="th"), store_results=True)
stamps = []  # [queued, started, ended, concluded] per attempt
clock = time.perf_counter
submit = threads.TaskThreads.submit

def stamped(self, call, conclude):
    s = [clock(), 0.0, 0.0, 0.0]
    def timed_call():
        s[1] = clock()
        try:
            return call()
        finally:
            s[2] = clock()
    def timed_conclude(error, value, took):
        s[3] = clock()
        stamps.append(s)
        return conclude(error, value, took)
    return submit(self, timed_call, timed_conclude)

threads.TaskThreads.submit = stamped

def body(i):
    time.sleep(sleep_s)

task = client.task(name="sleep", queue="q")(body)
client.broker.sync.client.flushdb()
task.enqueue_many([(i,) for i in range(n)])
asyncio.run(Worker(client, queues=("q",), concurrency=100, threads=100, burst=True).run())
ends = sorted(s[2] for s in stamps)
queued = sorted(s[0] for s in stamps)
def ms(pairs):
    return statistics.mean((b - a) * 1000 for a, b in pairs)
# Each conclusion (but the last slot-fulls, when nothing is left) -> the next job queued.
turn = [(c, queued[i]) for c in sorted(s[3] for s in stamps)[:-100]
        if (i := bisect.bisect_left(queued, c)) < len(queued)]
print(json.dumps({
    "rate": (n - 1) / (ends[-1] - ends[0]),
    "queued_to_start_ms": ms((s[0], s[1]) for s in stamps),
    "body_ms": ms((s[1], s[2]) for s in stamps),
    "end_to_conclude_ms": ms((s[2], s[3]) for s in stamps),
    "conclude_to_next_ms": ms(turn),
}))
client.broker.sync.client.flushdb()
"""

SPIN = "import os\nos.nice(10)\nwhile True:\n    pass\n"
ARMS = ("alone", "beside-busy")


def run(url: str, arm: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    busy = (subprocess.Popen([sys.executable, "-c", SPIN]) if arm == "beside-busy"
            else None)
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.n), str(args.sleep)],
                             env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    if out.returncode:
        raise SystemExit(f"{arm} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=5_000, help="tasks per run")
    p.add_argument("--sleep", type=float, default=0.01, help="each task's time.sleep (s)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", type=Path, help="also write the runs and medians here")
    args = p.parse_args()

    sys.path.insert(0, str(ROOT / "bench"))
    from run import interleaved  # bench/run.py

    runs = interleaved(ARMS, args.repeats, lambda url, arm, _stage: run(url, arm, args))

    medians = {a: {k: statistics.median(v) for k, v in runs[a].items()} for a in ARMS}
    ideal = 100 / args.sleep
    print(f"\nmedians of {args.repeats} repeats (ms are means over a run's attempts):")
    print(f"{'arm':<13}{'tasks/s':>9}{'of ideal':>10}{'queued->start':>15}{'body':>8}"
          f"{'end->conclude':>15}{'conclude->next':>16}")
    for a in ARMS:
        x = medians[a]
        print(f"{a:<13}{x['rate']:>9,.0f}{x['rate'] / ideal:>10.0%}"
              f"{x['queued_to_start_ms']:>15.2f}{x['body_ms']:>8.2f}"
              f"{x['end_to_conclude_ms']:>15.2f}{x['conclude_to_next_ms']:>16.2f}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "runs": runs, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
