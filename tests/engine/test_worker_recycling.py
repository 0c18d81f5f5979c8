"""Recycling: a worker stops by itself after max_tasks settlements or above max_memory_mb."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from blitzq_django.engine import Client, Worker, current_task
from blitzq_django.engine.supervisor import EXIT_RECYCLE, Supervisor

from ..support.waiting import wait_until
from .helpers import FAST, pending_count, ready_message_ids


def account(client: Client, ids: list[str]) -> tuple[set[str], list[str]]:
    """(ids with a final record, ids waiting on the queue); checks nothing is lost."""
    done = {i for i in ids if (r := client.inspect(i)) is not None and r.is_final}
    waiting = ready_message_ids(client.broker, "default")
    assert pending_count(client.broker, "default") == 0
    assert len(waiting) == len(set(waiting)), "a message is on the queue twice"
    assert done.isdisjoint(waiting), "a finished message is also back on the queue"
    assert done | set(waiting) == set(ids), "a message was lost"
    return done, waiting


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["thread", "async"])
async def test_max_tasks_stops_the_worker_and_loses_nothing(client: Client, kind: str) -> None:
    runs: collections.Counter[str] = collections.Counter()

    if kind == "thread":
        @client.task(name="t")
        def t(i: int) -> int:
            runs[current_task().id] += 1  # type: ignore[union-attr]
            return i
    else:
        @client.task(name="t")
        async def t(i: int) -> int:
            runs[current_task().id] += 1  # type: ignore[union-attr]
            await asyncio.sleep(0)  # (noqa: sleep) a task body that yields once
            return i

    ids = [h.id for h in t.enqueue_many([(i,) for i in range(40)])]
    worker = Worker(client, **{**FAST, "max_tasks": 10, "concurrency": 4})
    # Not burst, never stopped from outside: it must return by itself.
    stats = await asyncio.wait_for(worker.run(), 10)
    done, waiting = account(client, ids)
    assert stats.succeeded == len(done)
    # It stopped at the 10th settlement, finishing only what it already held (settlements
    # are written in batches, so the 10th may share its write with a few more).
    assert 10 <= stats.succeeded <= 10 + worker.config.prefetch_count
    assert len(waiting) == 40 - stats.succeeded
    assert all(n == 1 for n in runs.values()) and len(runs) == stats.succeeded


@pytest.mark.asyncio
async def test_max_tasks_counts_failures_too(client: Client) -> None:
    @client.task(name="bad", retries=1, initial_delay=0)
    async def bad(i: int) -> None:
        raise ValueError(i)

    bad.enqueue_many([(i,) for i in range(10)])
    worker = Worker(client, **{**FAST, "max_tasks": 3, "concurrency": 1})
    stats = await asyncio.wait_for(worker.run(), 10)
    assert 3 <= stats.retried + stats.dead_lettered <= 4


@pytest.mark.asyncio
async def test_max_memory_stops_the_worker_promptly(client: Client) -> None:
    never = asyncio.Event()

    @client.task(name="hang")
    async def hang(i: int) -> None:
        await never.wait()

    ids = [h.id for h in hang.enqueue_many([(i,) for i in range(5)])]
    worker = Worker(client, **{**FAST, "max_memory_mb": 1, "shutdown_timeout": 0.3})
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(worker.run(), 10)
    assert loop.time() - started < 5.0
    done, waiting = account(client, ids)
    assert done == set() and sorted(waiting) == sorted(ids)  # requeued, not lost


def test_supervisor_replaces_children_that_exit(tmp_path: Any) -> None:
    # Children that recycle (exit EXIT_RECYCLE) at once are replaced; SIGTERM ends the
    # supervisor.
    marker = tmp_path / "starts"
    child = ("import os, sys\n"
             f"open({str(marker)!r}, 'a').write('x')\n"
             f"sys.exit({EXIT_RECYCLE})\n")
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "from blitzq_django.engine.supervisor import Supervisor\n"
        f"s = Supervisor([sys.executable, '-c', {child!r}], 2, shutdown_timeout=2)\n"
        "code = s.run()\n"
        "print('restarts', s.restarts, flush=True)\n"
        "sys.exit(code)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        def restarted() -> bool:
            assert process.poll() is None, process.communicate()
            return marker.exists() and len(marker.read_text()) >= 4  # 2 starts + 2 restarts

        wait_until(restarted, 15, interval=0.05, message="children to be restarted")
        process.terminate()
        out, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "recycled" in err
    restarts = int(out.split()[-1])
    assert restarts >= 2


def test_supervisor_rejects_zero_processes() -> None:
    with pytest.raises(ValueError):
        Supervisor([sys.executable, "-c", "pass"], 0)


def test_supervisor_starts_no_child_after_it_was_told_to_stop(tmp_path: Any) -> None:
    # A crash-looping child makes the supervisor back off before the next start. A SIGTERM
    # arriving during that back-off must not be followed by a new child that never gets
    # the signal (the supervisor would then wait for it, and kill it).
    marker = tmp_path / "starts"
    child = (
        "import os, signal, sys, threading\n"
        f"path = {str(marker)!r}\n"
        "with open(path, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
        "if len(open(path).read().split()) < 3:\n"
        "    sys.exit(1)  # crash at once: the supervisor backs off\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        "threading.Event().wait(60)\n"
    )
    script = (
        "import sys\n"
        "from blitzq_django.engine.supervisor import Supervisor\n"
        f"sys.exit(Supervisor([sys.executable, '-c', {child!r}], 1, shutdown_timeout=1).run())\n"
    )
    log = tmp_path / "supervisor.log"
    with open(log, "w") as out:
        # A session of its own: the cleanup below can end the supervisor and its children.
        process = subprocess.Popen([sys.executable, "-c", script], stdout=out, stderr=out,
                                   start_new_session=True)
    try:
        def second_crash_reaped() -> bool:
            assert process.poll() is None, log.read_text()
            pids = marker.read_text().split() if marker.exists() else []
            # Reaped: the supervisor saw the death and is sleeping before the third start.
            return len(pids) == 2 and not os.path.exists(f"/proc/{pids[1]}")

        wait_until(second_crash_reaped, 10, interval=0.005, message="the second crash")
        os.kill(process.pid, signal.SIGTERM)

        def settled() -> bool:  # stopped, or (the bug) started another child
            return process.poll() is not None or len(marker.read_text().split()) > 2

        wait_until(settled, 10, interval=0.01, message="the supervisor to stop")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the group this test started
        process.wait(5)
    starts = marker.read_text().split()
    assert len(starts) == 2, f"a child was started after SIGTERM: {starts}"
    assert process.returncode == 1  # the worst exit code of its children
