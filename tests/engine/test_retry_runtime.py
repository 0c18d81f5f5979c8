"""Retries at run time: where a retry waits, when it is due, and what a timeout costs."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from blitzq_django.engine import Client, MemoryBroker, RedisBroker, Retry, current_task
from blitzq_django.engine.core import record as states
from blitzq_django.engine.core.message import Message, decode

from .helpers import arun_burst, dead_letter_ids, pending_count, raw_redis, run_burst


def scheduled(broker: RedisBroker | MemoryBroker, queue: str, message_id: str
              ) -> tuple[int, Message] | None:
    """(due ms, message) of a scheduled message, read from the broker's own storage."""
    if isinstance(broker, MemoryBroker):
        held = broker._queue(queue).schedule.get(message_id)
        return None if held is None else (held[0], decode(held[1]))
    keys = broker.keys.queue(queue)
    score = raw_redis(broker).zscore(keys.schedule, message_id)
    body = raw_redis(broker).hget(keys.schedule_data, message_id)
    if score is None:
        assert body is None, "a schedule body without its schedule entry"
        return None
    assert body is not None, "a schedule entry without its body"
    return int(score), decode(body)


def stream_length(broker: RedisBroker | MemoryBroker, queue: str) -> int:
    if isinstance(broker, MemoryBroker):
        q = broker._queue(queue)
        return len(q.ready) + len(q.pending)
    return int(raw_redis(broker).xlen(broker.keys.queue(queue).stream))


def test_retry_keeps_its_id_and_waits_on_the_schedule_acked(client: Client) -> None:
    @client.task(name="later", retries=2, initial_delay=60, jitter=False)
    def later(x: int) -> None:
        raise ValueError(f"not yet {x}")

    h = later.options(queue="q2").enqueue(7)
    stats = run_burst(client, queues=("q2",))
    assert stats.retried == 1 and stats.dead_lettered == 0
    record = client.inspect(h.id, queue="q2")
    assert record is not None and record.state == states.SCHEDULED
    held = scheduled(client.broker, "q2", h.id)
    assert held is not None
    due, message = held
    assert message.id == h.id  # the retry is the same message, one attempt further
    assert message.attempt == 2 and message.args == [7] and message.queue == "q2"
    assert client.broker.scheduled_due_ms("q2", h.id) == due
    # The failed delivery was acked in the same step that scheduled the retry.
    assert pending_count(client.broker, "q2") == 0
    assert stream_length(client.broker, "q2") == 0
    assert dead_letter_ids(client.broker, "q2") == []


def test_tracked_retry_is_due_exactly_one_backoff_after_the_failure(broker: Any) -> None:
    client = Client(broker, track_state=True)

    @client.task(name="later", retries=1, initial_delay=45, jitter=False)
    def later() -> None:
        raise ValueError("try again later")

    h = later.enqueue()
    run_burst(client)
    record = client.inspect(h.id)
    assert record is not None and record.state == states.RETRYING
    assert record.attempt == 1
    assert record.error_type == "ValueError" and record.error_message == "try again later"
    assert record.finished_ms is not None
    held = scheduled(broker, "default", h.id)
    assert held is not None
    assert held[0] == record.finished_ms + 45_000
    assert pending_count(broker, "default") == 0


@pytest.mark.parametrize(("max_delay", "expected_s"), [(300.0, 30), (20.0, 20)],
                         ids=["exponential", "capped"])
def test_backoff_grows_by_factor_and_is_capped(broker: Any, max_delay: float,
                                               expected_s: int) -> None:
    client = Client(broker, track_state=True)

    @client.task(name="grow", retries=3, initial_delay=10, factor=3, max_delay=max_delay,
                 jitter=False)
    def grow() -> None:
        if current_task().attempt == 1:  # type: ignore[union-attr]
            raise Retry(delay=0)  # straight to attempt 2, whose backoff is initial * factor
        raise ValueError("second failure")

    h = grow.enqueue()
    run_burst(client)
    record = client.inspect(h.id)
    assert record is not None and record.state == states.RETRYING and record.attempt == 2
    held = scheduled(broker, "default", h.id)
    assert held is not None and held[1].attempt == 3
    assert held[0] == record.finished_ms + expected_s * 1000  # type: ignore[operator]


def test_jittered_backoff_stays_between_zero_and_the_backoff(broker: Any) -> None:
    client = Client(broker, track_state=True)

    # A day: a draw so small that the retry comes due before the burst ends is negligible.
    @client.task(name="jitter", retries=1, initial_delay=86_400, max_delay=86_400)
    def jitter(i: int) -> None:
        raise ValueError(i)

    handles = jitter.enqueue_many([(i,) for i in range(6)])
    run_burst(client)
    offsets = []
    for h in handles:
        record = client.inspect(h.id)
        assert record is not None and record.state == states.RETRYING
        held = scheduled(broker, "default", h.id)
        assert held is not None
        offsets.append(held[0] - record.finished_ms)  # type: ignore[operator]
    assert all(0 <= o <= 86_400_000 for o in offsets), offsets
    assert len(set(offsets)) > 1, offsets  # jittered, not one fixed delay


