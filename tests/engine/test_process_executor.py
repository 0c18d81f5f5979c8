"""executor="process": `def` tasks in the worker's pool of child processes (processes.py),
with a real Redis and a real Worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from blitzq_django.engine import Client, Worker
from blitzq_django.engine.core.record import Record
from blitzq_django.engine.errors import ConfigurationError
from blitzq_django.engine.worker.processes import ProcessPool

from ..support.waiting import await_until, wait_until
from . import process_tasks
from .helpers import FAST, arun_burst


@pytest.fixture
def client(redis_broker: Any) -> Client:
    return Client(redis_broker)


def task(client: Client, func: Any, **options: Any) -> Any:
    """Register a function of process_tasks (its module-level name stays the function)."""
    return client.task(func, name=func.__name__, executor="process", **options)


def final(client: Client, message_id: str) -> Record:
    record = client.inspect(message_id)
    assert record is not None and record.is_final, record
    return record


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 0)
            return True
        return False


@contextlib.asynccontextmanager
async def serving(client: Client, **options: Any) -> Any:
    worker = Worker(client, **{**FAST, "processes": 2, **options})
    running = asyncio.create_task(worker.run())
    await await_until(lambda: worker._loop is not None, 5, message="worker to start")
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(running, 20)


async def result_of(client: Client, message_id: str, timeout: float = 20) -> Record:
    return await await_until(lambda: (r := client.inspect(message_id)) is not None
                             and r.is_final and r, timeout, message=f"{message_id} to end")


# -- results and failures ----------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_result_comes_back_from_a_child(client: Client) -> None:
    work = task(client, process_tasks.pid_and_sum)
    handle = work.enqueue(1000)
    stats = await arun_burst(client, processes=2)
    record = final(client, handle.id)
    assert record.state == "succeeded" and stats.succeeded == 1
    pid, total = record.result
    assert total == sum(range(1000)) and pid != os.getpid()


@pytest.mark.asyncio
async def test_an_exception_is_retried_then_dead_lettered(client: Client) -> None:
    fail = task(client, process_tasks.fail, retries=2, initial_delay=0, jitter=False)
    handle = fail.enqueue("boom")
    stats = await arun_burst(client, processes=1)
    record = final(client, handle.id)
    assert record.state == "dead_lettered" and record.attempt == 3
    assert record.error_type == "ValueError" and record.error_message == "boom"
    assert stats.retried == 2 and stats.dead_lettered == 1


@pytest.mark.asyncio
async def test_an_unpicklable_exception_comes_back_as_its_description(client: Client) -> None:
    fail = task(client, process_tasks.fail_unpicklably, retries=0)
    handle = fail.enqueue("no pickle")
    await arun_burst(client, processes=1)
    record = final(client, handle.id)
    assert record.error_type == "ChildProcessError"
    assert "Unpicklable: no pickle" in (record.error_message or "")


@pytest.mark.asyncio
async def test_the_timeout_kills_the_child_and_a_new_one_serves(client: Client,
                                                                tmp_path: Path) -> None:
    hang = task(client, process_tasks.hang, timeout=0.5, retries=0)
    work = task(client, process_tasks.pid_and_sum)
    marker = tmp_path / "pid"
    async with serving(client, processes=1) as worker:
        stuck = hang.enqueue(str(marker))
        record = await result_of(client, stuck.id)
        assert record.state == "dead_lettered" and record.error_type == "TimeoutError"
        assert "killed" in (record.error_message or "")
        killed = int(marker.read_text())
        await await_until(lambda: not alive(killed), 5, message="the child to be gone")
        after = await result_of(client, work.enqueue(10).id)
        assert after.state == "succeeded" and after.result[0] != killed
        assert worker.processes.pids() == [after.result[0]]


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["exit", "sigkill"])
async def test_a_child_death_fails_the_attempt_and_the_next_task_runs(client: Client,
                                                                      how: str) -> None:
    die = task(client, process_tasks.die, retries=1, initial_delay=0, jitter=False)
    work = task(client, process_tasks.pid_and_sum)
    died = die.enqueue(how)
    async with serving(client, processes=1):
        record = await result_of(client, died.id)
        # Retried once per the policy, then dead-lettered; the worker is still serving.
        assert record.state == "dead_lettered" and record.attempt == 2
        assert record.error_type == "ChildProcessDied"
        assert ("exit code 7" if how == "exit" else "SIGKILL") in (record.error_message or "")
        after = await result_of(client, work.enqueue(10).id)
        assert after.state == "succeeded"


@pytest.mark.asyncio
async def test_children_are_recycled_after_max_tasks_per_child(client: Client) -> None:
    work = task(client, process_tasks.pid_and_sum)
    handles = [work.enqueue(i) for i in range(7)]
    await arun_burst(client, processes=1, concurrency=1, max_tasks_per_child=2)
    pids = [final(client, h.id).result[0] for h in handles]
    assert len(set(pids)) == 4  # 2 + 2 + 2 + 1
    assert all(pids.count(pid) <= 2 for pid in pids)
    assert pids == sorted(pids, key=pids.index)  # each child serves consecutive calls


@pytest.mark.asyncio
async def test_two_tasks_run_in_parallel_in_two_children(client: Client,
                                                         tmp_path: Path) -> None:
    meet = task(client, process_tasks.meet, retries=0)
    handles = [meet.enqueue(str(tmp_path), 2) for _ in range(2)]
    await arun_burst(client, processes=2)
    records = [final(client, h.id) for h in handles]
    assert [r.state for r in records] == ["succeeded"] * 2, records
    assert len({r.result for r in records}) == 2 and os.getpid() not in {r.result
                                                                         for r in records}


# -- the pool's life ----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_no_pool_without_process_tasks(client: Client) -> None:
    @client.task(name="plain")
    def plain() -> int:
        return 1

    plain.enqueue()
    worker = Worker(client, burst=True, **FAST)
    await asyncio.wait_for(worker.run(), 10)
    assert worker.stats.succeeded == 1 and not worker.processes.started


@contextlib.asynccontextmanager
async def started(client: Client, **options: Any) -> Any:
    """A worker on this loop; the test stops it. Stopped here if the test fails first."""
    worker = Worker(client, **{**FAST, **options})
    running = asyncio.create_task(worker.run())
    try:
        yield worker, running
    finally:
        if not running.done():
            worker.stop()
            await asyncio.wait_for(running, 20)


@pytest.mark.asyncio
async def test_a_graceful_stop_waits_for_the_call_and_leaves_no_child(client: Client,
                                                                      tmp_path: Path) -> None:
    wait_for = task(client, process_tasks.wait_for, retries=0)
    began, go = tmp_path / "started", tmp_path / "go"
    handle = wait_for.enqueue(str(began), str(go))
    async with started(client, processes=2) as (worker, running):
        await await_until(began.exists, 20, message="the call to start")
        # The second child may still be starting on a loaded machine: wait for it.
        def both() -> list[int] | None:
            pids = worker.processes.pids()
            return pids if len(pids) == 2 else None

        children = await await_until(both, 20, message="both children to be up")
        assert int(began.read_text()) in children
        worker.stop()
        go.write_text("")  # the call ends after stop(): the worker waits for it
        await asyncio.wait_for(running, 20)
    record = final(client, handle.id)
    assert record.state == "succeeded" and record.result == int(began.read_text())
    assert not [pid for pid in worker.processes.started_pids if alive(pid)]
    assert worker.processes.pids() == []


@pytest.mark.asyncio
async def test_a_call_still_running_at_shutdown_is_requeued_and_its_child_killed(
        client: Client, tmp_path: Path) -> None:
    hang = task(client, process_tasks.hang, retries=0)
    marker = tmp_path / "pid"
    handle = hang.enqueue(str(marker))
    async with started(client, processes=1, shutdown_timeout=0.2) as (worker, running):
        await await_until(marker.exists, 20, message="the call to start")
        child = int(marker.read_text())
        worker.stop()
        await asyncio.wait_for(running, 20)
    assert worker.stats.requeued == 1
    assert not alive(child)
    record = client.inspect(handle.id)
    assert record is None or not record.is_final


def test_the_pool_shuts_down_without_orphans_from_a_subprocess(tmp_path: Path,
                                                              redis_url: str,
                                                              namespace: str) -> None:
    """A whole worker process: after it exits, none of its children is left."""
    import subprocess
    import sys

    script = tmp_path / "serve.py"
    pids = tmp_path / "pids"
    script.write_text(f"""
