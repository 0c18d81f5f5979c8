#!/usr/bin/env python3
"""Benchmark blitzq against peer Redis task queues and the raw redis-py floor.

    python3 bench/run.py                 # full run (about 15-20 min on 2 cores)
    python3 bench/run.py --quick         # smaller counts, one repeat (a few minutes)
    python3 bench/run.py --only blitzq,celery --repeats 5
    python3 bench/run.py --workloads dispatch_off,latency

Creates .bench-venv/ (this project editable + bench/requirements.txt), re-executes itself in
it, starts a private redis-server (REDIS_URL overrides: its DB is FLUSHED, accounting uses
DB 15 of the same server), runs every workload round-robin over the systems per repeat,
and writes bench/results/latest.json and docs/benchmarks.md (medians).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
VENV = ROOT / ".bench-venv"
REQS = BENCH / "requirements.txt"
REQS_NODEPS = BENCH / "requirements-nodeps.txt"
RESULTS = BENCH / "results" / "latest.json"
DOC = ROOT / "docs" / "benchmarks.md"
KEPT_MARKER = "<!-- Below: written by other bench/ scripts; bench/run.py keeps it as is. -->"
ACCT_DB = 15


# -- bootstrap ---------------------------------------------------------------


def _venv_python() -> Path:
    return VENV / "bin" / "python"


def _bootstrap() -> None:
    """Make .bench-venv (once per requirements change) and re-exec this script inside it."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    py = _venv_python()
    if not py.exists():
        print(f"creating {VENV}", flush=True)
        subprocess.check_call([sys.executable, "-m", "venv", str(VENV)])
    stamp = VENV / ".bench-installed"
    digest = hashlib.sha256(
        REQS.read_bytes() + REQS_NODEPS.read_bytes() + (ROOT / "setup.cfg").read_bytes()
    ).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        print("installing this project and the peers into .bench-venv", flush=True)
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.check_call([*pip, "-e", str(ROOT), "-r", str(REQS)])
        # arq pins redis<6; it runs on the redis-py the others need, so it goes in without deps.
        subprocess.check_call([*pip, "--no-deps", "-r", str(REQS_NODEPS)])
        stamp.write_text(digest)
    os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])


# -- redis -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.dir = tempfile.mkdtemp(prefix="blitzq-bench-redis-")

    def start(self) -> str:
        exe = shutil.which("redis-server")
        if exe is None:
            raise SystemExit("redis-server not on PATH (or set REDIS_URL)")
        port = _free_port()
        self.proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url).ping()
                return url
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_url_or_private() -> tuple[str, RedisServer | None]:
    """REDIS_URL when set, else a private redis-server of this run's own (the caller
    stops it when done; None when REDIS_URL was used)."""
    url = os.environ.get("REDIS_URL")
    if url:
        return url, None
    server = RedisServer()
    return server.start(), server


def _acct_url(url: str) -> str:
    base, _, _db = url.rpartition("/")
    return f"{base}/{ACCT_DB}" if _db.isdigit() else f"{url.rstrip('/')}/{ACCT_DB}"


# -- running things ------------------------------------------------------------


class RunFailed(Exception):
    pass