def test_per_call_backoff_overrides_the_task(broker: Any) -> None:
    client = Client(broker, track_state=True)
    max_attempts: list[int] = []

    @client.task(name="slowly", retries=0, initial_delay=1000, jitter=True)
    def slowly() -> None:
        max_attempts.append(current_task().max_attempts)  # type: ignore[union-attr]
        raise ValueError("no")

    h = slowly.options(retries=2, initial_delay=7, factor=5, max_delay=100,
                       jitter=False).enqueue()
    run_burst(client)
    assert max_attempts == [3]
    record = client.inspect(h.id)
    assert record is not None and record.state == states.RETRYING
    held = scheduled(broker, "default", h.id)
    assert held is not None
    assert held[0] == record.finished_ms + 7_000  # type: ignore[operator]
    assert held[1].policy == {"retries": 2, "initial_delay": 7, "factor": 5, "max_delay": 100,
                              "jitter": False}  # the overrides travel with the retry


def test_retry_on_retries_only_listed_errors(client: Client) -> None:
    attempts: dict[str, list[int]] = {"transient": [], "bug": [], "refused": []}

    @client.task(name="picky", retries=3, initial_delay=0, retry_on=(OSError,),
                 dont_retry_on=(ConnectionRefusedError,))
    def picky(kind: str) -> str:
        attempt = current_task().attempt  # type: ignore[union-attr]
        attempts[kind].append(attempt)
        if kind == "transient" and attempt < 3:
            raise TimeoutError("flaky network")  # an OSError
        if kind == "bug":
            raise KeyError("not an OSError")
        if kind == "refused":
            raise ConnectionRefusedError("an OSError, but excluded")
        return "ok"

    transient, bug, refused = (picky.enqueue(k) for k in ("transient", "bug", "refused"))
    run_burst(client)
    assert attempts == {"transient": [1, 2, 3], "bug": [1], "refused": [1]}
    assert transient.result(timeout=5) == "ok"
    for h, error_type in ((bug, "KeyError"), (refused, "ConnectionRefusedError")):
        record = client.get_result(h.id, 5)
        assert record.state == states.DEAD_LETTERED
        assert record.reason == "not retryable"
        assert record.error_type == error_type


def test_raise_retry_delay_overrides_backoff_and_jitter(broker: Any) -> None:
    client = Client(broker, track_state=True)

    @client.task(name="asked", retries=1, initial_delay=0.001, jitter=True)
    def asked() -> None:
        raise Retry(delay=45, reason="rate limited")

    h = asked.enqueue()
    run_burst(client)
    record = client.inspect(h.id)
    assert record is not None and record.state == states.RETRYING
    assert record.error_type == "Retry" and record.error_message == "rate limited"
    held = scheduled(broker, "default", h.id)
    assert held is not None
    assert held[0] == record.finished_ms + 45_000  # type: ignore[operator]


def test_raise_retry_without_retries_left_is_dead_lettered(client: Client) -> None:
    @client.task(name="once", retries=0)
    def once() -> None:
        raise Retry(delay=0)

    h = once.enqueue()
    run_burst(client)
    record = client.get_result(h.id, 5)
    assert record.state == states.DEAD_LETTERED
    assert record.reason == "retries exhausted"
    assert scheduled(client.broker, "default", h.id) is None


@pytest.mark.asyncio
async def test_async_timeout_fails_the_attempt_and_is_retried(client: Client) -> None:
    attempts: list[int] = []
    cancelled: list[int] = []

    @client.task(name="slow", timeout=0.1, retries=1, initial_delay=0)
    async def slow() -> None:
        import asyncio

        attempts.append(current_task().attempt)  # type: ignore[union-attr]
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(current_task().attempt)  # type: ignore[union-attr]
            raise

    h = slow.enqueue()
    stats = await arun_burst(client)
    assert attempts == [1, 2]
    assert cancelled == [1, 2]  # cancelled at the timeout, not left running
    assert stats.retried == 1 and stats.dead_lettered == 1
    record = await client.aget_result(h.id, 5)
    assert record.state == states.DEAD_LETTERED and record.attempt == 2
    assert record.error_type == "TimeoutError"


def test_thread_timeout_keeps_the_slot_until_the_thread_returns(broker: Any) -> None:
    client = Client(broker)
    events: list[str] = []
    times: dict[str, float] = {}

    @client.task(name="overrun", timeout=0.1, dead_letter=False)
    def overrun() -> str:
        times["overrun"] = time.monotonic()
        events.append("overrun started")
        threading.Event().wait(0.4)  # one blocking call well past the timeout
        events.append("overrun went on")  # never: the interrupt lands as the call returns
        return "too late"

    @client.task(name="quick")
    def quick() -> str:
        times["quick"] = time.monotonic()
        events.append("quick started")
        return "quick"

    slow_h = overrun.enqueue()
    quick_h = quick.enqueue()
    run_burst(client, concurrency=1)
    # concurrency=1: the overrunning thread held the only slot until it returned.
    assert events == ["overrun started", "quick started"]
    assert times["quick"] - times["overrun"] >= 0.4
    record = client.get_result(slow_h.id, 5)
    assert record.state == states.FAILED
    assert record.error_type == "TimeLimitExceeded"
    assert record.result is None  # the late value is not taken as a success
    assert quick_h.result(timeout=5) == "quick"


