#!/usr/bin/env python3
"""CPU-bound tasks: blitzq's process executor against Celery prefork and Dramatiq processes.

    python3 bench/cpu_bound.py              # 200 tasks of ~20 ms, 3 interleaved repeats
    python3 bench/cpu_bound.py --doc        # and write its section of docs/benchmarks.md

Each task is pure-Python work (a loop summing integers, calibrated here to ``--ms``
milliseconds), then one INCR of a counter in Redis. For each system a worker starts in a
process of its own, runs 4 warm-up tasks (so its processes are up), then the clock runs
from the first of ``--tasks`` enqueues to the moment the counter says all of them ran:
tasks/s = tasks / that time. Two worker processes (or threads) each, on one private Redis
(or REDIS_URL, whose DB is FLUSHED):

- ``blitzq-process``: one blitzq worker, ``executor="process"``, ``processes=2``
  (concurrency 8);
- ``blitzq-thread``: the same task on blitzq's thread executor (``threads=2``), for
  contrast: the GIL runs one at a time;
- ``celery``: ``--pool prefork --concurrency 2``, acks_late;
- ``dramatiq``: ``--processes 2 --threads 1``;
- ``floor``: no queue, the same loops on a warm ``multiprocessing.Pool(2)`` (no INCR):
  what the machine gives two processes in that round, when other jobs share it.

The ideal on 2 cores is 2 / task time (100/s at 20 ms). Systems run interleaved
(round-robin) ``--repeats`` times; medians are reported. Runs in bench/run.py's venv
(.bench-venv, with Celery and Dramatiq; run ``python3 bench/run.py --quick --only blitzq
--workloads enqueue_single`` once to create it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "benchmarks.md"
LOGS = Path(tempfile.gettempdir()) / "blitzq-cpu-bench"
MARKER = "<!-- Below: written by other bench/ scripts; bench/run.py keeps it as is. -->"
HEADING = "## CPU-bound tasks: process executor"
SYSTEMS = ("blitzq-process", "celery", "dramatiq", "blitzq-thread", "floor")
QUEUE = "cpu"
DONE = "cpu-bench:done"
WORKERS = 2
URL = os.environ.get("CPU_BENCH_URL", "")
SYSTEM = os.environ.get("CPU_BENCH_SYSTEM", "")


# -- the task (every system runs this very function) -------------------------------------


def burn(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


_client: Any = None


def burn_task(n: int) -> int:
    global _client
    total = burn(n)
    if _client is None:  # one connection per process, made in that process
        import redis

        _client = redis.Redis.from_url(URL)
    _client.incr(DONE)
    return total


# -- each system's worker, defined when this module is imported by that worker -------------

if SYSTEM == "celery":
    from celery import Celery

    app = Celery("cpu", broker=URL)
    app.conf.update(task_default_queue=QUEUE, task_acks_late=True, task_ignore_result=True,
                    worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)
    celery_burn = app.task(name="cpu.burn")(burn_task)

if SYSTEM == "dramatiq":
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker as DramatiqBroker

    dramatiq.set_broker(DramatiqBroker(url=URL))
    dramatiq_burn = dramatiq.actor(actor_name="cpu_burn", queue_name=QUEUE,
                                   max_retries=0)(burn_task)


def blitzq_client(executor: str, url: str = "") -> Any:
    from blitzq_django.engine import Client, RedisBroker

    client = Client(RedisBroker(url or URL, namespace="cpu"), default_queue=QUEUE)
    client.task(burn_task, name="cpu.burn", executor=executor)
    return client


def run_blitzq_worker(executor: str) -> None:
    import asyncio

    from blitzq_django.engine import Worker

    worker = Worker(blitzq_client(executor), queues=(QUEUE,), concurrency=8,
                    threads=WORKERS, processes=WORKERS)
    asyncio.run(worker.run(install_signal_handlers=True, close_broker=True))


def worker_command(system: str) -> list[str]:
    py = sys.executable
    if system.startswith("blitzq"):
        executor = system.split("-")[1]
        return [py, "-c", f"import bench.cpu_bound as b; b.run_blitzq_worker({executor!r})"]
    if system == "celery":
        return [py, "-m", "celery", "-A", "bench.cpu_bound", "worker", "--pool=prefork",
                f"--concurrency={WORKERS}", "--loglevel=WARNING", "-Q", QUEUE,
                "--without-gossip", "--without-mingle", "--without-heartbeat"]
    return [py, "-m", "dramatiq", "bench.cpu_bound", "--processes", str(WORKERS),
            "--threads", "1", "--queues", QUEUE]


def producer(system: str, url: str) -> Any:
    """A function enqueueing one task with argument n, in this (the driver's) process."""
    if system.startswith("blitzq"):
        client = blitzq_client(system.split("-")[1], url)
        spec = client.registry.get("cpu.burn")
        return lambda n: client.enqueue(spec, (n,), {})
    if system == "celery":
        from celery import Celery

        capp = Celery("cpu", broker=url)
        capp.conf.update(task_default_queue=QUEUE)
        return lambda n: capp.send_task("cpu.burn", args=[n], queue=QUEUE)
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker as DramatiqBroker

    broker = DramatiqBroker(url=url)
    dramatiq.set_broker(broker)

    def send(n: int) -> None:
        broker.enqueue(dramatiq.Message(queue_name=QUEUE, actor_name="cpu_burn", args=(n,),
                                        kwargs={}, options={}))

    return send


# -- the driver ------------------------------------------------------------------------------


def calibrate(ms: float) -> tuple[int, float]:
    """n such that burn(n) takes about ``ms`` of CPU time here, and its measured median
    (CPU time, not wall clock: other jobs on the machine do not skew it)."""

    def took(n: int, times: int) -> float:
        samples = []
        for _ in range(times):
            began = time.thread_time()
            burn(n)
            samples.append(time.thread_time() - began)
        return statistics.median(samples)

    n = 100_000
    for _ in range(3):
        n = max(1000, int(n * ms / 1000 / took(n, 7)))
    return n, took(n, 11) * 1000


def wait_count(r: Any, target: int, limit: float) -> float:
    deadline = time.monotonic() + limit
    while True:
        if int(r.get(DONE) or 0) >= target:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{int(r.get(DONE) or 0)} of {target} tasks ran in {limit} s")
        time.sleep(0.002)


def run_floor(n: int, tasks: int) -> float:
    """No queue: the same loops on a warm multiprocessing.Pool of 2, one task per call.
    What the machine gives 2 processes at this moment (other jobs share it)."""
    import multiprocessing

    with multiprocessing.get_context("forkserver").Pool(WORKERS) as pool:
        pool.map(burn, [1000] * 8, chunksize=1)  # warm
        began = time.perf_counter()
        pool.map(burn, [n] * tasks, chunksize=1)
        return tasks / (time.perf_counter() - began)


def run_one(system: str, url: str, n: int, tasks: int) -> float:
    if system == "floor":
        return run_floor(n, tasks)
    import redis

    r = redis.Redis.from_url(url)
    r.flushdb()
    env = {**os.environ, "CPU_BENCH_URL": url, "CPU_BENCH_SYSTEM": system,
           "PYTHONPATH": str(ROOT)}
    log = LOGS / f"{system}.log"  # the workers' output (Dramatiq warns on each result)
    log.parent.mkdir(exist_ok=True)
    with log.open("ab") as out:
        worker = subprocess.Popen(worker_command(system), env=env, cwd=ROOT, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        send = producer(system, url)
        for _ in range(4):  # warm-up: the worker and its processes are up after these
            send(1000)
        wait_count(r, 4, 120)
        r.set(DONE, 0)
        began = time.perf_counter()
        for _ in range(tasks):
            send(n)
        ended = wait_count(r, tasks, 30 + tasks * n / 1e6)
        return tasks / (ended - began)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
        r.close()


def write_doc(result: dict[str, Any]) -> None:
    ideal = WORKERS / (result["task_ms"] / 1000)
    rows = []
    floor = result["runs"].get("floor")
    for system in result["systems"]:
        runs = result["runs"][system]
        median = statistics.median(runs)
        of_floor = (f"{statistics.median(r / f for r, f in zip(runs, floor, strict=True)):.0%}"
                    if floor else "")
        rows.append(f"| {LABELS[system]} | **{median:.1f}** | "
                    f"{' / '.join(f'{v:.1f}' for v in runs)} | {median / ideal:.0%} | "
                    f"{of_floor} |")
    intro = (
        "`bench/cpu_bound.py` (not part of `bench/run.py`; run it on its own): "
        f"{result['tasks']} tasks, each a pure-Python loop summing integers calibrated to "
        f"about {result['target_ms']:g} ms of CPU time (measured {result['task_ms']:.1f} ms in the "
        "driver) "
        "plus one Redis INCR; the clock runs from the first enqueue to the last task's INCR, "
        "each worker warmed up first. Two worker processes (or threads) each, one private "
        "Redis, "
        f"{result['repeats']} interleaved repeats, medians. The ideal on these 2 cores is "
        f"2 / {result['task_ms']:.1f} ms = **{ideal:.0f} tasks/s**. "
        f"{result['when']}, {result['machine']}:")
    after = (
        "The thread executor is there for contrast: one interpreter, so one loop at a time "
        "whatever the thread count. The process executor runs the same `def` task in child "
        "processes ([executors.md](executors.md)). The floor row is what two bare processes "
        "got in the same round: when other jobs hold the cores, every system falls with it, "
        "and the last column compares each system with the machine as it was then.")
    if floor and statistics.median(floor) < 0.8 * ideal:
        after += (f" In this sitting the floor itself reached only "
                  f"{statistics.median(floor) / ideal:.0%} of the ideal: the machine did not "
                  "give two free cores, and single runs moved by more than the gaps between "
                  "the process-based systems, so these figures do not rank them; rerun on a "
                  "quiet machine for that.")
    section = "\n".join([
        HEADING, "", textwrap.fill(intro, 90, break_on_hyphens=False), "",
        "| system | tasks/s (median) | runs | of the ideal | of the floor (same round, "
        "median) |",
        "|--------|-----------------:|------|-------------:|-------------:|",
        *rows, "", textwrap.fill(after, 90, break_on_hyphens=False), "",
    ])
    text = DOC.read_text()
    if MARKER not in text:
        text = text.rstrip("\n") + "\n\n" + MARKER + "\n"
    if HEADING in text:
        before, _, rest = text.partition(HEADING)
        after = rest.find("\n## ")
        text = before + section + (rest[after + 1:] if after >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text)


LABELS = {
    "blitzq-process": '`blitzq` `executor="process"`, `processes=2`',
    "blitzq-thread": "`blitzq` thread executor, `threads=2` (contrast)",
    "celery": "Celery prefork `--concurrency 2`",
    "dramatiq": "Dramatiq `--processes 2 --threads 1`",
    "floor": "floor: the same loops on a `multiprocessing.Pool(2)`, no queue",
}


def _in_bench_venv() -> None:
    try:
        import celery  # noqa: F401
        import dramatiq  # noqa: F401
    except ImportError:
        python = ROOT / ".bench-venv" / "bin" / "python"
        if not python.exists():
            raise SystemExit("no .bench-venv: run `python3 bench/run.py --quick --only blitzq "
                             "--workloads enqueue_single` once to create it") from None
        os.execv(str(python), [str(python), *sys.argv])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--ms", type=float, default=20.0, help="CPU time of one task")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--doc", action="store_true", help="write docs/benchmarks.md")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    _in_bench_venv()
    from bench.run import redis_url_or_private

    systems = args.systems.split(",")
    n, task_ms = calibrate(args.ms)
    print(f"task: burn({n}) = {task_ms:.1f} ms here; ideal {WORKERS / task_ms * 1000:.0f}/s",
          flush=True)
    url, server = redis_url_or_private()
    runs: dict[str, list[float]] = {s: [] for s in systems}
    loads: list[float] = []
    try:
        for repeat in range(args.repeats):
            loads.append(os.getloadavg()[0])
            for system in systems:
                rate = run_one(system, url, n, args.tasks)
                runs[system].append(rate)
                print(f"repeat {repeat + 1} {system:15} {rate:6.1f} tasks/s", flush=True)
    finally:
        if server is not None:
            server.stop()
    for system in systems:
        print(f"{system:15} median {statistics.median(runs[system]):6.1f} tasks/s  "
              f"(ideal {WORKERS / task_ms * 1000:.0f})")
    loads.append(os.getloadavg()[0])
    result = {"tasks": args.tasks, "target_ms": args.ms, "task_ms": task_ms, "n": n,
              "repeats": args.repeats, "systems": systems, "runs": runs, "loads": loads,
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{os.cpu_count()} cores, shared with other jobs (1-minute load "
                         f"average {min(loads):.1f} to {max(loads):.1f} during the runs)"}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.doc:
        write_doc(result)


if __name__ == "__main__":
    main()
