"""manage.py blitzq: the ops command line on the project's client (one implementation
with the engine's, tested in depth in tests/engine/test_ops_cli.py; here, the wiring)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from blitzq_django.engine import Client
from testproject.shop import tasks
from tests.support.migrated import migrated_sqlite, sqlite_env
from tests.support.waiting import wait_until

from .conftest import running_worker

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    """Typed answers, from what claims to be a terminal."""

    def isatty(self) -> bool:
        return True


def blitzq(*args: str, stdin: io.StringIO | None = None) -> tuple[Any, str]:
    """call_command("blitzq", ...) with --json: (the parsed document, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    extra = {"stdin": stdin} if stdin is not None else {}
    call_command("blitzq", *args, "--json", stdout=out, stderr=err, **extra)
    return json.loads(out.getvalue()), err.getvalue()


def test_stats_covers_the_settings_queues(blitzq_redis: Client) -> None:
    tasks.noop.enqueue_many([() for _ in range(4)])
    doc, _ = blitzq("stats")
    queues = {q["queue"]: q for q in doc["queues"]}
    assert "default" in queues and queues["default"]["ready"] == 4
    only, _ = blitzq("stats", "default")
    assert [q["queue"] for q in only["queues"]] == ["default"]


def test_workers_and_inspect(blitzq_redis: Client) -> None:
    assert blitzq("workers")[0] == {"workers": []}
    handle = tasks.fetch_exchange_rate.enqueue("USD")
    with running_worker(blitzq_redis):
        wait_until(lambda: handle.inspect() and handle.inspect().is_final, 10,  # type: ignore[union-attr]
                   message="the task to finish")
    record, _ = blitzq("inspect", handle.id)
    assert (record["state"], record["result"]) == ("succeeded", 1.08)
    out = io.StringIO()
    with pytest.raises(CommandError, match="nothing is known of message 'nope'") as info:
        call_command("blitzq", "inspect", "nope", "--json", stdout=out)
    assert info.value.returncode == 1 and json.loads(out.getvalue()) is None


def test_dead_letters_summary_list_replay_and_purge(blitzq_redis: Client,
                                                    settings: Any) -> None:
    handle = tasks.validate_card.enqueue("4242424242424242")
    with running_worker(blitzq_redis):
        wait_until(lambda: blitzq_redis.queue_stats().dead_letters == 1, 10,
                   message="the card validation to be dead-lettered")
    summary, _ = blitzq("dead-letters", "summary")
    assert summary["total"] == 1
    assert summary["by_error_type"] == [{"error_type": "ValueError", "count": 1}]
    # Listings mask the arguments BLITZQ["REDACT"] names.
    settings.BLITZQ = {**settings.BLITZQ, "REDACT": ["number"]}
    listed, _ = blitzq("dead-letters", "list", "--task", "*validate_card")
    (letter,) = listed["dead_letters"]
    assert letter["id"] == handle.id and letter["error_type"] == "ValueError"
    assert "4242424242424242" not in json.dumps(letter["args"])
    replayed, _ = blitzq("dead-letters", "replay", handle.id)
    assert replayed["replayed"] == 1
    assert blitzq_redis.queue_stats().ready == 1
    purged, err = blitzq("purge", "default", stdin=Terminal("y\n"))
    assert "Purge queue 'default': drop 1 ready" in err
    assert purged["ready"] == 1


def test_refusals_and_bad_input_have_their_exit_codes(blitzq_redis: Client) -> None:
    tasks.noop.enqueue()
    with pytest.raises(CommandError, match="pass --yes") as refused:
        call_command("blitzq", "purge", "default", stdin=io.StringIO(""))
    assert refused.value.returncode == 2
    assert blitzq_redis.queue_stats().ready == 1
    with pytest.raises(CommandError, match="queue 'nowhere' does not exist") as unknown:
        call_command("blitzq", "stats", "nowhere")
    assert unknown.value.returncode == 2
    with pytest.raises(CommandError, match="message id 'a b' is invalid") as malformed:
        call_command("blitzq", "inspect", "a b")
    assert malformed.value.returncode == 2


@pytest.mark.parametrize(("argv", "flag"), [
    (["dead-letters", "list", "--limit=nan"], "--limit"),
    (["dead-letters", "summary", "--older-than=-1"], "--older-than"),
    (["dead-letters", "replay-all", "--rate=inf"], "--rate"),
    (["events", "--count=0"], "--count"),
])
def test_a_bad_number_is_a_command_error_naming_the_flag(blitzq_memory: Client,
                                                         argv: list[str], flag: str) -> None:
    with pytest.raises(CommandError, match=f"argument {flag}: must be"):
        call_command("blitzq", *argv)


def test_no_redis_is_exit_3(settings: Any) -> None:
    from tests.support.redis_server import free_port

    settings.BLITZQ = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    with pytest.raises(CommandError, match="cannot reach Redis") as info:
        call_command("blitzq", "workers")
    assert info.value.returncode == 3


def test_cancel(blitzq_redis: Client) -> None:
    # client.cancel: see the report if this fails with AttributeError.
    handle = tasks.noop.options(delay=3600).enqueue()
    doc, _ = blitzq("cancel", handle.id)
    assert (doc["id"], doc["outcome"]) == (handle.id, "cancelled")
    assert blitzq_redis.queue_stats().scheduled == 0


def test_events(blitzq_redis: Client) -> None:
    # client.events: see the report if this fails with AttributeError.
    handle = tasks.noop.enqueue()
    with running_worker(blitzq_redis):
        wait_until(lambda: handle.inspect() is not None, 10, message="the task to finish")
    doc, _ = blitzq("events")
    assert handle.id in {e["id"] for e in doc["events"]}


@pytest.fixture
def project_env(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    return sqlite_env({**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
                       "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                       "BLITZQ_SQLITE": str(migrated_sqlite(tmp_path / "db.sqlite3")),
                       "PYTHONPATH": str(ROOT)})


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
                          text=True, capture_output=True, timeout=60)


def test_manage_py_blitzq_stats_json(blitzq_redis: Client, project_env: dict[str, str]) -> None:
    tasks.noop.enqueue_many([() for _ in range(3)])
    done = manage("blitzq", "stats", "--json", env=project_env)
    assert done.returncode == 0, done.stderr
    queues = {q["queue"]: q for q in json.loads(done.stdout)["queues"]}
    assert queues["default"]["ready"] == 3
    missing = manage("blitzq", "inspect", "no-such-id", env=project_env)
    assert missing.returncode == 1
    assert "nothing is known of message 'no-such-id'" in missing.stderr
