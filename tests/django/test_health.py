"""manage.py blitzq health: the probe of docs/deployment.md (exit 0 healthy, 1 not)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from blitzq_django.engine import Client
from tests.support.migrated import migrated_sqlite, sqlite_env
from tests.support.redis_server import free_port
from tests.support.waiting import wait_until

from .conftest import running_worker

ROOT = Path(__file__).resolve().parents[2]


def health(*args: str) -> tuple[int, dict[str, Any], str]:
    """call_command("blitzq", "health", ..., "--json"): (exit status, document, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("blitzq", "health", *args, "--json", stdout=out, stderr=err)
        code = 0
    except CommandError as exc:
        code, err = exc.returncode, io.StringIO(str(exc))
    return code, json.loads(out.getvalue()), err.getvalue()


def test_no_worker_on_this_host_is_unhealthy(blitzq_redis: Client) -> None:
    code, doc, err = health()
    assert code == 1
    assert doc["healthy"] is False and doc["redis"]["ok"] is True
    assert doc["scope"] == f"host {socket.gethostname()}"
    assert "0 live worker(s)" in err


def test_a_beating_worker_is_healthy_by_host_pid_and_any_host(blitzq_redis: Client) -> None:
    with running_worker(blitzq_redis):
        wait_until(lambda: blitzq_redis.workers(), 10, message="the worker's first beat")
        code, doc, _ = health()
        assert code == 0 and doc["healthy"] is True and doc["problems"] == []
        [worker] = doc["workers"]
        assert worker["pid"] == os.getpid() and worker["heartbeat_age_s"] >= 0
        assert health("--pid", str(os.getpid()))[0] == 0
        assert health("--any-host")[0] == 0
        assert health("--host", "another-host")[0] == 1
        assert health("--min-workers", "2")[0] == 1


def test_a_stale_heartbeat_fails_max_age(blitzq_redis: Client) -> None:
    with running_worker(blitzq_redis):
        beat = wait_until(lambda: blitzq_redis.workers(), 10, message="the worker's first beat")
        # The next beat is a third of the visibility timeout away (20 s): the first one
        # ages past a millisecond long before.
        wait_until(lambda: health("--max-age", "0.001")[0] == 1, 10,
                   message="the beat to be older than 1 ms")
        _, doc, err = health("--max-age", "0.001")
        assert doc["workers"][0]["name"] == beat[0].name
        assert "1 with a heartbeat older than 0.001 s" in err


def test_redis_unreachable_is_unhealthy_not_exit_3(settings: Any) -> None:
    settings.BLITZQ = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    code, doc, err = health("--redis-only")
    assert code == 1 and doc["redis"]["ok"] is False and doc["redis"]["error"]
    assert "Redis does not answer" in err


def test_redis_only_needs_no_worker(blitzq_redis: Client) -> None:
    code, doc, _ = health("--redis-only")
    assert (code, doc["healthy"], doc["workers"]) == (0, True, [])


def test_a_bad_max_age_is_a_usage_error(blitzq_redis: Client) -> None:
    with pytest.raises(CommandError, match="argument --max-age: must be"):
        call_command("blitzq", "health", "--max-age", "nan")


@pytest.mark.slow
def test_probe_a_runworker_as_deployed(tmp_path: Path, redis_url: str, namespace: str) -> None:
    """The probe as a container runs it: manage.py blitzq health beside manage.py runworker,
    healthy while the worker runs and unhealthy once SIGTERM stopped it."""
    env = sqlite_env({**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
                      "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                      "BLITZQ_SQLITE": str(migrated_sqlite(tmp_path / "db.sqlite3")),
                      "PYTHONPATH": str(ROOT)})

    def probe(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "manage.py", "blitzq", "health", *args],
                              cwd=ROOT, env=env, text=True, capture_output=True, timeout=60)

    # --no-reload: as deployed (DEBUG off); with DEBUG's reloader the worker is a child.
    worker = subprocess.Popen([sys.executable, "manage.py", "runworker", "--no-history",
                               "--no-reload"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: probe().returncode == 0, 60, interval=0.2,
                   message="the probe to pass beside a running worker")
        done = probe("--pid", str(worker.pid), "--json")
        assert done.returncode == 0, done.stderr
        assert [w["pid"] for w in json.loads(done.stdout)["workers"]] == [worker.pid]
        assert "healthy" in probe().stdout.splitlines()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
        gone = probe("--pid", str(worker.pid))
        assert gone.returncode == 1
        assert "0 live worker(s) for pid" in gone.stderr
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
