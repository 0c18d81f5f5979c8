#!/usr/bin/env python3
"""Benchmark blitzq against peer Redis task queues and the raw redis-py floor.

    python3 bench/run.py                 # full run (13 systems: about 45 min on 2 cores)
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def interleaved(arms: tuple[str, ...], repeats: int,
                run_one: Callable[[str, str, str], dict[str, Any]], *,
                stages: tuple[str, ...] = ("",), arm_key: str = "arm",
                stage_key: str = "stage") -> dict[str, dict[str, list[float]]]:
    """``run_one(url, arm, stage)`` for every stage and arm in each of ``repeats`` rounds,
    the arms' order swapped every round, on REDIS_URL or a private redis-server. Prints
    each result as a JSON line; returns each arm's numeric results, by key, as lists."""
    url, server = redis_url_or_private()
    runs: dict[str, dict[str, list[float]]] = {a: {} for a in arms}
    try:
        for repeat in range(repeats):
            for stage in stages:
                for arm in arms if repeat % 2 == 0 else arms[::-1]:
                    result = run_one(url, arm, stage)
                    print(json.dumps({"repeat": repeat, **({stage_key: stage} if stage else {}),
                                      arm_key: arm, **result}), flush=True)
                    for key, value in result.items():
                        if isinstance(value, float):
                            runs[arm].setdefault(key, []).append(value)
    finally:
        if server is not None:
            server.stop()
    return runs


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
        # The bench Django project's SQLite: migrated once (dj_template), copied before each run.
        self.dj_db = self.logdir / "dj.sqlite3"
        self.dj_template = self.logdir / "dj-template.sqlite3"
        self.processes = 1  # BENCH_PROCESSES of the next worker (the scale workloads)

    def env(self, system: str, workload: str, results: bool, conc: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update(BENCH_URL=self.url, BENCH_ACCT=self.acct_url, BENCH_DJ_DB=str(self.dj_db),
                   BENCH_RESULTS="1" if results else "0", BENCH_CONC=str(conc),
                   BENCH_WORKLOAD=workload, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1",
                   PYTHONHASHSEED="0", BENCH_PROCESSES=str(self.processes))
        env.pop("REDIS_URL", None)
        return env

    def flush(self) -> None:
        self.r.flushdb()
        self.acct.flushdb()
        if self.dj_template.exists():
            for suffix in ("-wal", "-shm"):
                Path(f"{self.dj_db}{suffix}").unlink(missing_ok=True)
            shutil.copyfile(self.dj_template, self.dj_db)

    def migrate(self) -> None:
        """Create the bench Django project's tables once (the template every run copies)."""
        env = self.env("blitzq-django", "dispatch", True, 100)
        env["BENCH_DJ_DB"] = str(self.dj_template)
        subprocess.run([sys.executable, str(BENCH / "djproject" / "manage.py"), "migrate",
                        "-v", "0"], cwd=ROOT, env=env, check=True, timeout=300)

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

    def __init__(self, h: Harness, system: str, env: dict[str, str], tag: str,
                 argv: list[str] | None = None) -> None:
        import psutil

        self.log = h.logdir / f"{system}-{tag}.log"
        self._fh = open(self.log, "w")  # noqa: SIM115 (closed in stop())
        self.started = time.time()
        self.proc = subprocess.Popen(argv or [sys.executable, "-m", "bench.driver", system,
                                              "worker"],
                                     cwd=ROOT, env=env, stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.peak_rss = 0
        self.peak_threads = 0  # OS threads of the worker and its children (pools, helpers)
        self._ps = psutil.Process(self.proc.pid)
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        import psutil

        while not self._done.wait(0.05):
            try:
                procs = [self._ps, *self._ps.children(recursive=True)]
                total = threads = 0
                for p in procs:
                    try:
                        total += p.memory_info().rss
                        threads += p.num_threads()
                    except psutil.Error:
                        pass
                self.peak_rss = max(self.peak_rss, total)
                self.peak_threads = max(self.peak_threads, threads)
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
    cw = "io" if workload == "io" else "dispatch"  # scaleN: the dispatch settings
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
            "peak_rss_mb": worker.peak_rss / 2**20, "peak_threads": worker.peak_threads}


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


def run_scale(h: Harness, system: str, processes: int) -> dict:
    """runworker --processes N draining --scale-n no-op tasks (results on, the default)."""
    h.processes = processes
    try:
        return run_drain(h, system, f"scale{processes}", True, "noop", h.args.scale_n)
    finally:
        h.processes = 1


SETUP_ONLY = ("import time, sys, django; django.setup(); "
              "print(time.time(), len(sys.modules), flush=True)")


def run_weight(h: Harness, system: str) -> dict:
    """Startup and size of one runworker: process start -> first task started, against
    `import django; django.setup()` alone (same settings, timed the same way, just before
    or just after: the order alternates between runs); modules imported (sys.modules in a
    task, after the first one ran); peak RSS so far."""
    from bench.systems._django import worker_argv

    h.weight_runs = getattr(h, "weight_runs", 0) + 1
    env = h.env(system, "dispatch", True, _conc(h, system, "dispatch"))
    env["DJANGO_SETTINGS_MODULE"] = "bench.djproject.settings"

    def setup_alone() -> tuple[float, int]:
        t0 = time.time()
        p = subprocess.run([sys.executable, "-c", SETUP_ONLY], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise RunFailed(f"django.setup() alone exited {p.returncode}: {p.stderr[-400:]}")
        t_setup, modules = p.stdout.split()
        return float(t_setup) - t0, int(modules)

    setup_first = h.weight_runs % 2 == 1
    if setup_first:
        setup_s, setup_modules = setup_alone()
    h.flush()
    # One "lat" task with t=0 records its absolute start time; then one counting modules.
    h.drive(system, "fill", "lat", 1, env=env, timeout=60)
    h.drive(system, "fill", "modules", 1, env=env, timeout=60)
    h.acct.delete("bench:done")
    worker = WorkerProc(h, system, env, "weight", argv=worker_argv())
    try:
        h.wait_done(2, 60, worker)
        first = min(float(x) for x in h.acct.lrange("bench:lat", 0, -1))
        modules = int(h.acct.get("bench:note:modules") or 0)
        time.sleep(0.3)  # let the sampler see the process settled after its first tasks
    finally:
        worker.stop()
    if not setup_first:
        setup_s, setup_modules = setup_alone()
    start_s = first - worker.started
    return {"startup_s": start_s, "django_setup_s": setup_s, "above_setup_s": start_s - setup_s,
            "modules": modules, "setup_modules": setup_modules, "setup_first": setup_first,
            "peak_rss_mb": worker.peak_rss / 2**20}


WORKLOADS = ("raw", "enqueue_single", "enqueue_bulk", "dispatch_off", "dispatch_on", "io",
             "latency", "weight", "scale1", "scale2", "scale4")
#: Names for a subset: the workload, on systems whose worker runs `def` task bodies only.
DEF_ONLY = {"dispatch_def_off": "dispatch_off", "dispatch_def_on": "dispatch_on",
            "io_def": "io"}
#: Workloads only some systems have (an adapter's SCALES / WEIGHT): see wanted().
SCALE = {"scale1": 1, "scale2": 2, "scale4": 4}


def wanted(h: Harness, system: str, workload: str) -> bool:
    """Whether this sitting runs ``workload`` on ``system`` (see parse_args: def_only)."""
    info = h.info[system]
    if workload in SCALE:
        return bool(info.get("scales"))
    if workload == "weight":
        return bool(info.get("weight"))
    if workload in h.args.def_only:
        return info.get("kind") == "def"
    return True


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
    if workload in SCALE:
        return run_scale(h, system, SCALE[workload])
    if workload == "weight":
        return run_weight(h, system)
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
    """The commit benchmarked and how many paths `git status --short` lists (all, and under
    blitzq_django/): other engineers edit this checkout while it runs (read-only)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--short"], cwd=ROOT, text=True,
                                capture_output=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    engine = sum(1 for line in status if line[3:].strip('"').startswith("blitzq_django/"))
    return f"{head}; `git status --short`: {len(status)} lines, {engine} in blitzq_django/"


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


def _peer(system: str) -> bool:
    return not system.startswith("blitzq")


def _get(sm: dict, s: str, w: str, field: str = "ops") -> float | None:
    return sm.get(s, {}).get(w, {}).get(field)


def _def_peers(data: dict) -> list[str]:
    """Peers whose worker runs `def` task bodies on their sync pool (threads/processes/solo)."""
    return [s for s in data["systems"] if _peer(s) and data["info"].get(s, {}).get("kind") == "def"]


def _best(sm: dict, systems: list[str], w: str, field: str = "ops",
          low: bool = False) -> tuple[str | None, float | None]:
    vals = {s: v for s in systems if (v := _get(sm, s, w, field)) is not None}
    if not vals:
        return None, None
    s = (min if low else max)(vals, key=vals.get)
    return s, vals[s]


def _verdict(v: float | None, goal: float, higher: bool = True) -> str:
    if v is None:
        return "not measured"
    return "met" if (v >= goal if higher else v <= goal) else "**not met**"


def _django_summary(data: dict) -> list[str]:
    """The issue-10 goals of the Django path, each figure against its goal."""
    sm, systems = data["summary"], data["systems"]
    dj = "blitzq-django"
    if dj not in systems:
        return []
    rows: list[tuple[str, str, str, str]] = []
    peers = _def_peers(data)
    for w, label in (("dispatch_on", "results on"), ("dispatch_off", "results off")):
        v = _get(sm, dj, w)
        best, bv = _best(sm, peers, w)
        ratio = v / bv if v and bv else None
        rows.append((f"dispatch of `def` no-op tasks, {label}: blitzq-django "
                     f"{_fmt(v)}/s vs fastest peer thread/process pool (def tasks) "
                     f"{best or '—'} {_fmt(bv)}/s", f"{ratio:.1f}×" if ratio else "—", "≥ 5×",
                     _verdict(ratio, 5)))
    for w, label in (("dispatch_on", "results on"), ("dispatch_off", "results off")):
        v, e = _get(sm, dj, w), _get(sm, "blitzq", w)
        share = v / e if v and e else None
        rows.append((f"blitzq-django `def` ({_fmt(v)}/s) / engine `async def` (blitzq, "
                     f"{_fmt(e)}/s), {label}", f"{share:.0%}" if share else "—", "≥ 60%",
                     _verdict(share, 0.6)))
    v = _get(sm, dj, "io")
    share = v / (100 / 0.010) if v else None
    rows.append((f"`def` tasks `time.sleep(0.01)` at concurrency 100 through runworker: "
                 f"{_fmt(v)}/s of the ideal 10,000/s", f"{share:.0%}" if share else "—", "≥ 80%",
                 _verdict(share, 0.8)))
    rss = _get(sm, dj, "dispatch_on", "peak_rss_mb")
    light, lv = _best(sm, [s for s in systems if _peer(s)], "dispatch_on", "peak_rss_mb", low=True)
    ratio = rss / lv if rss and lv else None
    rows.append((f"peak RSS of runworker, dispatch results on: {_fmt(rss)} MB vs the lightest "
                 f"peer worker {light or '—'} {_fmt(lv)} MB", f"{ratio:.2f}×" if ratio else "—",
                 "≤ 1.5×", _verdict(ratio, 1.5, higher=False)))
    above = _get(sm, dj, "weight", "above_setup_s")
    start = _fmt(_get(sm, dj, "weight", "startup_s"), 2)
    setup = _fmt(_get(sm, dj, "weight", "django_setup_s"), 2)
    rows.append((f"runworker start → first task started ({start} s) minus `django.setup()` "
                 f"alone ({setup} s)", f"{above:.2f} s" if above is not None else "—", "< 0.5 s",
                 _verdict(above, 0.5, higher=False)))
    for s, label in ((dj, "`def`"), ("blitzq-django-async", "`async def`")):
        one, two = _get(sm, s, "scale1"), _get(sm, s, "scale2")
        ratio = two / one if one and two else None
        rows.append((f"runworker --processes 2 / --processes 1, {label} no-op "
                     f"({_fmt(two)} / {_fmt(one)}/s)", f"{ratio:.2f}×" if ratio else "—",
                     "≥ 1.6×", _verdict(ratio, 1.6)))
    rows += _engine_goals(data)
    lines = ["", "### The Django path against its goals (issue 10; medians of this sitting)", "",
             "| measure | figure | goal | |", "| --- | ---: | ---: | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return lines


def _engine_goals(data: dict) -> list[tuple[str, str, str, str]]:
    """Issue 10's goals 2, 7 and 8: async dispatch and bulk enqueue against the raw floor,
    enqueue-single and latency against the peers."""
    sm, systems = data["summary"], data["systems"]
    raw = sm.get("raw", {}).get("raw", {})
    peers = [s for s in systems if _peer(s)]
    rows: list[tuple[str, str, str, str]] = []
    for w, floor, label, goal in (("dispatch_on", "consume_results", "(d)", 0.4),
                                  ("enqueue_bulk", "pipelined_xadd", "(b)", 0.5)):
        v, f = _get(sm, "blitzq", w), raw.get(floor)
        share = v / f if v and f else None
        rows.append((f"blitzq {w} ({_fmt(v)}/s) / raw floor {label} ({_fmt(f)}/s)",
                     f"{share:.0%}" if share else "—", f"≥ {goal:.0%}", _verdict(share, goal)))
    v = _get(sm, "blitzq", "enqueue_single")
    best, bv = _best(sm, peers, "enqueue_single")
    ratio = v / bv if v and bv else None
    rows.append((f"blitzq enqueue-single ({_fmt(v)}/s) / fastest peer {best or '—'} "
                 f"({_fmt(bv)}/s)", f"{ratio:.2f}×" if ratio else "—", "≥ 1×", _verdict(ratio, 1)))
    for mode, s in (("reliable", "blitzq"), ("fast", "blitzq-fast")):
        for field in ("p50_ms", "p99_ms"):
            v = _get(sm, s, "latency", field)
            best, bv = _best(sm, peers, "latency", field, low=True)
            rows.append((f"latency {field[:3]} at 50/s, {mode} mode ({s}): {_fmt(v, 2)} ms vs "
                         f"lowest peer {best or '—'} {_fmt(bv, 2)} ms",
                         f"{v - bv:+.2f} ms" if v is not None and bv is not None else "—",
                         "< every peer", "not measured" if v is None or bv is None
                         else "met" if v < bv else "**not met**"))
    return rows


def _django_section(data: dict) -> list[str]:
    """`def` tasks as first-class rows: dispatch of def tasks, weight, scaling."""
    sm, systems, a = data["summary"], data["systems"], data["settings"]
    djs = [s for s in systems if s.startswith("blitzq")]
    if not any(s.startswith("blitzq-django") for s in systems):
        return []
    dj = "blitzq-django"
    base_on, base_off = _get(sm, dj, "dispatch_on"), _get(sm, dj, "dispatch_off")
    lines = ["## Django path", "",
             "`blitzq-django` is `manage.py runworker` of the bench Django project "
             "(bench/djproject: contenttypes, auth, blitzq_django and an app with a tasks "
             "module; SQLite; BLITZQ defaults but the Redis URL, namespace and queue), one "
             "process, `@blitzq_task` no-op `def` tasks (its default pool: 100 threads); "
             "`blitzq-django-async` the same with `async def` tasks; `blitzq-def` the bare "
             "engine Worker with `def` tasks (default pool, 12 threads on 2 CPUs); `blitzq` "
             "the bare engine with `async def` tasks. Producers enqueue with "
             "`task.enqueue` / `enqueue_many`, from a Django process for the Django rows. "
             "Runworker's defaults include EVENTS on, HISTORY 'all' (a history writer, a child "
             "process of runworker, writing every task to SQLite) and the outbox relay thread; "
             "the child's memory is counted with runworker's.", "",
             "### Dispatch of `def` tasks (no-op tasks/s, one worker process; ratio vs "
             "blitzq-django)", "",
             "| system | tasks | pool | results off | results on | "
             f"io-bound ({a['io_n']:,} × 10 ms, conc. 100; share of 10,000/s) | "
             "peak RSS MB (on) |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for s in djs + _def_peers(data):
        i = data["info"].get(s, {})
        io = _get(sm, s, "io")
        pool = i.get("settings", {}).get("dispatch", "")
        pool = (pool.split(",")[0].split(" (")[0] if _peer(s)
                else "runworker" if "django" in s else "Worker")
        lines.append(f"| {s} | {i.get('kind', '?')} | {pool} | "
                     f"{_cell(sm, s, 'dispatch_off', base=base_off)} | "
                     f"{_cell(sm, s, 'dispatch_on', base=base_on)} | "
                     f"{_fmt(io)}{f' ({io / 10_000:.0%})' if io else ''} | "
                     f"{_fmt(_get(sm, s, 'dispatch_on', 'peak_rss_mb'))} |")
    if _get(sm, dj, "weight", "startup_s") is not None:
        g = lambda f, d=2: _fmt(_get(sm, dj, "weight", f), d)  # noqa: E731
        lines += ["", "### Runworker weight", "",
                  "Timed from just before the process is spawned, in the same run: "
                  "`python -c 'import django; django.setup()'` with the bench settings (to its "
                  "print), then `manage.py runworker` to the start of its first task (one task "
                  "was queued before it started). Modules: `len(sys.modules)` inside a task.", "",
                  "| measure | median |", "| --- | ---: |",
                  f"| runworker start → first task started (s) | {g('startup_s')} |",
                  f"| `django.setup()` alone (s) | {g('django_setup_s')} |",
                  f"| difference (s) | {g('above_setup_s')} |",
                  f"| modules imported by runworker (in a task) | {g('modules', 0)} |",
                  f"| modules after `django.setup()` alone | {g('setup_modules', 0)} |",
                  f"| peak RSS of runworker just after start (MB) | {g('peak_rss_mb', 0)} |"]
        light, lv = _best(sm, [s for s in systems if _peer(s)], "dispatch_on", "peak_rss_mb",
                          low=True)
        if light:
            lines.append(f"| lightest peer worker in this sitting, dispatch results on (MB) | "
                         f"{light} {_fmt(lv)} |")
        if SIDE_WEIGHT.exists():
            d = json.loads(SIDE_WEIGHT.read_text())
            w = d["summary"].get(dj, {}).get("weight", {})
            if w.get("startup_s") is not None:
                lines += ["", f"Side run with more samples (`{d['argv']}`, {d['finished']}; "
                          f"{w.get('n_ok')} runs, `django.setup()` timed before the worker in "
                          "odd runs and after it in even ones): runworker start → first task "
                          f"{w['startup_s']:.2f} s, `django.setup()` alone "
                          f"{w['django_setup_s']:.2f} s, difference (median of the per-run "
                          f"differences) {w['above_setup_s']:.2f} s; "
                          f"{w['modules']:.0f} vs {w['setup_modules']:.0f} modules."]
    scalers = [s for s in systems if data["info"].get(s, {}).get("scales")]
    if any(_get(sm, s, "scale1") for s in scalers):
        lines += ["", f"### Scaling: `runworker --processes N` ({a.get('scale_n', 0):,} no-op "
                  "tasks pre-filled, results on; drain rate)", "",
                  "| system | tasks | N=1 | N=2 | N=4 | peak RSS MB (N=1 / 2 / 4) |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        for s in scalers:
            one = _get(sm, s, "scale1")
            cells = [_cell(sm, s, f"scale{n}", base=one) for n in (1, 2, 4)]
            rss = " / ".join(_fmt(_get(sm, s, f"scale{n}", "peak_rss_mb")) for n in (1, 2, 4))
            lines.append(f"| {s} | {data['info'][s].get('kind')} | {' | '.join(cells)} | "
                         f"{rss} |")
        lines += ["", "The supervisor starts each child with `subprocess.Popen` of the same "
                  "command line (a fresh interpreter, not a fork); the children are in the "
                  "worker's process group, and their memory is counted with the parent's. With N "
                  "above 1 the supervisor is itself a runworker process with Django loaded, so "
                  "N=2 is three processes. The machine has 2 CPUs, so N=4 is oversubscribed."]
    return [*lines, *_side_history(), ""]


SIDE_HISTORY = BENCH / "results" / "side-history.json"
SIDE_WEIGHT = BENCH / "results" / "side-weight.json"


def _side_history() -> list[str]:
    """The side run of the history writer's placements (--results
    bench/results/side-history.json), when there is one: what it costs where it runs."""
    if not SIDE_HISTORY.exists():
        return []
    d = json.loads(SIDE_HISTORY.read_text())
    sm, a = d["summary"], d["settings"]
    lines = ["", f"### What the history writer costs (side run: `{d['argv']}`, "
             f"{d['finished']}, {a['repeats']} repeats, medians)", "",
             "runworker starts a history writer by default (HISTORY 'all': each task "
             "becomes a TaskRecord row, here in SQLite), in a child process "
             "(HISTORY_WRITER 'process'); `blitzq-django-thread` runs it on a thread of the "
             "worker's process instead (HISTORY_WRITER 'thread'), `blitzq-django-nohistory` "
             "runs none (HISTORY 'off'); nothing else changed.", "",
             "| system | dispatch, results on | io-bound | --processes 1 | --processes 2 "
             "(/ 1) | peak RSS MB (dispatch on) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    dj = "blitzq-django"
    base_on, base_io = _get(sm, dj, "dispatch_on"), _get(sm, dj, "io")
    for s in d["systems"]:
        one = _get(sm, s, "scale1")
        lines.append(f"| {s} | {_cell(sm, s, 'dispatch_on', base=base_on)} | "
                     f"{_cell(sm, s, 'io', base=base_io)} | {_fmt(one)} | "
                     f"{_cell(sm, s, 'scale2', base=one)} | "
                     f"{_fmt(_get(sm, s, 'dispatch_on', 'peak_rss_mb'))} |")
    return lines


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
          f"- blitzq source: git {data.get('git', 'unknown')} at the start"
          + (f"; {data['git_end']} at the end (the tree was being edited during the sitting: "
             "each run measured the code as it was when its worker started)"
             if data.get("git_end") and data["git_end"] != data.get("git") else ""), "",
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
    lines += ["", "## Summary (medians; fastest peer = fastest system other than blitzq's rows)",
              "",
              "| workload | blitzq | fastest peer | raw floor |", "| --- | ---: | ---: | ---: |"]
    floor_of = {"enqueue_single": "single_xadd", "enqueue_bulk": "pipelined_xadd",
                "dispatch_off": "consume_ack", "dispatch_on": "consume_results"}
    for w, label in (("enqueue_single", "enqueue-single (tasks/s)"),
                     ("enqueue_bulk", "enqueue-bulk (tasks/s)"),
                     ("dispatch_off", "dispatch, results off (tasks/s)"),
                     ("dispatch_on", "dispatch, results on (tasks/s)"),
                     ("io", "io-bound (tasks/s)"), ("latency", "latency p50 (ms)")):
        field = "p50_ms" if w == "latency" else "ops"
        vals = {s: sm.get(s, {}).get(w, {}).get(field) for s in systems if _peer(s)}
        vals = {s: v for s, v in vals.items() if v is not None}
        best = (min if w == "latency" else max)(vals, key=vals.get) if vals else None
        digits = 1 if w == "latency" else 0
        peer = f"{best} {_fmt(vals[best], digits)}" if best else "—"
        floor = _fmt(raw.get(floor_of[w])) if w in floor_of else ""
        lines.append(f"| {label} | {_fmt(base(w, field), digits)} | {peer} | {floor} |")
    lines += _django_summary(data)
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
          "python3 bench/run.py --only blitzq-django,dramatiq,huey --workloads dispatch_def_on",
          "python3 bench/run.py --only blitzq-django,blitzq-django-async --workloads "
          "weight,scale1,scale2,scale4",
          "REDIS_URL=redis://127.0.0.1:6380/0 python3 bench/run.py   # use that server "
          "(its DB and DB 15 are FLUSHED)", "```", "",
          "Needs `redis-server` on PATH (unless REDIS_URL is set) and PyPI access for the first "
          "run. The machine is noisy (2 shared cores): compare ratios within one sitting, not "
          "figures across sittings.", ""]
    lines += _django_section(data)
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
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma list of workloads; also " + ", ".join(
                       f"{k} ({v} on systems running def tasks only)" for k, v in DEF_ONLY.items()))
    p.add_argument("--n", type=int, default=None, help="tasks per enqueue/dispatch run")
    p.add_argument("--io-n", type=int, default=None)
    p.add_argument("--scale-n", type=int, default=None,
                   help="tasks pre-filled per scaleN run (default 20,000; quick 4,000)")
    p.add_argument("--lat-n", type=int, default=None)
    p.add_argument("--lat-rate", type=float, default=50.0)
    p.add_argument("--run-timeout", type=float, default=None, help="time box per run (s)")
    p.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="where to write the JSON (a side run elsewhere implies --no-doc)")
    p.add_argument("--doc-only", action="store_true",
                   help="only re-render docs/benchmarks.md from bench/results/latest.json")
    a = p.parse_args(argv)
    q = a.quick
    a.repeats = a.repeats or (1 if q else 3)
    a.n = a.n or (2000 if q else 10_000)
    a.io_n = a.io_n or (500 if q else 2000)
    a.scale_n = a.scale_n or (4000 if q else 20_000)
    a.lat_n = a.lat_n or (100 if q else 500)
    a.run_timeout = a.run_timeout or (45.0 if q else 90.0)
    a.systems = [s for s in a.only.split(",") if s]
    a.results = a.results.resolve()
    if a.results != RESULTS.resolve():
        a.no_doc = True
    asked = [w for w in a.workloads.split(",") if w]
    unknown = set(asked) - set(WORKLOADS) - set(DEF_ONLY)
    if unknown:
        p.error(f"unknown workload(s) {', '.join(sorted(unknown))}")
    full = {DEF_ONLY.get(w, w) for w in asked}
    a.workload_list = [w for w in WORKLOADS if w in full]
    # A workload asked for only by its def_ name runs on def systems only.
    a.def_only = {w for w in a.workload_list if w not in asked}
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
        if any(h.info[s].get("scales") or h.info[s].get("weight") for s in args.systems):
            h.migrate()
        git_start = _git()
        runs: list[dict] = []
        skip: set[tuple[str, str]] = set()
        plan = []
        for rep in range(args.repeats):
            order = args.systems[rep % len(args.systems):] + args.systems[:rep % len(args.systems)]
            for w in args.workload_list:
                if w == "raw":
                    plan.append((rep, "raw", w))
                    continue
                plan += [(rep, s, w) for s in order if wanted(h, s, w)]
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
            if (rep, s, w) == next((x for x in reversed(plan) if x[0] == rep), None):
                # Each repeat's end: everything so far, so a sitting cut short keeps its runs.
                _save(h, args, started, git_start, runs, partial=rep + 1 < args.repeats)
        bar.close()
        data = _save(h, args, started, git_start, runs, partial=False)
        if not args.no_doc:
            write_doc(data)
        print(f"wrote {args.results}"
              + ("" if args.no_doc else f" and {DOC.relative_to(ROOT)}")
              + f" in {(time.time() - started) / 60:.1f} min; worker logs in {h.logdir}")
    finally:
        if server is not None:
            server.stop()


def _save(h: Harness, args: argparse.Namespace, started: float, git_start: str,
          runs: list[dict], partial: bool) -> dict:
    """Write bench/results/latest.json (``partial``: after a repeat, more to come)."""
    import importlib.metadata as md

    data = {
        "argv": " ".join(sys.argv[1:]), "finished": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                  time.gmtime()),
        "wall_s": time.time() - started, "machine": _machine(),
        "redis_version": h.r.info("server")["redis_version"],
        "redis_py": md.version("redis") + (" + hiredis " + md.version("hiredis")),
        "settings": {k: getattr(args, k) for k in ("repeats", "n", "io_n", "lat_n",
                                                   "lat_rate", "run_timeout", "scale_n")},
        "systems": args.systems, "info": h.info, "runs": runs, "git": git_start,
        "git_end": _git(),
        "summary": summarize(runs, args.systems), "notes": NOTES,
        **({"partial": True} if partial else {}),
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(data, indent=1))
    return data


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
    "- blitzq's own rows: `blitzq` (engine, `async def`), `blitzq-def` (engine, `def` tasks on "
    "its default pool), `blitzq-fast` (engine, `RedisBroker(mode=\"fast\")`: lists, no lease, "
    "at-most-once, so not like for like with the reliable rows), `blitzq-django` and "
    "`blitzq-django-async` (`manage.py runworker`, BLITZQ defaults). 'Fastest peer' never "
    "picks one of them.",
    "- runworker's defaults run a history writer (HISTORY 'all': every task becomes a "
    "TaskRecord row, here on SQLite) in a child process, 10 nicer than the worker, and an "
    "outbox-relay thread in the worker process. See the Django path section for what they "
    "cost.",
    "- The raw floor (d) writes a short record value (the entry id) per message and XACKs "
    "each entry on its own; blitzq's record is a msgpack document of about 150 bytes, and its "
    "settle script also reads ownership once per batch (one XPENDING over the batch's id "
    "range) and then does one XACK and one XDEL with all the batch's ids (per message only "
    "the record SET + PUBLISH when results are on), so (d) is a floor, not a like-for-like "
    "peer.",
]

if __name__ == "__main__":
    main()
