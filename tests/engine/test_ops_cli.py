"""The ops command line (engine/cli/ops.py) through ``python -m blitzq_django.engine``'s
main(), on a real Redis: every command's --json document, its text, its exit codes."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import io
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from blitzq_django.engine import CallOptions, Client, RedisBroker
from blitzq_django.engine.brokers.base import Enqueue
from blitzq_django.engine.cli import main as cli
from blitzq_django.engine.cli import ops as ops_cli

from ..support.redis_server import free_port
from ..support.waiting import wait_until
from .helpers import background_worker, run_burst

ROOT = Path(__file__).resolve().parents[2]
BEAT = {"visibility_timeout": 1.0}  # a heartbeat every third of a second
LATER = CallOptions(delay=3600)  # scheduled, not ready


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Terminal(io.StringIO):
    """Typed answers, from what claims to be a terminal (the confirmation prompt's stdin)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def client(redis_broker: RedisBroker) -> Client:
    """A client with three tasks: one that works and two that dead-letter at once."""
    c = Client(redis_broker)

    @c.task(name="jobs.ok")
    def ok(x: int) -> dict[str, int]:
        return {"doubled": x * 2}

    @c.task(name="jobs.fail", queue="jobs", retries=0)
    def fail(x: int) -> None:
        raise ValueError(f"bad {x}")

    @c.task(name="jobs.lookup", queue="jobs", retries=0)
    def lookup(x: int) -> None:
        raise KeyError(x)

    return c


def with_app(argv: tuple[str, ...]) -> list[str]:
    """The command's words, then APP (any: load() ignores it), then the rest."""
    words = 2 if argv[0] == "dead-letters" else 1
    return [*argv[:words], "tests:app", *argv[words:]]


def run(client: Client, *argv: str) -> Ran:
    """main([...]) with this client as APP, its output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(with_app(argv), load=lambda path: client)
    return Ran(code, out.getvalue(), err.getvalue())


def run_with(client: Client, *argv: str, stdin: io.StringIO,
             progress: io.StringIO | None = None) -> Ran:
    """ops_cli.execute with chosen streams: a terminal's stdin, a progress bar's file."""
    out, err = io.StringIO(), io.StringIO()
    args = cli.build_parser().parse_args(with_app(argv))
    console = ops_cli.Console(out=out, err=err, stdin=stdin, progress=progress)
    code = ops_cli.execute(ops_cli.Ops(client, console), args)
    return Ran(code, out.getvalue(), err.getvalue())


def dead_letter(client: Client, task: str, *args: Any) -> str:
    handle = client.enqueue(client.registry.get(task), args)
    return handle.id


def make_dead_letters(client: Client) -> tuple[list[str], list[str]]:
    """Three ValueError and two KeyError dead letters on "jobs"."""
    failed = [dead_letter(client, "jobs.fail", i) for i in range(3)]
    lookups = [dead_letter(client, "jobs.lookup", i) for i in range(2)]
    run_burst(client, queues=("jobs",))
    return failed, lookups


def hold_one(client: Client, queue: str) -> None:
    """A worker reads one message of ``queue`` and keeps it (in flight)."""
    broker: Any = client.broker

    async def read() -> None:
        await broker.prepare([queue])
        assert len(await broker.fetch([queue], "holder", 1, 10)) == 1
        await broker.aclose()

    asyncio.run(read())


# -- stats -------------------------------------------------------------------------------


def test_stats_counts_every_known_queue(client: Client) -> None:
    for i in range(3):
        client.enqueue(client.registry.get("jobs.ok"), (i,))
    fail = client.registry.get("jobs.fail")
    client.enqueue(fail, (1,), call=LATER)

    ran = run(client, "stats", "--json")
    assert ran.code == 0, ran.err
    queues = {q["queue"]: q for q in ran.json()["queues"]}
    assert set(queues) == {"default", "jobs"}
    assert (queues["default"]["ready"], queues["default"]["scheduled"]) == (3, 0)
    assert (queues["jobs"]["ready"], queues["jobs"]["scheduled"]) == (0, 1)
    assert set(queues["default"]) == {"queue", "ready", "in_flight", "scheduled",
                                      "dead_letters", "consumers", "oldest_ready_age_ms",
                                      "workers"}
    assert queues["default"]["workers"] == 0  # live workers serving it

    only = run(client, "stats", "jobs", "--json").json()["queues"]
    assert [q["queue"] for q in only] == ["jobs"]
    text = run(client, "stats")
    assert text.code == 0 and "READY" in text.out and "jobs" in text.out


def test_stats_of_an_unknown_or_invalid_queue_is_bad_input(client: Client) -> None:
    unknown = run(client, "stats", "nowhere", "--json")
    assert (unknown.code, unknown.out) == (2, "")
    assert "queue 'nowhere' does not exist" in unknown.err
    invalid = run(client, "stats", "a:b")
    assert invalid.code == 2 and "queue name 'a:b' is invalid" in invalid.err
    # A queue no task names, but that holds messages, is there to be looked at.
    client.broker.enqueue([Enqueue("adhoc", "m1", b"x")])
    assert run(client, "stats", "adhoc", "--json").json()["queues"][0]["ready"] == 1


# -- workers -----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_workers_lists_the_live_workers(client: Client) -> None:
    empty = await asyncio.to_thread(run, client, "workers", "--json")
    assert (empty.code, empty.json()) == (0, {"workers": []})
    async with background_worker(client, concurrency=3, **BEAT) as worker:
        await asyncio.to_thread(wait_until, lambda: client.workers(), 5,
                                message="the worker listed")
        ran = await asyncio.to_thread(run, client, "workers", "--json")
        text = await asyncio.to_thread(run, client, "workers")
    (info,) = ran.json()["workers"]
    assert (info["name"], info["pid"], info["concurrency"]) == (worker.name, os.getpid(), 3)
    assert info["queues"] == ["default", "jobs"]
    assert text.code == 0 and worker.name in text.out and "0/3" in text.out


@pytest.mark.asyncio
async def test_health_of_the_engine_cli(client: Client) -> None:
    """The same command as manage.py blitzq health (tests/django/test_health.py)."""
    alone = await asyncio.to_thread(run, client, "health", "--json")
    assert alone.code == 1 and alone.json()["healthy"] is False
    async with background_worker(client, concurrency=3, **BEAT):
        await asyncio.to_thread(wait_until, lambda: client.workers(), 5,
                                message="the worker listed")
        ran = await asyncio.to_thread(run, client, "health", "--pid", str(os.getpid()))
    assert ran.code == 0 and ran.out.splitlines()[-1] == "healthy"


# -- inspect -----------------------------------------------------------------------------


def test_inspect_shows_the_record_and_exits_1_when_nothing_is_known(client: Client) -> None:
    handle = client.enqueue(client.registry.get("jobs.ok"), (21,))
    run_burst(client)
    ran = run(client, "inspect", handle.id, "--json")
    assert ran.code == 0, ran.err
    record = ran.json()
    assert (record["id"], record["state"], record["result"]) == (handle.id, "succeeded",
                                                                 {"doubled": 42})
    text = run(client, "inspect", handle.id)
    assert text.code == 0 and "succeeded" in text.out and "jobs.ok" in text.out

    missing = run(client, "inspect", "no-such-id", "--json")
    assert (missing.code, missing.json()) == (1, None)
    assert "nothing is known of message 'no-such-id'" in missing.err
    scheduled = client.enqueue(client.registry.get("jobs.fail"), (1,), call=LATER)
    found = run(client, "inspect", scheduled.id, "--queue", "jobs", "--json").json()
    assert found["state"] == "scheduled"


@pytest.mark.parametrize("command", ["inspect", "cancel"])
def test_a_malformed_id_or_queue_is_bad_input(client: Client, command: str) -> None:
    malformed = run(client, command, "has space", "--json")
    assert (malformed.code, malformed.out) == (2, "")
    assert "message id 'has space' is invalid" in malformed.err
    queue = run(client, command, "abc", "--queue", "nowhere")
    assert queue.code == 2 and "queue 'nowhere' does not exist" in queue.err


# -- cancel (client.cancel: see the report if these fail with AttributeError) ------------


def test_cancel_each_outcome(client: Client) -> None:
    ok = client.registry.get("jobs.ok")
    scheduled = client.enqueue(ok, (1,), call=LATER)
    cancelled = run(client, "cancel", scheduled.id, "--json")
    assert cancelled.code == 0, cancelled.err
    doc = cancelled.json()
    assert (doc["id"], doc["queue"], doc["outcome"]) == (scheduled.id, "default", "cancelled")
    assert set(doc) == {"id", "queue", "outcome", "state"}
    assert client.queue_stats().scheduled == 0

    queued = client.enqueue(ok, (2,))
    revoked = run(client, "cancel", queued.id)
    assert revoked.code == 0 and "revoked" in revoked.out

    done = client.enqueue(ok, (3,))
    run_burst(client)
    finished = run(client, "cancel", done.id, "--json")
    assert finished.code == 1 and finished.json()["outcome"] == "finished"
    assert finished.json()["state"] == "succeeded"
    assert "already finished (succeeded)" in finished.err

    # Without track_state a queued message has no record: an id nothing is known of is
    # revoked all the same, in case it is queued. With track_state, it is unknown.
    unseen = run(client, "cancel", "no-such-id")
    assert unseen.code == 0 and "no record of it" in unseen.out
    tracking = Client(client.broker, client.registry, track_state=True)
    unknown = run(tracking, "cancel", "no-such-id-2", "--json")
    assert unknown.code == 1 and unknown.json()["outcome"] == "unknown"
    assert "nothing is known of message 'no-such-id-2'" in unknown.err


# -- purge -------------------------------------------------------------------------------


def test_purge_with_yes(client: Client) -> None:
    ok = client.registry.get("jobs.ok")
    for i in range(3):
        client.enqueue(ok, (i,))
    client.enqueue(ok, (9,), call=LATER)
    ran = run(client, "purge", "default", "--yes", "--json")
    assert ran.code == 0, ran.err
    assert ran.json() == {"queue": "default", "ready": 3, "scheduled": 1, "dead_letters": 0,
                          "in_flight": 0}
    assert client.queue_stats().ready == 0


def test_purge_asks_on_a_terminal_and_refuses_elsewhere(client: Client) -> None:
    ok = client.registry.get("jobs.ok")
    client.enqueue(ok, (1,))
    # Not a terminal (cron, CI, a pipe) and no --yes: refused, nothing removed.
    refused = run(client, "purge", "default", "--json")
    assert (refused.code, refused.out) == (2, "")
    assert "pass --yes" in refused.err
    declined = run_with(client, "purge", "default", stdin=Terminal("n\n"))
    assert declined.code == 4 and "not confirmed" in declined.err
    assert "Purge queue 'default': drop 1 ready and 0 scheduled messages?" in declined.err
    assert client.queue_stats().ready == 1
    accepted = run_with(client, "purge", "default", "--json", stdin=Terminal("y\n"))
    assert accepted.code == 0 and accepted.json()["ready"] == 1
    assert client.queue_stats().ready == 0


def test_purge_of_a_busy_queue_is_refused_unless_forced(client: Client) -> None:
    ok = client.registry.get("jobs.ok")
    for i in range(3):
        client.enqueue(ok, (i,))
    hold_one(client, "default")
    busy = run(client, "purge", "default", "--yes", "--json")
    assert (busy.code, busy.out) == (4, "")
    assert "1 messages in flight" in busy.err
    assert client.queue_stats().ready == 2
    forced = run(client, "purge", "default", "--yes", "--force", "--json")
    assert forced.code == 0
    assert (forced.json()["ready"], forced.json()["in_flight"]) == (2, 1)


def test_purge_dead_letters_too_and_unknown_queues(client: Client) -> None:
    make_dead_letters(client)
    ran = run(client, "purge", "jobs", "--dead-letters", "--yes")
    assert ran.code == 0 and "5 dead letters" in ran.out
    assert client.queue_stats("jobs").dead_letters == 0
    unknown = run(client, "purge", "nowhere", "--yes")
    assert unknown.code == 2 and "queue 'nowhere' does not exist" in unknown.err


# -- dead letters ------------------------------------------------------------------------


def test_dead_letters_list_and_its_filters(client: Client) -> None:
    failed, lookups = make_dead_letters(client)
    ran = run(client, "dead-letters", "list", "--queue", "jobs", "--json")
    assert ran.code == 0, ran.err
    doc = ran.json()
    assert doc["queue"] == "jobs"
    assert {x["id"] for x in doc["dead_letters"]} == {*failed, *lookups}
    first = next(x for x in doc["dead_letters"] if x["id"] == failed[0])
    assert (first["task"], first["error_type"], first["args"]) == ("jobs.fail", "ValueError",
                                                                  [0])

    def ids(*flags: str) -> set[str]:
        listed = run(client, "dead-letters", "list", "-Q", "jobs", "--json", *flags)
        return {x["id"] for x in listed.json()["dead_letters"]}

    assert ids("--error-type", "KeyError") == set(lookups)
    assert ids("--task", "jobs.f*") == set(failed)
    assert ids("--reason", "retries exhausted", "--task", "jobs.lookup") == set(lookups)
    assert ids("--newer-than", "3600") == {*failed, *lookups}
    assert len(ids("--limit", "2")) == 2

    none = run(client, "dead-letters", "list", "-Q", "jobs", "--older-than", "3600", "--json")
    assert none.code == 1 and none.json() == {"queue": "jobs", "dead_letters": []}
    text = run(client, "dead-letters", "list", "-Q", "jobs")
    assert text.code == 0 and "ValueError" in text.out and "bad 0" in text.out


def test_dead_letters_summary_groups_the_counts(client: Client) -> None:
    make_dead_letters(client)
    ran = run(client, "dead-letters", "summary", "-Q", "jobs", "--json")
    assert ran.code == 0, ran.err
    assert ran.json() == {
        "queue": "jobs", "total": 5,
        "by_task": [{"task": "jobs.fail", "count": 3}, {"task": "jobs.lookup", "count": 2}],
        "by_reason": [{"reason": "retries exhausted", "count": 5}],
        "by_error_type": [{"error_type": "ValueError", "count": 3},
                          {"error_type": "KeyError", "count": 2}],
    }
    text = run(client, "dead-letters", "summary", "-Q", "jobs")
    assert "5 dead letters in 'jobs'" in text.out and "ERROR TYPE" in text.out
    empty = run(client, "dead-letters", "summary", "--json")
    assert empty.code == 1 and empty.json()["total"] == 0


def test_dead_letters_replay_by_id(client: Client) -> None:
    failed, _ = make_dead_letters(client)
    ran = run(client, "dead-letters", "replay", failed[0], failed[1], "no-such-id", "-Q", "jobs",
              "--json")
    assert ran.code == 0, ran.err
    assert ran.json() == {"queue": "jobs", "matched": 3, "replayed": 2, "skipped": 1,
                          "dry_run": False}
    stats = client.queue_stats("jobs")
    assert (stats.ready, stats.dead_letters) == (2, 3)
    none = run(client, "dead-letters", "replay", "no-such-id", "-Q", "jobs")
    assert none.code == 1 and "replayed none of 1" in none.err
    bad = run(client, "dead-letters", "replay", "bad id", "-Q", "jobs")
    assert bad.code == 2 and "message id 'bad id' is invalid" in bad.err


def test_dead_letters_replay_all_dry_run_then_paced(client: Client) -> None:
    failed, _ = make_dead_letters(client)
    dry = run(client, "dead-letters", "replay-all", "-Q", "jobs", "--error-type", "ValueError",
              "--dry-run", "--json")
    assert dry.code == 0, dry.err
    assert dry.json()["dry_run"] is True and set(dry.json()["ids"]) == set(failed)
    assert client.queue_stats("jobs").dead_letters == 5  # a dry run changes nothing

    started = time.monotonic()
    ran = run(client, "dead-letters", "replay-all", "-Q", "jobs", "--error-type", "ValueError",
              "--rate", "20", "--json")
    assert ran.code == 0, ran.err
    assert ran.json() == {"queue": "jobs", "matched": 3, "replayed": 3, "skipped": 0,
                          "dry_run": False}
    # Three messages at 20 per second: the last one goes out 0.1 s after the first.
    assert time.monotonic() - started >= 0.1
    assert client.queue_stats("jobs").dead_letters == 2
    nothing = run(client, "dead-letters", "replay-all", "-Q", "jobs", "--task", "x.*", "--json")
    assert nothing.code == 1 and nothing.json()["matched"] == 0


def test_dead_letters_purge_with_filters_and_all(client: Client) -> None:
    _, lookups = make_dead_letters(client)
    refused = run(client, "dead-letters", "purge", "-Q", "jobs")
    assert refused.code == 2 and client.queue_stats("jobs").dead_letters == 5
    ran = run(client, "dead-letters", "purge", "-Q", "jobs", "--error-type", "ValueError",
              "--yes", "--json")
    assert ran.code == 0, ran.err
    assert ran.json() == {"queue": "jobs", "matched": 3, "purged": 3}
    left = run(client, "dead-letters", "list", "-Q", "jobs", "--json").json()["dead_letters"]
    assert {x["id"] for x in left} == set(lookups)
    everything = run_with(client, "dead-letters", "purge", "-Q", "jobs", "--json",
                          stdin=Terminal("yes\n"))
    assert everything.code == 0 and everything.json()["purged"] == 2
    assert "Delete all 2 dead letters of queue 'jobs'?" in everything.err
    again = run(client, "dead-letters", "purge", "-Q", "jobs", "--yes", "--json")
    assert again.code == 1 and again.json()["matched"] == 0


def test_a_progress_bar_only_where_there_is_a_terminal(client: Client) -> None:
    make_dead_letters(client)
    bar = io.StringIO()
    drawn = run_with(client, "dead-letters", "replay-all", "-Q", "jobs",
                     stdin=Terminal(), progress=bar)
    # tqdm draws the bar as it starts ("0/5"); with leave=False it clears it at the end.
    assert drawn.code == 0 and "replay" in bar.getvalue() and "/5 " in bar.getvalue()
    assert "replayed 5 of 5" in drawn.out
    # Through main() under pytest, stderr is no terminal: the summary line only.
    run_burst(client, queues=("jobs",))
    plain = run(client, "dead-letters", "replay-all", "-Q", "jobs")
    assert plain.code == 0 and plain.err == ""


def test_the_progress_bar_is_drawn_on_a_real_terminal(client: Client, tmp_path: Path,
                                                      redis_url: str, namespace: str) -> None:
    make_dead_letters(client)
    main_fd, terminal_fd = pty.openpty()
    # A new pty is 0 columns wide, and tqdm fits its bar to that: give it a real size.
    fcntl.ioctl(terminal_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "blitzq_django.engine", "dead-letters", "purge",
         "opsapp:client", "-Q", "jobs", "--task", "jobs.*", "--yes"],
        env=app_env(tmp_path, redis_url, namespace), stdout=subprocess.PIPE,
        stderr=terminal_fd, stdin=subprocess.DEVNULL, text=True)
    os.close(terminal_fd)
    out, _ = proc.communicate(timeout=30)
    drawn = read_all(main_fd)
    os.close(main_fd)
    assert proc.returncode == 0 and "deleted 5 dead letters" in out
    assert "purge" in drawn and "/5 " in drawn


def read_all(fd: int) -> str:
    chunks = []
    while select.select([fd], [], [], 1)[0]:
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the other side is closed
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


# -- bad numbers, bad APP, no Redis --------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["dead-letters", "list", "x:app", "--limit={}"],
    ["dead-letters", "summary", "x:app", "--older-than={}"],
    ["dead-letters", "purge", "x:app", "--newer-than={}"],
    ["dead-letters", "replay-all", "x:app", "--rate={}"],
    ["dead-letters", "replay-all", "x:app", "--limit={}"],
    ["events", "x:app", "--count={}"],
])
@pytest.mark.parametrize("value", ["nan", "-1", "inf", "-inf", "1e400"])
def test_a_bad_number_is_refused_at_parse_time(argv: list[str], value: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    def load(path: str) -> Client:
        raise AssertionError("must not get this far")

    flag = next(a for a in argv if a.startswith("--")).split("=")[0]
    with pytest.raises(SystemExit) as info:
        cli.main([a.format(value) for a in argv], load=load)
    assert info.value.code == 2
    assert f"argument {flag}: must be" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["dead-letters", "replay-all", "x:app", "--rate=0"],
    ["dead-letters", "list", "x:app", "--limit=0"],
    ["dead-letters", "list", "x:app", "--limit=1.5"],
    ["events", "x:app", "--count=0"],
    ["events", "x:app", "--count=10001"],
])
def test_zero_or_a_fraction_where_it_means_nothing_is_refused(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert f"argument {argv[-1].split('=')[0]}: must be" in capsys.readouterr().err


def test_a_bad_cursor_is_refused_at_parse_time(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["events", "x:app", "--after", "yesterday"])
    assert info.value.code == 2
    assert "argument --after: must be an event cursor" in capsys.readouterr().err


@pytest.mark.parametrize(("app", "said"), [
    ("no_such_module_here:client", "cannot load APP 'no_such_module_here:client'"),
    ("os:path", "APP 'os:path' is not a blitzq Client"),
    ("os:no_such_attribute", "cannot load APP"),
])
def test_an_app_that_is_not_a_client_is_bad_input(app: str, said: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["stats", app]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["stats"], ["workers"], ["inspect", "abc"],
                                  ["dead-letters", "list"], ["purge", "default", "--yes"]])
def test_no_redis_is_exit_3(argv: list[str]) -> None:
    down = Client(RedisBroker(f"redis://127.0.0.1:{free_port()}/0", namespace="down"))
    ran = run(down, *argv, "--json")
    assert (ran.code, ran.out) == (3, "")
    assert ran.err.startswith("blitzq: cannot reach Redis at redis://127.0.0.1:")


# -- events (client.events: see the report if these fail with AttributeError) -----------


def test_events_lists_what_happened_to_a_message(client: Client) -> None:
    handle = client.enqueue(client.registry.get("jobs.ok"), (1,))
    run_burst(client)
    ran = run(client, "events", "--json")
    assert ran.code == 0, ran.err
    doc = ran.json()
    mine = [e for e in doc["events"] if e["id"] == handle.id]
    assert mine and all(e["task"] == "jobs.ok" and e["queue"] == "default" for e in mine)
    assert set(mine[0]) >= {"cursor", "queue", "kind", "id", "task", "time_ms", "attempt",
                            "worker", "duration_ms", "error_type"}
    assert doc["cursor"] == doc["events"][-1]["cursor"]

    one = run(client, "events", "--count", "1", "--json").json()
    assert len(one["events"]) == 1
    rest = run(client, "events", "--after", one["cursor"], "--json").json()
    assert [e["cursor"] for e in rest["events"]] == [e["cursor"] for e in doc["events"][1:]]
    text = run(client, "events", "--queue", "default")
    assert text.code == 0 and handle.id in text.out
    assert run(client, "events", "--queue", "nowhere").code == 2


def app_env(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    """An APP module for subprocesses: the same tasks, on this test's Redis namespace."""
    (tmp_path / "opsapp.py").write_text(
        "import os\n"
        "from blitzq_django.engine import Client, RedisBroker\n"
        "client = Client(RedisBroker(os.environ['OPS_REDIS_URL'],\n"
        "                            namespace=os.environ['OPS_NAMESPACE']))\n"
        "@client.task(name='jobs.ok')\n"
        "def ok(x):\n"
        "    return {'doubled': x * 2}\n")
    return {**os.environ, "OPS_REDIS_URL": redis_url, "OPS_NAMESPACE": namespace,
            "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}


@contextlib.contextmanager
def lines_of(proc: subprocess.Popen[str]) -> Iterator[list[str]]:
    """The lines a process prints, collected by a thread as they come."""
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(10)


def ctrl_c_on() -> None:
    """In the child: SIGINT as a terminal's process has it. A suite started in the
    background by a non-interactive shell (``cmd &``) hands every child SIGINT ignored,
    and Python then installs no KeyboardInterrupt for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_events_follow_prints_new_events_as_json_lines_until_ctrl_c(
        client: Client, tmp_path: Path, redis_url: str, namespace: str) -> None:
    ok = client.registry.get("jobs.ok")
    before = client.enqueue(ok, (0,))
    run_burst(client)
    proc = subprocess.Popen(
        [sys.executable, "-m", "blitzq_django.engine", "events", "opsapp:client", "--follow",
         "--json"], env=app_env(tmp_path, redis_url, namespace), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_on)
    sent: list[str] = []

    def a_new_event_shows() -> bool:
        # The follower starts with only new events: keep making some until one arrives.
        if proc.poll() is not None:
            raise AssertionError(f"the follower exited ({proc.returncode}): "
                                 f"{proc.communicate()[1]}")
        sent.append(client.enqueue(ok, (len(sent),)).id)
        run_burst(client)
        return any(json.loads(line)["id"] in sent for line in lines)

    with lines_of(proc) as lines:
        wait_until(a_new_event_shows, 30, interval=0.05, message="a followed event")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in lines]
    assert before.id not in {e["id"] for e in events}  # it happened before --follow started
    assert all(e["kind"] and e["cursor"] for e in events)