import asyncio, sys
from blitzq_django.engine import Client, RedisBroker, Worker
from tests.engine import process_tasks

async def main():
    client = Client(RedisBroker({redis_url!r}, namespace={namespace!r}))
    work = client.task(process_tasks.pid_and_sum, name="pid_and_sum", executor="process")
    for i in range(4):
        work.enqueue(i)
    worker = Worker(client, burst=True, processes=3, block_timeout=0.05)
    await worker.run(close_broker=True)
    open({str(pids)!r}, "w").write(" ".join(map(str, worker.processes.started_pids)))

if __name__ == "__main__":
    asyncio.run(main())
""")
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, str(script)], cwd=root, check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(root)})
    seen = [int(p) for p in pids.read_text().split()]
    assert len(seen) == 3
    wait_until(lambda: not [p for p in seen if alive(p)], 5, message="no child left")


# -- declaration ------------------------------------------------------------------------


async def _async_task() -> None:
    return None


def test_decoration_refuses_what_a_child_cannot_import(client: Client) -> None:
    def local() -> None:
        return None

    value = 3

    def closure() -> int:
        return value

    for func, said in [(lambda: None, "lambda"), (local, "closure"),
                       (closure, "closure"), (_async_task, "async def"),
                       (print, "not a plain function")]:
        with pytest.raises(ConfigurationError, match=f"executor='process'.*{said}"):
            client.task(func, name="x", executor="process")
    with pytest.raises(ConfigurationError, match="executor must be one of 'thread', "
                                                 "'process', not 'fork'"):
        client.task(process_tasks.fail, executor="fork")
    # A thread task may be anything callable; the default is "thread".
    assert client.task(local, name="y").spec.executor == "thread"


def test_pool_size_is_validated() -> None:
    for bad in (0, -1, True, 2.0, "2"):
        with pytest.raises(ConfigurationError, match="processes must be an integer"):
            ProcessPool(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_tasks_per_child"):
        ProcessPool(1, max_tasks_per_child=0)
    assert ProcessPool().size == (os.cpu_count() or 1)
