"""Worker listeners (engine/worker/listeners.py): told of every start and every written
settlement, on the thread pool, in order; a raising listener changes nothing; a
worker without listeners runs the plain executor."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

from blitzq_django.engine import Client
from blitzq_django.engine.brokers.base import RETRY, Delivery, Settlement
from blitzq_django.engine.worker.execution import Executor
from blitzq_django.engine.worker.inflight import Held, InFlight, QueueSlots
from blitzq_django.engine.worker.listeners import (
    Listener,
    Notifier,
    ObservedExecutor,
    Settled,
    Started,
)

from ..support.waiting import await_until
from .helpers import background_worker, run_burst


class Recorder(Listener):
    def __init__(self) -> None:
        self.events: list[Started | Settled] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def started(self, event: Started) -> None:
        self._add(event)

    def settled(self, event: Settled) -> None:
        self._add(event)

    def _add(self, event: Started | Settled) -> None:
        with self._lock:
            self.events.append(event)
            self.threads.add(threading.current_thread().name)

    def of(self, message_id: str) -> list[str]:
        with self._lock:
            return [e.state if isinstance(e, Settled) else "started" for e in self.events
                    if (e.message_id if isinstance(e, Settled) else e.message.id)
                    == message_id]


class Raising(Listener):
    def started(self, event: Started) -> None:
        raise RuntimeError("listener bug")

    def settled(self, event: Settled) -> None:
        raise RuntimeError("listener bug")


def test_every_transition_in_order_on_the_pool(client: Client) -> None:
    @client.task(name="double")
    def double(x: int) -> int:
        return x * 2

    @client.task(name="adouble")
    async def adouble(x: int) -> int:
        return x * 2

    @client.task(name="flaky", retries=1, initial_delay=0, jitter=False)
    def flaky() -> None:
        raise ValueError("no")

    recorder = Recorder()
    handles = [double.enqueue(1), adouble.enqueue(2), flaky.enqueue()]
    run_burst(client, listeners=[Raising(), recorder])  # a raising one first
    ok, aok, bad = (h.id for h in handles)
    assert recorder.of(ok) == ["started", "succeeded"]
    assert recorder.of(aok) == ["started", "succeeded"]
    assert recorder.of(bad) == ["started", "retrying", "started", "dead_lettered"]
    assert recorder.threads and all(t.startswith("blitzq") for t in recorder.threads)
    settled = {e.message_id: e for e in recorder.events
               if isinstance(e, Settled) and e.state != "retrying"}
    assert (settled[ok].result, settled[aok].result) == (2, 4)
    assert settled[ok].duration_ms is not None and settled[ok].worker
    dead = settled[bad]
    assert isinstance(dead.error, ValueError) and dead.attempt == 2
    assert dead.failure.error_type == "ValueError" and dead.letter.reason
    retry = next(e for e in recorder.events if isinstance(e, Settled) and e.state == "retrying")
    assert retry.due_ms and isinstance(retry.error, ValueError)
    # The raising listener changed nothing.
    assert handles[0].result(timeout=5) == 2


def test_without_listeners_the_plain_executor_runs(client: Client) -> None:
    async def main() -> tuple[type, type]:
        async with background_worker(client) as plain:
            pass
        async with background_worker(client, listeners=[Recorder()]) as observed:
            pass
        await client.broker.aclose()  # this loop's connections
        return type(plain.executor), type(observed.executor)

    assert asyncio.run(main()) == (Executor, ObservedExecutor)


def test_revoked_before_start_settles_cancelled_without_started(client: Client) -> None:
    @client.task(name="never")
    def never() -> None:
        raise AssertionError("must not run")

    handle = never.enqueue()
    assert handle.cancel().outcome
    recorder = Recorder()
    run_burst(client, listeners=[recorder])
    assert recorder.of(handle.id) == ["cancelled"]


def test_events_wait_for_a_slow_listener_not_the_tasks(client: Client) -> None:
    release = threading.Event()

    class Slow(Recorder):
        def started(self, event: Started) -> None:
            release.wait(10)
            super().started(event)

    @client.task(name="quick")
    async def quick(i: int) -> int:
        return i

    slow = Slow()
    handles = [quick.enqueue(i) for i in range(5)]

    async def main() -> None:
        async with background_worker(client, listeners=[slow]):
            for handle in handles:  # every task ends while the listener still blocks
                assert await handle.aresult(timeout=5) == handle_index(handles, handle)
            assert slow.events == []
            release.set()
            await await_until(lambda: len(slow.events) == 10, message="all events")
        await client.broker.aclose()  # this loop's connections

    asyncio.run(main())
    for handle in handles:
        assert slow.of(handle.id) == ["started", "succeeded"]


def handle_index(handles: list[Any], handle: Any) -> int:
    return handles.index(handle)


@pytest.mark.asyncio
async def test_a_retry_started_before_its_settlement_is_reported_is_told_after_it() -> None:
    """Fast mode, no retry delay: the write that re-queues the message can hand it to
    this worker's fetcher before the flusher reports that write. The second start must
    still reach listeners after the first attempt's "retrying"."""
    recorder = Recorder()
    with ThreadPoolExecutor(1) as pool:
        notifier = Notifier(name="w", listeners=[recorder], pool=pool, inflight=InFlight(2))
        message = SimpleNamespace(id="m1")
        first, second = (_held(message, entry) for entry in ("1-0", "2-0"))
        notifier.started(first)
        notifier.concluded(first, None, ValueError("no"))
        notifier.started(second)  # fetched and started before the settlement is reported
        settled = notifier.wrap(lambda settlement, ok: None)
        settled(Settlement(first.delivery, RETRY, "m1", state="retrying"), True)
        await notifier.drain(5)
    assert recorder.of("m1") == ["started", "retrying", "started"]


def _held(message: Any, entry: str) -> Held:
    delivery = Delivery("default", entry, b"")
    held = Held(delivery, delivery.key, 0.0, QueueSlots("default", 1))
    held.message, held.started_ms = message, 1
    return held
