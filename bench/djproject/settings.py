"""Bench Django project: the least a project running blitzq needs, BLITZQ defaults otherwise.

Environment (set by bench/run.py):
  BENCH_URL     the bench Redis (BLITZQ["REDIS_URL"])
  BENCH_DJ_DB   the SQLite file (migrated once per sitting, copied fresh before each run)
  BENCH_DJ_BLITZQ  optional JSON merged into BLITZQ, for side measurements only, e.g.
                '{"HISTORY": "off"}' (the published rows use the defaults)
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

SECRET_KEY = "bench-not-secret"
DEBUG = False  # DEBUG would turn on runworker --reload (a parent process that restarts it)
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "blitzq_django",
    "bench.djproject.benchapp",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_DJ_DB")
        or str(Path(tempfile.gettempdir()) / "blitzq-bench-dj.sqlite3"),
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20,
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Everything else is the BLITZQ default (CONCURRENCY 100, THREADS None = 100 threads for
# `def` tasks, STORE_RESULTS True, EVENTS True, HISTORY "all", OUTBOX_RELAY True); the
# results-off rows change STORE_RESULTS only.
BLITZQ = {
    "REDIS_URL": os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0"),
    "NAMESPACE": "bench",
    "QUEUES": ["bench"],
    "DEFAULT_QUEUE": "bench",
    "STORE_RESULTS": os.environ.get("BENCH_RESULTS", "1") == "1",
    **json.loads(os.environ.get("BENCH_DJ_BLITZQ") or "{}"),
}
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "root": {"level": "WARNING", "handlers": []}}
