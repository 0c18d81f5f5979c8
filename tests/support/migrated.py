"""A migrated SQLite database of the test project for worker subprocesses: runworker
(and runscheduler, runhistory, runoutbox) refuse to start without blitzq's tables.
Migrated once per test session, then copied for each test (a copy takes milliseconds,
a migrate seconds)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_template: Path | None = None
_lock = threading.Lock()


def sqlite_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the database the test project picks from it forced to SQLite (the
    PostgreSQL pass sets DATABASE_URL / BLITZQ_TEST_DB for the test process only)."""
    env = dict(env)
    env.pop("DATABASE_URL", None)
    env.pop("BLITZQ_TEST_DB", None)
    return env


def migrated_sqlite(path: Path) -> Path:
    """A migrated copy of the test project's database at ``path``."""
    global _template
    with _lock:
        if _template is None:
            folder = Path(tempfile.mkdtemp(prefix="blitzq-migrated-"))
            atexit.register(shutil.rmtree, folder, True)
            template = folder / "db.sqlite3"
            env = sqlite_env({**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
                              "BLITZQ_SQLITE": str(template), "PYTHONPATH": str(ROOT)})
            subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"],
                           env=env, cwd=ROOT, check=True, timeout=180)
            with contextlib.closing(sqlite3.connect(template)) as db:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the one file
            _template = template
    shutil.copyfile(_template, path)
    return path
