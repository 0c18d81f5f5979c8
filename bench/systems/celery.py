"""Celery with the Redis broker (and the Redis result backend when results are on)."""

from __future__ import annotations

from importlib.metadata import version

from celery import Celery

from .. import common as c

VERSION = version("celery")
ASYNC = False
KIND = "def"  # task bodies are `def` functions, run by its sync pool
BULK_NOTE = "none (group().apply_async() still publishes one message per task)"
CONC = {"dispatch": 1, "io": 100, "latency": 1}

app = Celery("bench", broker=c.URL, backend=c.URL if c.RESULTS else None)
app.conf.update(
    task_default_queue=c.QUEUE,
    task_acks_late=True,  # at-least-once, like blitzq
    worker_prefetch_multiplier=64,  # short tasks: the docs' advice is a high prefetch
    task_ignore_result=not c.RESULTS,
    task_store_eager_result=False,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    result_extended=False,
    task_serializer="json",
    result_serializer="json",
)
TASKS = {
    "noop": app.task(name="noop")(c.noop_sync),
    "sleep": app.task(name="sleep")(c.sleep_sync),
    "lat": app.task(name="lat")(c.lat_sync),
}


def setup() -> None:
    app.connection_for_write().ensure_connection(max_retries=3)


def enqueue_one(kind: str, t: float) -> None:
    TASKS[kind].delay(t)


enqueue_bulk = None


def _pool(workload: str) -> str:
    import os

    # solo was the fastest of prefork -c 2 / solo / threads for no-op tasks in a pilot on
    # this 2-core machine (about 980 vs 410 vs 400 tasks/s, results off).
    return os.environ.get("BENCH_CELERY_POOL") or ("threads" if workload == "io" else "solo")


def run_worker() -> None:
    import os

    pool = _pool(c.WORKLOAD)
    # BENCH_CELERY_CONC: the pilot of other pools (prefork -c 2, threads -c 8) for no-op tasks.
    conc = os.environ.get("BENCH_CELERY_CONC") or c.CONCURRENCY
    app.worker_main(["worker", "--loglevel=WARNING", f"--pool={pool}",
                     f"--concurrency={conc}", "-Q", c.QUEUE, "--without-gossip",
                     "--without-mingle", "--without-heartbeat"])


def results_modes() -> dict[bool, str | None]:
    return {True: "Redis result backend", False: "task_ignore_result=True, no backend"}


def settings(workload: str) -> str:
    return (f"--pool={_pool(workload)} --concurrency={CONC[workload]}, acks_late, "
            "prefetch multiplier 64, without gossip/mingle/heartbeat")
