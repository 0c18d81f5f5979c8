"""What happens to messages that fail, cannot be read, or name no known task."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from blitzq_django.engine import Client, DeadLetter, RedisBroker, Retry, current_task
from blitzq_django.engine.core import record as states
from blitzq_django.engine.core.message import Message, encode, pack

from .helpers import dead_letter_ids, inject, pending_count, raw_redis, run_burst


def dead_letter(client: Client, message_id: str, queue: str = "default") -> DeadLetter:
    body = client.broker.dead_letter(queue, message_id)
    assert body is not None, f"{message_id} is not dead-lettered on {queue}"
    return DeadLetter.from_bytes(body)


def test_failing_task_is_retried_then_dead_lettered(client: Client) -> None:
    attempts: list[int] = []

    @client.task(name="flaky", retries=2, initial_delay=0)
    def flaky() -> None:
        task = current_task()
        assert task is not None
        attempts.append(task.attempt)
        assert task.max_attempts == 3
        raise ValueError(f"attempt {task.attempt} failed")

    h = flaky.enqueue()
    stats = run_burst(client)
    assert attempts == [1, 2, 3]
    assert stats.retried == 2 and stats.dead_lettered == 1
    record = client.get_result(h.id, 5)
    assert record.state == states.DEAD_LETTERED
    assert record.reason == "retries exhausted"
    assert record.attempt == 3
    assert record.error_type == "ValueError"
    assert record.error_message == "attempt 3 failed"
    assert record.traceback and "ValueError: attempt 3 failed" in record.traceback
    assert "flaky" in record.traceback  # the frame of the task itself
    letter = dead_letter(client, h.id)
    assert letter.reason == "retries exhausted" and letter.attempt == 3
    assert letter.task == "flaky"
    assert letter.message is not None and letter.message.id == h.id
    assert dead_letter_ids(client.broker, "default") == [h.id]
    assert pending_count(client.broker, "default") == 0


def test_async_task_retries_count_attempts(client: Client) -> None:
    attempts: list[int] = []

    @client.task(name="aflaky", retries=1, initial_delay=0)
    async def aflaky() -> str:
        task = current_task()
        assert task is not None
        attempts.append(task.attempt)
        if task.attempt == 1:
            raise ConnectionError("transient")
        return "second time lucky"

    h = aflaky.enqueue()
    run_burst(client)
    assert attempts == [1, 2]
    record = client.get_result(h.id, 5)
    assert record.state == states.SUCCEEDED and record.attempt == 2
    assert record.result == "second time lucky"


def test_per_call_retries_override_the_task(client: Client) -> None:
    attempts: list[int] = []

    @client.task(name="t", retries=0, initial_delay=0)
    def t() -> None:
        attempts.append(current_task().attempt)  # type: ignore[union-attr]
        raise ValueError("no")

    t.options(retries=2).enqueue()
    run_burst(client)
    assert attempts == [1, 2, 3]


def test_dead_letter_false_records_failed(client: Client) -> None:
    @client.task(name="quietly", retries=1, initial_delay=0, dead_letter=False)
    def quietly() -> None:
        raise KeyError("missing")

    h = quietly.enqueue()
    stats = run_burst(client)
    record = client.get_result(h.id, 5)
    assert record.state == states.FAILED
    assert record.attempt == 2
    assert record.error_type == "KeyError"
    assert record.traceback and "KeyError" in record.traceback
    assert stats.failed == 1 and stats.dead_lettered == 0
    assert client.broker.dead_letter("default", h.id) is None
    assert dead_letter_ids(client.broker, "default") == []


def test_raise_retry_counts_toward_the_limit(client: Client) -> None:
    attempts: list[int] = []

    @client.task(name="again", retries=2)
    def again() -> None:
        attempts.append(current_task().attempt)  # type: ignore[union-attr]
        raise Retry(delay=0, reason="not yet")

    h = again.enqueue()
    run_burst(client)
    assert attempts == [1, 2, 3]
    record = client.get_result(h.id, 5)
    assert record.state == states.DEAD_LETTERED
    assert record.reason == "retries exhausted"
    assert record.error_type == "Retry"
    assert record.error_message == "not yet"


def test_not_retryable_error_is_dead_lettered_at_once(client: Client) -> None:
    attempts: list[int] = []

    @client.task(name="strict", retries=5, initial_delay=0, dont_retry_on=(TypeError,))
    def strict() -> None:
        attempts.append(1)
        raise TypeError("bad input")

    h = strict.enqueue()
    run_burst(client)
    assert attempts == [1]
    record = client.get_result(h.id, 5)
    assert record.state == states.DEAD_LETTERED
    assert record.reason == "not retryable"


@pytest.mark.asyncio
async def test_async_task_timeout(client: Client) -> None:
    never = asyncio.Event()
    loop = asyncio.get_running_loop()

    @client.task(name="slow", timeout=0.2)
    async def slow() -> None:
        await never.wait()

    h = slow.enqueue()
    started = loop.time()
    from .helpers import arun_burst

    await arun_burst(client)
    assert loop.time() - started < 3.0
    record = await client.aget_result(h.id, 5)
    assert record.state == states.DEAD_LETTERED
    assert record.error_type == "TimeoutError"


def test_per_call_timeout_overrides_the_task(client: Client) -> None:
    release = threading.Event()

    @client.task(name="slow", timeout=30)
    def slow() -> None:
        release.wait(0.5)

    h = slow.options(timeout=0.1).enqueue()
    run_burst(client)
    record = client.get_result(h.id, 5)
    assert record.state == states.DEAD_LETTERED
    assert record.error_type == "TimeLimitExceeded"  # a TimeoutError raised in its thread


def test_malformed_messages_are_dead_lettered_and_the_worker_goes_on(client: Client) -> None:
    runs: list[int] = []

    @client.task(name="good")
    def good(i: int) -> int:
        runs.append(i)
        return i

    first = good.enqueue(1)
    inject(client.broker, "default", b"\xc1 not msgpack at all")
    inject(client.broker, "default", pack([1, "half-a-message", "good"]))
    last = good.enqueue(2)
    stats = run_burst(client)
    assert sorted(runs) == [1, 2]
    assert first.result(timeout=5) == 1 and last.result(timeout=5) == 2
    assert stats.dead_lettered == 2
    ids = dead_letter_ids(client.broker, "default")
    assert len(ids) == 2
    assert "half-a-message" in ids  # the id is recovered from the bytes when possible
    for dead_id in ids:
        letter = dead_letter(client, dead_id)
        assert letter.reason == "malformed message"
        assert letter.payload  # the bytes are kept for inspection
    raw = next(i for i in ids if i != "half-a-message")
    assert raw.startswith("malformed:")
    assert dead_letter(client, raw).payload == b"\xc1 not msgpack at all"
    assert pending_count(client.broker, "default") == 0


@pytest.mark.parametrize(
    ("index", "value"),
    [(9, "soon"), (12, [1, 2]), (12, {"retries": -1}), (12, {"retries": "many"})],
    ids=["timeout-str", "policy-list", "policy-negative", "policy-str"],
)
def test_ill_typed_message_is_dead_lettered_not_fatal(client: Client, index: int,
                                                       value: Any) -> None:
    # Decodes as a message array, but its options are nonsense: a producer bug or tampering.
    @client.task(name="good")
    def good(i: int) -> int:
        return i

    fields = [1, "evil", "good", "default", [0], {}, 1, 0, None, None, None, {}, None]
    fields[index] = value
    inject(client.broker, "default", pack(fields))
    h = good.enqueue(5)
    run_burst(client)
    assert h.result(timeout=5) == 5
    letter = dead_letter(client, "evil")
    assert letter.reason == "malformed message"
    assert pending_count(client.broker, "default") == 0


def test_stream_entry_without_message_field(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)

    @client.task(name="good")
    def good(i: int) -> int:
        return i

    stream = redis_broker.keys.queue("default").stream
    entry = raw_redis(redis_broker).xadd(stream, {"x": b"no m here"}).decode()
    h = good.enqueue(3)
    run_burst(client)
    assert h.result(timeout=5) == 3
    letter = dead_letter(client, f"malformed:{entry}")
    assert letter.reason == "malformed message"
    assert pending_count(redis_broker, "default") == 0


def test_raw_garbage_xadd(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)

    @client.task(name="good")
    def good(i: int) -> int:
        return i

    stream = redis_broker.keys.queue("default").stream
    entry = raw_redis(redis_broker).xadd(stream, {"m": b"\x93\xff\x00garbage"}).decode()
    h = good.enqueue(4)
    run_burst(client)
    assert h.result(timeout=5) == 4
    assert dead_letter(client, f"malformed:{entry}").reason == "malformed message"


def test_unknown_task_is_dead_lettered(broker: Any) -> None:
    producer = Client(broker)
    consumer = Client(broker)

    @producer.task(name="only.on.the.producer")
    def ghost() -> None:
        return None

    @consumer.task(name="known")
    def known() -> int:
        return 1

    lost = ghost.enqueue()
    found = producer.enqueue(consumer.registry.get("known"))
    run_burst(consumer)
    assert found.result(timeout=5) == 1
    record = consumer.get_result(lost.id, 5)
    assert record.state == states.DEAD_LETTERED
    assert record.reason == "unknown task"
    assert record.task == "only.on.the.producer"
    letter = dead_letter(consumer, lost.id)
    assert letter.reason == "unknown task"
    assert "only.on.the.producer" in (letter.error_message or "")
    # Kept whole, so it can be replayed once a worker knows the task.
    assert letter.message is not None and letter.message.task == "only.on.the.producer"


def test_replayable_payload_is_the_original_message(client: Client) -> None:
    @client.task(name="bad", retries=0)
    def bad(x: int) -> None:
        raise ValueError(x)

    h = bad.enqueue(42)
    run_burst(client)
    letter = dead_letter(client, h.id)
    assert letter.message is not None
    assert letter.message.args == [42] and letter.message.attempt == 1
    assert encode(letter.message) == encode(Message(**{
        f: getattr(letter.message, f) for f in Message.__dataclass_fields__}))


def test_an_async_task_raising_cancelled_error_itself_fails_and_frees_its_slot(
        client: Client) -> None:
    # Not a cancel() and not a shutdown: an awaited future of the task's own was
    # cancelled. The attempt fails like any error; the one slot serves the next message.
    @client.task(name="cancels_itself", initial_delay=0)
    async def cancels_itself() -> None:
        raise asyncio.CancelledError("an inner future was cancelled")

    @client.task(name="after_it")
    async def after_it() -> str:
        return "ran"

    first, second = cancels_itself.enqueue(), after_it.enqueue()
    stats = run_burst(client, concurrency=1)
    assert stats.dead_lettered == 1 and stats.succeeded == 1
    record = client.get_result(first.id, 5)
    assert record.state == states.DEAD_LETTERED
    assert record.error_type == "CancelledError"
    assert client.get_result(second.id, 5).result == "ran"
    assert pending_count(client.broker, "default") == 0