def test_thread_timeout_is_retried_per_policy(client: Client) -> None:
    attempts: list[int] = []

    @client.task(name="overrun", timeout=0.1, retries=1, initial_delay=0)
    def overrun() -> str:
        attempt = current_task().attempt  # type: ignore[union-attr]
        attempts.append(attempt)
        if attempt == 1:
            threading.Event().wait(0.3)
        return f"attempt {attempt}"

    h = overrun.enqueue()
    stats = run_burst(client)
    assert attempts == [1, 2]
    assert stats.retried == 1
    assert h.result(timeout=5) == "attempt 2"


@pytest.mark.parametrize("kind", ["swallows-cancel", "blocks-the-loop"])
def test_async_task_that_overruns_its_timeout_fails_anyway(client: Client, kind: str) -> None:
    # The cancellation at the timeout may not end the attempt: task code that catches
    # CancelledError (a cleanup that returns a fallback), or code that never yields to the
    # loop. The attempt still took longer than its timeout: it fails, as a thread task does.
    import asyncio
    import time

    @client.task(name="overrun", timeout=0.1, dead_letter=False)
    async def overrun() -> str:
        if kind == "swallows-cancel":
            try:
                await asyncio.sleep(5)  # (noqa: sleep) the task body: work the timeout cuts short
            except asyncio.CancelledError:
                return "fallback"
        else:
            time.sleep(0.3)  # noqa: ASYNC251 - blocking work in an async task (noqa: sleep)
        return "late"

    # Several, one after the other: a cancellation caught right at the timeout must be seen
    # as a timeout every time, not only when the clock's millisecond happens to tick over.
    handles = overrun.enqueue_many([()] * (8 if kind == "swallows-cancel" else 1))
    run_burst(client, concurrency=1)
    records = [client.get_result(h.id, 5) for h in handles]
    assert [(r.state, r.error_type) for r in records] == [
        (states.FAILED, "TimeoutError")] * len(handles), [
        (r.state, r.finished_ms - r.started_ms) for r in records]  # type: ignore[operator]


def test_thread_timeout_counts_from_the_start_of_the_attempt_not_its_queueing(
        client: Client) -> None:
    # More running attempts than pool threads (the default on a small machine: concurrency
    # 100, min(100, cpu * 4 + 4) threads): an attempt waiting for a free thread has not
    # started; its timeout must not run out while it waits.
    @client.task(name="steady", timeout=0.5)
    def steady(i: int) -> int:
        threading.Event().wait(0.3)  # each attempt well within its timeout
        return i

    handles = steady.enqueue_many([(i,) for i in range(3)])
    run_burst(client, concurrency=4, threads=1)
    records = [client.get_result(h.id, 5) for h in handles]
    assert [r.state for r in records] == [states.SUCCEEDED] * 3, [
        (r.state, r.error_type) for r in records]
    for r in records:
        assert r.finished_ms - r.started_ms < 500, r  # type: ignore[operator]


def test_retry_on_accepts_a_single_exception_class(client: Client) -> None:
    attempts: list[int] = []

    @client.task(name="one", retries=1, initial_delay=0, retry_on=ConnectionError,
                 dont_retry_on=ConnectionRefusedError)
    def one() -> str:
        attempts.append(current_task().attempt)  # type: ignore[union-attr]
        if len(attempts) == 1:
            raise ConnectionResetError("transient")
        return "ok"

    h = one.enqueue()
    run_burst(client)
    assert h.result(timeout=5) == "ok"
    assert attempts == [1, 2]


@pytest.mark.parametrize("options", [{"factor": 0.5}, {"initial_delay": -1},
                                     {"max_delay": -1}, {"jitter": "yes"}],
                         ids=["factor", "initial_delay", "max_delay", "jitter"])
def test_invalid_per_call_backoff_is_refused_at_enqueue(options: dict[str, Any]) -> None:
    # Otherwise the message is accepted, and a worker dead-letters it as malformed.
    from blitzq_django.engine import ConfigurationError

    client = Client(MemoryBroker())

    @client.task(name="t", retries=1)
    def t() -> None:
        return None

    with pytest.raises(ConfigurationError):
        t.options(**options).enqueue()


def test_per_call_timeout_applies_to_async_tasks(client: Client) -> None:
    import asyncio

    @client.task(name="patient", timeout=30, dead_letter=False)
    async def patient() -> str:
        await asyncio.sleep(5)  # (noqa: sleep) the task body: work the timeout cuts short
        return "done"

    h = patient.options(timeout=0.1).enqueue()
    run_burst(client)
    record = client.get_result(h.id, 5)
    assert record.state == states.FAILED and record.error_type == "TimeoutError"
