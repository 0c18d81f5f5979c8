"""The README's first command runs ``manage.py demo``: it must finish every task it sends.

``scripts/demo.py`` adds only a virtualenv and ``migrate`` around it; this runs the
command itself, as a separate process with its own ``runworker`` child, on the test's
Redis and a migrated SQLite file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tests.support.migrated import migrated_sqlite, sqlite_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_finishes_every_task_it_sends(tmp_path: Path, redis_url: str,
                                               namespace: str, manage: Any) -> None:
    env = sqlite_env({**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
                      "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                      "BLITZQ_SQLITE": str(migrated_sqlite(tmp_path / "db.sqlite3")),
                      "PYTHONPATH": str(ROOT)})
    demo = manage("demo", "--tasks", "300", "--timeout", "60", env=env)
    out, err = demo.communicate(timeout=110)
    assert demo.returncode == 0, (out, err)
    finished = re.search(r"tasks finished\s+(\d+) of (\d+)", out)
    assert finished is not None, out
    assert finished[1] == finished[2], out
    assert "worker             exit code 0" in out, out
