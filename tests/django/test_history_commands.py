"""``manage.py blitzq history`` and ``manage.py blitzq prune-history`` on stored rows."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from blitzq_django.history import cli as history_cli
from blitzq_django.models import TaskRecord

pytestmark = pytest.mark.django_db


def _row(task_id: str, state: str = "succeeded", days: float = 0, task: str = "t.a",
         queue: str = "default") -> TaskRecord:
    when = timezone.now() - dt.timedelta(days=days)
    final = state in ("succeeded", "failed", "dead_lettered", "cancelled", "expired")
    return TaskRecord.objects.create(task_id=task_id, task_name=task, queue=queue, state=state,
                                     created_at=when, finished_at=when if final else None,
                                     args=[1], error_type="E" if state == "failed" else "",
                                     error_message="bad" if state == "failed" else "")


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("blitzq", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_history_lists_and_filters(blitzq_memory: Any) -> None:
    _row("a1", days=2)
    _row("a2", "failed", days=1, task="t.b")
    _row("a3", "queued", queue="mail")
    rows = json.loads(_run("history", "--json"))["rows"]
    assert [r["task_id"] for r in rows] == ["a3", "a2", "a1"]
    assert [r["task_id"] for r in json.loads(_run("history", "--json", "--state",
                                                  "failed"))["rows"]] == ["a2"]
    assert [r["task_id"] for r in json.loads(_run("history", "--json", "--task",
                                                  "t.a", "--queue", "default"))["rows"]] == ["a1"]
    assert len(json.loads(_run("history", "--json", "--limit", "2"))["rows"]) == 2
    text = _run("history", "--state", "failed")
    assert "a2" in text and "E: bad" in text
    with pytest.raises(CommandError) as info:
        _run("history", "--task", "nothing")
    assert info.value.returncode == 1


def test_prune_history(blitzq_memory: Any) -> None:
    for i in range(5):
        _row(f"old-{i}", days=30)
    _row("old-failed", "failed", days=30)
    _row("old-queued", "queued", days=30)  # unfinished: kept by default
    _row("new", days=1)
    out = json.loads(_run("prune-history", "--dry-run", "--json"))
    assert (out["matched"], out["deleted"], out["older_than_days"]) == (6, 0, 14)
    assert TaskRecord.objects.count() == 8
    out = json.loads(_run("prune-history", "--state", "failed", "--json"))
    assert (out["matched"], out["deleted"]) == (1, 1)
    assert "deleted 5 history rows" in _run("prune-history")
    assert sorted(TaskRecord.objects.values_list("task_id", flat=True)) == ["new", "old-queued"]
    out = json.loads(_run("prune-history", "--older-than", "10", "--state", "queued",
                          "--json"))
    assert out["deleted"] == 1
    assert json.loads(_run("prune-history", "--older-than", "0", "--json"))["deleted"] == 1
    assert TaskRecord.objects.count() == 0


def test_prune_batches(blitzq_memory: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(history_cli, "PRUNE_BATCH", 3)
    for i in range(10):
        _row(f"r{i}", days=20)
    assert json.loads(_run("prune-history", "--json"))["deleted"] == 10


def test_prune_retention_from_settings(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "HISTORY_RETENTION": 40}
    _row("r", days=30)
    assert json.loads(_run("prune-history", "--json"))["matched"] == 0


def test_bad_arguments(blitzq_memory: Any) -> None:
    with pytest.raises(CommandError):
        _run("prune-history", "--older-than", "-1")
    with pytest.raises(CommandError) as info:
        _run("history", "--limit", "0")
    assert info.value.returncode == 2


def test_runhistory_writes_and_stops_gracefully(tmp_path: Any, redis_url: str,
                                                namespace: str) -> None:
    """The command as a process of its own: SIGTERM stops it (exit 0), lease released."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import redis

    from blitzq_django.engine import Client, RedisBroker
    from tests.support.waiting import wait_until

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
           "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
           "BLITZQ_SQLITE": str(tmp_path / "db.sqlite3"), "PYTHONPATH": str(root)}
    env.pop("BLITZQ_TEST_DB", None)
    env.pop("DATABASE_URL", None)
    manage = [sys.executable, str(root / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, cwd=root, check=True, timeout=120)
    broker = RedisBroker(redis_url, namespace=namespace, event_details=True)
    client = Client(broker)
    task = client.task(name="tests.history.cmd")(lambda x: x)
    handle = task.enqueue(5)
    proc = subprocess.Popen([*manage, "runhistory", "-v", "2"], env=env, cwd=root, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    plain = redis.Redis.from_url(redis_url)
    lease = broker.keys.queue("default").history_lease
    try:
        import sqlite3

        def written() -> bool:
            try:
                with sqlite3.connect(tmp_path / "db.sqlite3") as conn:
                    return conn.execute("SELECT args FROM blitzq_django_taskrecord WHERE "
                                        "task_id = ?", (handle.id,)).fetchone() == ("[5]",)
            except sqlite3.OperationalError:
                return False

        wait_until(written, 30, 0.05, "the row of the enqueued task")
        assert plain.exists(lease)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        broker.close()
    assert proc.returncode == 0, err
    assert "history writer stopped: events 1, rows 1" in out
    assert not plain.exists(lease)
    plain.delete(*plain.scan_iter(match=broker.keys.all_keys_pattern()))
    plain.close()
