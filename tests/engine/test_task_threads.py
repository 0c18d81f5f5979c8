"""The threads that run `def` attempts (engine/worker/threads.py): as many as blocking
work needs, up to the worker's thread count; every attempt concluded, whatever it raises."""

from __future__ import annotations

import threading
from typing import Any

from blitzq_django.engine import Client
from blitzq_django.engine.core import record as states

from .helpers import pending_count, run_burst


def test_blocking_tasks_get_a_thread_each_up_to_the_thread_count(client: Client) -> None:
    # Twelve attempts that each wait for all twelve: they finish only if twelve threads
    # run at once (a pool that grew by too little would leave the barrier short).
    barrier = threading.Barrier(12, timeout=10)
    names: set[str] = set()

    @client.task(name="waits_for_all")
    def waits_for_all() -> None:
        names.add(threading.current_thread().name)
        barrier.wait()

    for _ in range(12):
        waits_for_all.enqueue()
    stats = run_burst(client, concurrency=12, threads=12)
    assert stats.succeeded == 12 and stats.failed == 0
    assert len(names) == 12


def test_more_blocking_tasks_than_threads_wait_for_one(client: Client) -> None:
    running, peak = [0], [0]
    lock = threading.Lock()
    release = threading.Event()

    @client.task(name="holds")
    def holds() -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 3:
                release.set()
        release.wait(10)
        with lock:
            running[0] -= 1

    for _ in range(9):
        holds.enqueue()
    stats = run_burst(client, concurrency=9, threads=3)
    assert stats.succeeded == 9
    assert peak[0] == 3  # never more than the thread count at once


def test_system_exit_and_keyboard_interrupt_fail_the_attempt_not_the_worker(
        client: Client) -> None:
    @client.task(name="exits")
    def exits() -> None:
        raise SystemExit(3)

    @client.task(name="interrupts")
    def interrupts() -> None:
        raise KeyboardInterrupt

    @client.task(name="fine")
    def fine() -> str:
        return "ran"

    handles: list[Any] = [exits.enqueue(), interrupts.enqueue(), fine.enqueue()]
    stats = run_burst(client, concurrency=1, threads=1)
    assert stats.dead_lettered == 2 and stats.succeeded == 1
    assert client.get_result(handles[0].id, 5).error_type == "SystemExit"
    assert client.get_result(handles[1].id, 5).state == states.DEAD_LETTERED
    assert client.get_result(handles[2].id, 5).result == "ran"
    assert pending_count(client.broker, "default") == 0
