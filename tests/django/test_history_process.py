"""The history writer as runworker's child process (HISTORY_WRITER "process", the default).

Real processes: runworker over a migrated SQLite file of the test's own; the rows are
read without Django. The writer process is found by the lease it holds (its name holds
its pid) and by /proc (children of runworker).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from blitzq_django import conf, history
from blitzq_django.engine import CallOptions, Client, RedisBroker
from blitzq_django.history.process import NICENESS
from testproject.shop import tasks
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
WRITER = "runhistory"

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="finds the writer process through /proc (Linux)")


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
    return out


def _writers_under(pid: int) -> list[int]:
    """The history writer processes among the descendants of ``pid``."""
    found, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            todo.append(child)
            with contextlib.suppress(OSError):
                if WRITER in (Path("/proc") / str(child) / "cmdline").read_text():
                    found.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


@pytest.fixture
def env(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
           "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
           "BLITZQ_SQLITE": str(tmp_path / "db.sqlite3"), "PYTHONPATH": str(ROOT),
           "DJANGO_DEBUG": "0"}  # no --reload parent between the test and the worker
    # This test's own SQLite file, read back directly, in the PostgreSQL pass too.
    env.pop("DATABASE_URL", None)
    env.pop("BLITZQ_TEST_DB", None)
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"], env=env,
                   cwd=ROOT, check=True, timeout=120)
    return env


@pytest.fixture
def runworker(env: dict[str, str]) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "runworker",
                                 "--queues", "default", "--concurrency", "10", *args],
                                cwd=ROOT, env=env, text=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def _rows(env: dict[str, str]) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(env["BLITZQ_SQLITE"], timeout=5)) as db:
        return dict(db.execute("SELECT task_id, state FROM blitzq_django_taskrecord"))


def _all_written(env: dict[str, str], ids: list[str]) -> bool:
    rows = _rows(env)
    return all(rows.get(i) == "succeeded" for i in ids)


def _niceness(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[16])


def _lease_holder(client: Any) -> int | None:
    """The pid in the name of the writer holding the default queue's lease."""
    value = client.broker.sync.client.get(client.broker.keys.queue("default").history_lease)
    return int(value.decode().split(":")[-2]) if value else None


def test_the_default_is_a_process_and_thread_is_a_choice(settings: Any, redis_url: str,
                                                          namespace: str) -> None:
    base = {"REDIS_URL": redis_url, "NAMESPACE": namespace}
    settings.BLITZQ = base
    assert conf.get_settings()["HISTORY_WRITER"] == "process"
    run = history.companion(conf.get_settings())
    assert run is not None and run.__name__ == "<lambda>"  # supervises a child
    settings.BLITZQ = {**base, "HISTORY_WRITER": "thread"}
    assert history.companion(conf.get_settings()).__name__ == "run"  # the writer itself
    assert [(p.id, p.key) for p in conf.problems({"HISTORY_WRITER": "fork"})] == [
        ("blitzq.E012", "HISTORY_WRITER")]
    assert [p.id for p in conf.problems({"HISTORY_WRITER": 1})] == ["blitzq.E003"]


def test_runworker_writes_history_from_a_child_and_starts_another_when_it_dies(
        blitzq_redis: Any, env: dict[str, str], runworker: Any) -> None:
    first = [h.id for h in tasks.noop.enqueue_many([() for _ in range(50)])]
    worker = runworker()
    wait_until(lambda: _all_written(env, first), 60, 0.1, "the first rows")
    writers = _writers_under(worker.pid)
    assert len(writers) == 1 and writers[0] != worker.pid
    assert _lease_holder(blitzq_redis) == writers[0]
    # The writer yields the CPU to the worker's tasks.
    assert _niceness(writers[0]) == min(_niceness(worker.pid) + NICENESS, 19)

    # A writer killed mid-life: runworker starts another (after the dead one's lease
    # expires), which writes what came meanwhile; the worker never stopped.
    os.kill(writers[0], signal.SIGKILL)
    second = [h.id for h in tasks.noop.enqueue_many([() for _ in range(50)])]
    wait_until(lambda: _all_written(env, second), 60, 0.1, "the rows after the kill")
    again = _writers_under(worker.pid)
    assert len(again) == 1 and again[0] != writers[0]
    assert _niceness(again[0]) == min(_niceness(worker.pid) + NICENESS, 19)
    assert worker.poll() is None
    assert len(_rows(env)) == 100

    # SIGTERM: runworker stops its writer on the way out; nothing is left running.
    worker.send_signal(signal.SIGTERM)
    _out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "history writer process exited" in err  # the SIGKILL above, logged
    wait_until(lambda: not _alive(again[0]), 10, 0.05, "the writer to exit")


def test_a_writer_never_outlives_its_runworker(blitzq_redis: Any, env: dict[str, str],
                                              runworker: Any) -> None:
    worker = runworker()
    wait_until(lambda: _writers_under(worker.pid), 30, 0.05, "the writer process")
    writer = _writers_under(worker.pid)[0]
    os.kill(worker.pid, signal.SIGKILL)  # the worker alone: its writer sees its stdin close
    wait_until(lambda: not _alive(writer), 20, 0.05, "the orphaned writer to exit")


def test_processes_share_one_writer(blitzq_redis: Any, env: dict[str, str],
                                    runworker: Any) -> None:
    ids = [h.id for h in tasks.noop.enqueue_many([() for _ in range(100)])]
    supervisor = runworker("--processes", "2")
    wait_until(lambda: _all_written(env, ids), 60, 0.1, "the rows")
    writers = _writers_under(supervisor.pid)
    assert len(writers) == 1
    assert int(Path(f"/proc/{writers[0]}/stat").read_text().rsplit(")", 1)[1].split()[1]) \
        == supervisor.pid  # the supervisor's own child, not a worker's


def test_supervised_children_do_not_reload_under_debug(blitzq_redis: Any,
                                                        env: dict[str, str]) -> None:
    # DEBUG turns --reload on for a lone runworker; the supervisor's children must not
    # each become a reloader with a worker of its own, in a session of its own.
    proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "runworker",
                             "--queues", "default", "--processes", "2"],
                            cwd=ROOT, env={**env, "DJANGO_DEBUG": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        parent = (Path("/proc") / str(proc.pid) / "cmdline").read_text()

        def workers() -> list[int]:
            # (A child forked and not yet started shows its parent's command line.)
            return [c for c in _children(proc.pid)
                    if "runworker" in (cmdline := (Path("/proc") / str(c) / "cmdline")
                                       .read_text()) and cmdline != parent]

        wait_until(lambda: len(workers()) == 2, 30, 0.05, "two worker processes")
        for child in workers():
            assert "--no-reload" in (Path("/proc") / str(child) / "cmdline").read_text()
            assert not _children(child)  # the worker itself, no reloader's child
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_the_writer_covers_the_queues_runworker_serves(blitzq_redis: Any, env: dict[str, str],
                                                       runworker: Any) -> None:
    # --queues names a queue the settings do not (a producer whose settings name it sent
    # these): its history is written all the same.
    producer = Client(RedisBroker(blitzq_redis.broker.url,
                                  namespace=blitzq_redis.broker.keys.namespace,
                                  event_details=True))
    ids = [h.id for h in producer.enqueue_many(tasks.noop.spec, [((), {})] * 20,
                                               CallOptions(queue="elsewhere"))]
    producer.broker.close()
    runworker("--queues", "default,elsewhere")
    wait_until(lambda: _all_written(env, ids), 60, 0.1, "the rows of the other queue")
