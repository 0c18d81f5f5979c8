"""blitzq through Django: ``manage.py runworker`` of bench/djproject, ``@blitzq_task`` tasks,
enqueued with ``task.enqueue`` / ``enqueue_many`` from a Django process.

blitzq_django.py (``def`` tasks) and blitzq_django_async.py (``async def``) call ``make``.
The worker is ONE ``runworker`` process with the project's default BLITZQ settings (only
REDIS_URL, NAMESPACE, QUEUES and STORE_RESULTS set); ``BENCH_PROCESSES`` adds
``--processes N`` (the scaling workloads: N children that the supervisor starts with
subprocess.Popen, in the worker's process group, so the harness counts their memory).
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

VERSION = version("blitzq-django") + f" (Django {version('django')})"
ASYNC = False
BULK_NOTE = "task.enqueue_many (1000 per round trip), @blitzq_task from Django"
CONC = {"dispatch": 100, "io": 100, "latency": 100}  # BLITZQ["CONCURRENCY"]'s default
MANAGE = Path(__file__).resolve().parent.parent / "djproject" / "manage.py"
SETTINGS_MODULE = "bench.djproject.settings"


def _django():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    import django

    django.setup()
    from bench.djproject.benchapp import tasks

    return tasks


def worker_argv() -> list[str]:
    argv = [sys.executable, str(MANAGE), "runworker", "--log-level", "WARNING"]
    procs = os.environ.get("BENCH_PROCESSES")
    if procs and procs != "1":
        argv += ["--processes", procs]
    return argv


def make(kind: str) -> dict:
    state: dict = {}

    def tasks() -> dict:
        if "tasks" not in state:
            state["tasks"] = _django().TASKS[kind]
        return state["tasks"]

    def setup() -> None:
        tasks()
        from blitzq_django import conf

        conf.get_client().broker.ping()

    def enqueue_one(k: str, t: float) -> None:
        tasks()[k].enqueue(t)

    def enqueue_bulk(k: str, ts: list[float]) -> None:
        tasks()[k].enqueue_many([(t,) for t in ts])

    def run_worker() -> None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
        argv = worker_argv()
        os.execv(argv[0], argv)

    def results_modes() -> dict[bool, str | None]:
        return {True: 'BLITZQ["STORE_RESULTS"] True (the default)',
                False: 'BLITZQ["STORE_RESULTS"] False'}

    def settings(workload: str) -> str:
        what = ("def tasks on runworker's thread pool (THREADS None: one thread per "
                "CONCURRENCY slot, 100)" if kind == "def" else "async def tasks")
        return (f"`manage.py runworker` (one process; BLITZQ defaults: CONCURRENCY 100, EVENTS "
                f"on, HISTORY 'all' to SQLite by a writer process, outbox relay on), "
                f"@blitzq_task {what}")

    return {"KIND": kind, "SCALES": True, "WEIGHT": kind == "def", "setup": setup,
            "enqueue_one": enqueue_one, "enqueue_bulk": enqueue_bulk, "run_worker": run_worker,
            "results_modes": results_modes, "settings": settings}


def side_row(kind: str, overrides: dict, changed: tuple[str, str]) -> dict:
    """``make(kind)`` for a side row: the worker runs with ``overrides`` merged into BLITZQ,
    and ``changed`` is (old, new) text of its settings description."""
    names = make(kind)
    run, describe = names["run_worker"], names["settings"]

    def run_worker() -> None:
        os.environ["BENCH_DJ_BLITZQ"] = json.dumps(overrides)
        run()

    def settings(workload: str) -> str:
        return describe(workload).replace(*changed)

    return {**names, "SCALES": True, "WEIGHT": False, "run_worker": run_worker,
            "settings": settings}