class Harness:
    def __init__(self, url: str, args: argparse.Namespace) -> None:
        import redis

        self.url = url
        self.acct_url = _acct_url(url)
        self.r = redis.Redis.from_url(url)
        self.acct = redis.Redis.from_url(self.acct_url)
        self.args = args
        self.logdir = Path(tempfile.mkdtemp(prefix="blitzq-bench-logs-"))

    def env(self, system: str, workload: str, results: bool, conc: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update(BENCH_URL=self.url, BENCH_ACCT=self.acct_url,
                   BENCH_RESULTS="1" if results else "0", BENCH_CONC=str(conc),
                   BENCH_WORKLOAD=workload, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1",
                   PYTHONHASHSEED="0")
        env.pop("REDIS_URL", None)
        return env

    def flush(self) -> None:
        self.r.flushdb()
        self.acct.flushdb()

    def drive(self, system: str, role: str, *rest: object, env: dict[str, str],
              timeout: float) -> dict:
        cmd = [sys.executable, "-m", "bench.driver", system, role, *map(str, rest)]
        try:
            p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            raise RunFailed(f"{role} timed out after {timeout:.0f} s") from exc
        if p.returncode != 0:
            raise RunFailed(f"{role} exited {p.returncode}: {p.stderr.strip()[-600:]}")
        for line in reversed(p.stdout.strip().splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        raise RunFailed(f"{role} printed no result: {p.stdout[-300:]} {p.stderr[-300:]}")

    def count(self) -> int:
        return int(self.acct.get("bench:done") or 0)

    def wait_done(self, target: int, timeout: float,
                  worker: WorkerProc) -> tuple[float, int, float]:
        """Poll the accounting counter: (first time seen > 0, count then, time reached target)."""
        deadline = time.monotonic() + timeout
        t_first, c_first = 0.0, 0
        while True:
            n = self.count()
            now = time.perf_counter()
            if n and not t_first:
                t_first, c_first = now, n
            if n >= target:
                return t_first, c_first, now
            if worker.proc.poll() is not None:
                raise RunFailed(f"worker exited {worker.proc.returncode} after {n}/{target}: "
                                f"{worker.tail()}")
            if time.monotonic() > deadline:
                raise RunFailed(f"timed out after {timeout:.0f} s at {n}/{target}")
            time.sleep(0.002)


_GONE = (ProcessLookupError, PermissionError, subprocess.TimeoutExpired)


class WorkerProc:
    """A worker as a real separate process (its own session), with its peak RSS sampled."""

    def __init__(self, h: Harness, system: str, env: dict[str, str], tag: str) -> None:
        import psutil

        self.log = h.logdir / f"{system}-{tag}.log"
        self._fh = open(self.log, "w")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.driver", system, "worker"],
                                     cwd=ROOT, env=env, stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.peak_rss = 0
        self._ps = psutil.Process(self.proc.pid)
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        import psutil

        while not self._done.wait(0.05):
            try:
                procs = [self._ps, *self._ps.children(recursive=True)]
                total = 0
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak_rss = max(self.peak_rss, total)
            except psutil.Error:
                return

    def tail(self) -> str:
        try:
            return self.log.read_text()[-600:]
        except OSError:
            return ""

    def stop(self) -> None:
        self._done.set()
        pgid = self.proc.pid  # the worker leads its own session: its group id is its pid
        if self.proc.poll() is None:
            with contextlib.suppress(*_GONE):
                os.killpg(pgid, signal.SIGTERM)
            try:
                self.proc.wait(3)  # measuring is over: a slow graceful exit is not waited out
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(*_GONE):
            os.killpg(pgid, signal.SIGKILL)  # stragglers (pool children) of this group only
        with contextlib.suppress(*_GONE):
            self.proc.wait(5)
        self._fh.close()


# -- workloads ----------------------------------------------------------------


def _conc(h: Harness, system: str, workload: str) -> int:
    return h.info[system]["conc"][workload]


def run_enqueue(h: Harness, system: str, bulk: bool) -> dict:
    h.flush()
    env = h.env(system, "dispatch", False, 1)
    role = "enqueue-bulk" if bulk else "enqueue-single"
    return h.drive(system, role, h.args.n, env=env, timeout=h.args.run_timeout)


def run_drain(h: Harness, system: str, workload: str, results: bool, kind: str, n: int) -> dict:
    h.flush()
    cw = "io" if workload == "io" else "dispatch"
    env = h.env(system, cw, results, _conc(h, system, cw))
    h.drive(system, "fill", kind, n, env=env, timeout=h.args.run_timeout)
    worker = WorkerProc(h, system, env, workload)
    try:
        t_first, c_first, t_last = h.wait_done(n, h.args.run_timeout, worker)
    finally:
        worker.stop()
    done = n - c_first
    seconds = t_last - t_first
    if done < n * 0.5 or seconds <= 0:
        raise RunFailed(f"drained too fast to time ({c_first}/{n} before the first poll)")
    return {"ops": done / seconds, "seconds": seconds, "timed": done,
            "peak_rss_mb": worker.peak_rss / 2**20}


def run_latency(h: Harness, system: str) -> dict:
    h.flush()
    env = h.env(system, "latency", False, _conc(h, system, "latency"))
    worker = WorkerProc(h, system, env, "latency")
    n, rate = h.args.lat_n, h.args.lat_rate
    try:
        h.drive(system, "fill", "noop", 1, env=env, timeout=60)
        h.wait_done(1, 60, worker)  # the worker is up and has run a task
        h.acct.flushdb()
        h.drive(system, "latency", n, rate, env=env, timeout=n / rate + h.args.run_timeout)
        h.wait_done(n, h.args.run_timeout, worker)
        samples = sorted(float(x) * 1000 for x in h.acct.lrange("bench:lat", 0, -1))
    finally:
        worker.stop()
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_ms": q[49], "p95_ms": q[94], "p99_ms": q[98], "samples": len(samples),
            "peak_rss_mb": worker.peak_rss / 2**20}


def run_raw(h: Harness) -> dict:
    h.flush()
    env = h.env("raw", "dispatch", False, 1)
    cmd = [sys.executable, "-m", "bench.raw", str(h.args.n)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=h.args.run_timeout)
    if p.returncode != 0:
        raise RunFailed(p.stderr[-600:])
    return json.loads(p.stdout.strip().splitlines()[-1])


WORKLOADS = ("raw", "enqueue_single", "enqueue_bulk", "dispatch_off", "dispatch_on", "io",
             "latency")


def run_one(h: Harness, system: str, workload: str) -> dict:
    if workload == "enqueue_single":
        return run_enqueue(h, system, bulk=False)
    if workload == "enqueue_bulk":
        return run_enqueue(h, system, bulk=True)
    if workload in ("dispatch_off", "dispatch_on"):
        results = workload == "dispatch_on"
        if h.info[system]["results"][str(results)] is None:
            return {"na": h.info[system]["results_na"]}
        return run_drain(h, system, workload, results, "noop", h.args.n)
    if workload == "io":
        return run_drain(h, system, "io", False, "sleep", h.args.io_n)
    if workload == "latency":
        return run_latency(h, system)
    raise ValueError(workload)


# -- reporting ----------------------------------------------------------------


def _machine() -> dict:
    import psutil

    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu,
            "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def _git() -> str:
    """The commit benchmarked, and whether the engine had uncommitted changes (read-only)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "blitzq_django"], cwd=ROOT,
                               text=True, capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes in blitzq_django/" if dirty else "")


def _median(runs: list[dict], system: str, workload: str, field: str) -> float | None:
    vals = [r["result"][field] for r in runs if r["system"] == system
            and r["workload"] == workload and r["ok"] and field in r["result"]]
    return statistics.median(vals) if vals else None


def summarize(runs: list[dict], systems: list[str]) -> dict:
    out: dict = {}
    for s in ["raw", *systems]:
        row: dict = {}
        for r in runs:
            if r["system"] != s:
                continue
            w = r["workload"]
            if not r["ok"]:
                row.setdefault(w, {})["error"] = r["error"]
                continue
            for field, v in r["result"].items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    row.setdefault(w, {})[field] = _median(runs, s, w, field)
                elif field == "na":
                    row.setdefault(w, {})["na"] = v
            row.setdefault(w, {})["n_ok"] = sum(1 for x in runs if x["system"] == s
                                                and x["workload"] == w and x["ok"])
        out[s] = row
    return out


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def _ratio(v: float | None, base: float | None) -> str:
    if v is None or not base:
        return ""
    return f" ({v / base:.2f}×)"


def _cell(summary: dict, s: str, w: str, field: str = "ops", base: float | None = None,
          digits: int = 0) -> str:
    d = summary.get(s, {}).get(w)
    if d is None:
        return "not run"
    if "na" in d:
        return "n/a¹" if w == "enqueue_bulk" else "n/a²"
    if field not in d:
        return "FAILED³"
    return _fmt(d[field], digits) + _ratio(d[field], base)


def write_doc(data: dict) -> None:
    m, sm, info, a = data["machine"], data["summary"], data["info"], data["settings"]
    systems = data["systems"]
    raw = sm.get("raw", {}).get("raw", {})
    bz = sm.get("blitzq", {})

    def base(w: str, field: str = "ops") -> float | None:
        return bz.get(w, {}).get(field)

    lines: list[str] = []
    lines += ["# Benchmarks", "",
          f"Generated by `python3 bench/run.py{' ' + data['argv'] if data['argv'] else ''}` on "
          f"{data['finished']} (wall time {data['wall_s'] / 60:.1f} min). Every figure below is "
          "the median over the repeats of one interleaved sitting (round-robin over the systems "
          "in each repeat, the order rotated between repeats). Raw per-run values are in "
          "`bench/results/latest.json`.", "",
          "## Machine and versions", "",
          f"- {m['nproc']} CPUs: {m['cpu']}; {m['ram_gib']} GiB RAM; Linux {m['kernel']}",
          f"- Python {m['python']}, Redis server {data['redis_version']} (private instance, "
          "no persistence, on loopback), redis-py " + data["redis_py"],
          "- " + ", ".join(f"{s} {info[s]['version']}" for s in systems if s in info),
          f"- blitzq source: git {data.get('git', 'unknown')}", "",
          "## Settings", "",
          f"- repeats: {a['repeats']}; enqueue and dispatch: {a['n']:,} tasks; io-bound: "
          f"{a['io_n']:,} tasks of `sleep(0.010)` at concurrency 100; latency: {a['lat_n']} "
          f"tasks enqueued at {a['lat_rate']:g}/s into an idle, warmed-up worker; per-run time "
          f"box {a['run_timeout']:.0f} s (a run past it is reported FAILED, not awaited).",
          "- Every worker is ONE separate process started by the harness (plus the pool "
          "children some systems fork; their memory is counted). Producers run in their own "
          "process too. Each task's body increments a process-local counter that a thread "
          "flushes to a separate accounting Redis DB every 3 ms; the harness polls it. "
          "Throughput is timed from the first completion seen to the last, so worker start-up "
          "is not counted.",
          "- Enqueue runs use a producer with results off where that is a producer setting. "
          "Latency is `start time - enqueue time` measured inside the task (same clock).", "",
          "| system | dispatch settings | io-bound settings | results on / off |",
          "| --- | --- | --- | --- |"]
    for s in systems:
        if s not in info:
            continue
        i = info[s]
        res = "; ".join(f"{'on' if k == 'True' else 'off'}: {v if v else 'not possible'}"
                        for k, v in i["results"].items())
        lines.append(f"| {s} | {i['settings']['dispatch']} | {i['settings']['io']} | {res} |")
    lines += ["", "The latency workload uses the dispatch settings, results off."]
    lines += ["", "## Summary (medians; fastest peer = fastest system other than blitzq)", "",
              "| workload | blitzq | fastest peer | raw floor |", "| --- | ---: | ---: | ---: |"]
    floor_of = {"enqueue_single": "single_xadd", "enqueue_bulk": "pipelined_xadd",
                "dispatch_off": "consume_ack", "dispatch_on": "consume_results"}
    for w, label in (("enqueue_single", "enqueue-single (tasks/s)"),
                     ("enqueue_bulk", "enqueue-bulk (tasks/s)"),
                     ("dispatch_off", "dispatch, results off (tasks/s)"),
                     ("dispatch_on", "dispatch, results on (tasks/s)"),
                     ("io", "io-bound (tasks/s)"), ("latency", "latency p50 (ms)")):
        field = "p50_ms" if w == "latency" else "ops"
        vals = {s: sm.get(s, {}).get(w, {}).get(field) for s in systems if s != "blitzq"}
        vals = {s: v for s, v in vals.items() if v is not None}
        best = (min if w == "latency" else max)(vals, key=vals.get) if vals else None
        digits = 1 if w == "latency" else 0
        peer = f"{best} {_fmt(vals[best], digits)}" if best else "—"
        floor = _fmt(raw.get(floor_of[w])) if w in floor_of else ""
        lines.append(f"| {label} | {_fmt(base(w, field), digits)} | {peer} | {floor} |")
    lines += ["", "## Results", "",
              "### Enqueue (tasks/s from one sync producer; ratio vs blitzq)", "",
          "| system | enqueue-single | enqueue-bulk |", "| --- | ---: | ---: |"]
    for s in systems:
        lines.append(f"| {s} | {_cell(sm, s, 'enqueue_single', base=base('enqueue_single'))} | "
                 f"{_cell(sm, s, 'enqueue_bulk', base=base('enqueue_bulk'))} |")
    lines += ["", "### Dispatch (no-op tasks/s drained by one worker process; ratio vs blitzq)", "",
          f"| system | results off | results on | io-bound ({a['io_n']:,} × 10 ms, conc. 100) | "
          "peak RSS MB (dispatch on / io) |", "| --- | ---: | ---: | ---: | ---: |"]
    for s in systems:
        rss_on = sm.get(s, {}).get("dispatch_on", {}).get("peak_rss_mb")
        rss_off = sm.get(s, {}).get("dispatch_off", {}).get("peak_rss_mb")
        rss_io = sm.get(s, {}).get("io", {}).get("peak_rss_mb")
        lines.append(f"| {s} | {_cell(sm, s, 'dispatch_off', base=base('dispatch_off'))} | "
                 f"{_cell(sm, s, 'dispatch_on', base=base('dispatch_on'))} | "
                 f"{_cell(sm, s, 'io', base=base('io'))} | "
                 f"{_fmt(rss_on if rss_on is not None else rss_off)} / {_fmt(rss_io)} |")
    lines += ["", f"### Latency ({a['lat_n']} tasks at {a['lat_rate']:g}/s; ms from enqueue to "
          "start)", "", "| system | p50 | p95 | p99 |", "| --- | ---: | ---: | ---: |"]
    for s in systems:
        lines.append(f"| {s} | {_cell(sm, s, 'latency', 'p50_ms', digits=1)} | "
                 f"{_cell(sm, s, 'latency', 'p95_ms', digits=1)} | "
                 f"{_cell(sm, s, 'latency', 'p99_ms', digits=1)} |")
    lines += ["", "### The raw redis-py floor (one sync client, hiredis, no queue library)", "",
          "| operation | per second |", "| --- | ---: |",
          f"| (a) single XADD round trips | {_fmt(raw.get('single_xadd'))} |",
          f"| (b) pipelined XADD (1,000 per pipeline) | {_fmt(raw.get('pipelined_xadd'))} |",
          f"| (c) XREADGROUP COUNT 100 + no-op call + pipelined XACK | "
          f"{_fmt(raw.get('consume_ack'))} |",
          f"| (d) as (c) + one EVALSHA per batch: XACK + SET + PUBLISH per message | "
          f"{_fmt(raw.get('consume_results'))} |", "",
          "### Share of the floor (system / floor)", "",
          "| system | enqueue-single / (a) | enqueue-bulk / (b) | dispatch off / (c) | "
          "dispatch on / (d) |", "| --- | ---: | ---: | ---: | ---: |"]

    def share(s: str, w: str, f: str) -> str:
        v = sm.get(s, {}).get(w, {}).get("ops")
        b = raw.get(f)
        return f"{v / b:.2f}" if v and b else "—"

    for s in systems:
        lines.append(f"| {s} | {share(s, 'enqueue_single', 'single_xadd')} | "
                 f"{share(s, 'enqueue_bulk', 'pipelined_xadd')} | "
                 f"{share(s, 'dispatch_off', 'consume_ack')} | "
                 f"{share(s, 'dispatch_on', 'consume_results')} |")
    no_bulk = [f"{s}: {info[s]['bulk']}" for s in systems
               if s in info and sm.get(s, {}).get("enqueue_bulk", {}).get("na")]
    if no_bulk:
        lines += ["", "¹ no bulk enqueue API: " + "; ".join(no_bulk) + "."]
    if any("na" in sm.get(s, {}).get(w, {}) for s in systems for w in ("dispatch_off",
                                                                       "dispatch_on")):
        lines += ["", "² that results mode is not possible: see the settings table."]
    failed = [(s, w, d) for s in systems for w, d in sm.get(s, {}).items()
              if "error" in d and not any(k in d for k in ("ops", "p50_ms"))]
    if failed:
        lines += ["", "³ FAILED: every repeat failed or timed out; the error:", ""]
        for s, w, d in failed:
            lines.append(f"- {s} {w}: `{d['error'][:300].replace('`', chr(39))}`")
    partial = [(s, w, d["n_ok"]) for s in systems for w, d in sm.get(s, {}).items()
               if "error" in d and d.get("n_ok")]
    if partial:
        lines += ["", "Some repeats failed (median over the rest): " + ", ".join(
            f"{s} {w} ({n}/{a['repeats']} ok)" for s, w, n in partial)]
    lines += ["", "## Reproduce", "",
          "```sh", "python3 bench/run.py            # full: creates .bench-venv, installs the "
          "pinned peers (bench/requirements.txt)",
          "python3 bench/run.py --quick    # smaller counts, one repeat",
          "python3 bench/run.py --only blitzq,celery --workloads dispatch_off,dispatch_on "
          "--repeats 5",
          "REDIS_URL=redis://127.0.0.1:6380/0 python3 bench/run.py   # use that server "
          "(its DB and DB 15 are FLUSHED)", "```", "",
          "Needs `redis-server` on PATH (unless REDIS_URL is set) and PyPI access for the first "
          "run. The machine is noisy (2 shared cores): compare ratios within one sitting, not "
          "figures across sittings.", ""]
    if data.get("notes"):
        lines += ["## Notes", "", *data["notes"]]
        spread = []
        for s, w in (("raw", "raw"), ("blitzq", "dispatch_off"), ("blitzq", "enqueue_single")):
            for field in (("single_xadd",) if s == "raw" else ("ops",)):
                vals = [r["result"][field] for r in data["runs"] if r["system"] == s
                        and r["workload"] == w and r["ok"] and field in r["result"]]
                if len(vals) > 1:
                    spread.append(f"{s} {field if s == 'raw' else w} "
                                  f"{min(vals):,.0f}-{max(vals):,.0f}/s")
        if spread:
            lines.append("- Spread between repeats in this sitting: " + "; ".join(spread) + ".")
        lines.append("")
    DOC.parent.mkdir(parents=True, exist_ok=True)
    # Sections measured by the other bench/ scripts (history writer, lateness ...) follow
    # this marker and are kept as they are.
    kept = DOC.read_text().partition(KEPT_MARKER)[2] if DOC.exists() else ""
    DOC.write_text("\n".join(lines) + ("\n" + KEPT_MARKER + kept if kept else ""))


# -- main ----------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    from bench.systems import SYSTEMS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2,000 tasks, 1 repeat, short latency")
    p.add_argument("--repeats", type=int, default=None, help="rounds (default 3, quick 1)")
    p.add_argument("--only", default=",".join(SYSTEMS), help="comma list of systems")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of workloads")
    p.add_argument("--n", type=int, default=None, help="tasks per enqueue/dispatch run")
    p.add_argument("--io-n", type=int, default=None)
    p.add_argument("--lat-n", type=int, default=None)
    p.add_argument("--lat-rate", type=float, default=50.0)
    p.add_argument("--run-timeout", type=float, default=None, help="time box per run (s)")
    p.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    p.add_argument("--doc-only", action="store_true",
                   help="only re-render docs/benchmarks.md from bench/results/latest.json")
    a = p.parse_args(argv)
    q = a.quick
    a.repeats = a.repeats or (1 if q else 3)
    a.n = a.n or (2000 if q else 10_000)
    a.io_n = a.io_n or (500 if q else 2000)
    a.lat_n = a.lat_n or (100 if q else 500)
    a.run_timeout = a.run_timeout or (45.0 if q else 90.0)
    a.systems = [s for s in a.only.split(",") if s]
    a.workload_list = [w for w in WORKLOADS if w in a.workloads.split(",")]
    return a


def main() -> None:
    _bootstrap()
    sys.path.insert(0, str(ROOT))
    args = parse_args(sys.argv[1:])
    if args.doc_only:
        data = json.loads(RESULTS.read_text())
        data["notes"] = NOTES
        write_doc(data)
        print(f"wrote {DOC.relative_to(ROOT)} from {RESULTS.relative_to(ROOT)}")
        return
    import redis
    from tqdm import tqdm

    started = time.time()
    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        server = RedisServer()
        url = server.start()
    try:
        h = Harness(url, args)
        h.info = {}
        for s in list(args.systems):
            try:
                env = h.env(s, "dispatch", False, 1)
                info = h.drive(s, "info", env=env, timeout=60)
                info["results_na"] = "; ".join(v or "" for v in info["results"].values())
                h.info[s] = info
            except (RunFailed, subprocess.CalledProcessError) as exc:
                print(f"skipping {s}: {exc}", file=sys.stderr)
                args.systems.remove(s)
        runs: list[dict] = []
        skip: set[tuple[str, str]] = set()
        plan = []
        for rep in range(args.repeats):
            order = args.systems[rep % len(args.systems):] + args.systems[:rep % len(args.systems)]
            for w in args.workload_list:
                if w == "raw":
                    plan.append((rep, "raw", w))
                    continue
                plan += [(rep, s, w) for s in order]
        bar = tqdm(plan, unit="run", dynamic_ncols=True)
        for rep, s, w in bar:
            bar.set_description(f"r{rep + 1} {w} {s}")
            if (s, w) in skip:
                continue
            t0 = time.monotonic()
            try:
                res = run_raw(h) if s == "raw" else run_one(h, s, w)
                runs.append({"repeat": rep, "system": s, "workload": w, "ok": True,
                             "result": res, "run_s": time.monotonic() - t0})
            except (RunFailed, subprocess.TimeoutExpired, redis.RedisError) as exc:
                msg = str(exc)
                tqdm.write(f"FAILED r{rep + 1} {s} {w}: {msg[:300]}")
                runs.append({"repeat": rep, "system": s, "workload": w, "ok": False,
                             "error": msg, "run_s": time.monotonic() - t0})
                if "timed out" in msg:
                    skip.add((s, w))  # a hung peer is not awaited again
        bar.close()
        import importlib.metadata as md

        data = {
            "argv": " ".join(sys.argv[1:]), "finished": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                      time.gmtime()),
            "wall_s": time.time() - started, "machine": _machine(),
            "redis_version": h.r.info("server")["redis_version"],
            "redis_py": md.version("redis") + (" + hiredis " + md.version("hiredis")),
            "settings": {k: getattr(args, k) for k in ("repeats", "n", "io_n", "lat_n",
                                                       "lat_rate", "run_timeout")},
            "systems": args.systems, "info": h.info, "runs": runs, "git": _git(),
            "summary": summarize(runs, args.systems), "notes": NOTES,
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(data, indent=1))
        if not args.no_doc:
            write_doc(data)
        print(f"wrote {RESULTS.relative_to(ROOT)}"
              + ("" if args.no_doc else f" and {DOC.relative_to(ROOT)}")
              + f" in {(time.time() - started) / 60:.1f} min; worker logs in {h.logdir}")
    finally:
        if server is not None:
            server.stop()


NOTES: list[str] = [
    "- Fairness choices: each peer runs ONE worker process with its fastest single-process "
    "setting found in a short pilot on this machine (Celery: `solo` beat prefork -c 2 and "
    "threads for no-op tasks; RQ: SimpleWorker, since the default Worker forks per job). "
    "For sleep tasks every system gets concurrency 100 where it has in-process concurrency "
    "(threads for Celery, Dramatiq and Huey; coroutines for the async systems); RQ has none.",
    "- Delivery guarantees differ: Huey's Redis storage pops with BRPOP, so a task running "
    "when its worker dies is lost; blitzq, Celery with acks_late, Dramatiq and the stream "
    "consumer groups of taskiq and streaQ deliver it again. Faster is not always like for like.",
    "- arq 0.28 declares `redis<6`; it is installed without dependencies on the redis-py 8 "
    "the others use (bench/requirements-nodeps.txt) and ran without errors. Its worker polls "
    "a sorted set every `poll_delay` (0.5 s default, kept), which sets its idle latency.",
    "- Producers without a sync API (arq, taskiq, SAQ, streaQ) are driven from one asyncio "
    "loop awaiting one enqueue at a time: 'enqueue-single' is then one awaited call per task.",
    "- Noise: the machine is shared and has 2 cores; single runs of the same workload "
    "differed by 2× and more (per-run values in `bench/results/latest.json`; the spread of "
    "blitzq and the floor is below), hence the medians and the interleaving. "
    "blitzq's dispatch runs last only "
    "about 0.3 s; the accounting counter's 3 ms flush and the 2 ms polling bound that "
    "timing error to a few per cent.",
    "- The raw floor (d) writes a short record value (the entry id) per message and XACKs "
    "each entry on its own; blitzq's record is a msgpack document of about 150 bytes, and its "
    "settle script also reads ownership once per batch (one XPENDING over the batch's id "
    "range) and then does one XACK and one XDEL with all the batch's ids (per message only "
    "the record SET + PUBLISH when results are on), so (d) is a floor, not a like-for-like "
    "peer.",
]

if __name__ == "__main__":
    main()
