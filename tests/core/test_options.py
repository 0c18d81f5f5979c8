"""Per-call options and task definitions: invalid ones fail at once, with a clear error."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from blitzq_django.engine import (
    CallOptions,
    Client,
    ConfigurationError,
    MemoryBroker,
    TaskNotRegistered,
    TaskRegistry,
    TaskSpec,
)


@pytest.mark.parametrize(
    "options",
    [
        {"delay": 5, "eta": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)},
        {"delay": -1},
        {"eta": dt.datetime(2030, 1, 1)},  # naive: ambiguous
        {"timeout": 0},
        {"timeout": -3},
        {"idempotency_key": ""},
        {"idempotency_key": "k" * 513},
        {"retries": -1},
    ],
    ids=["delay-and-eta", "negative-delay", "naive-eta", "zero-timeout", "negative-timeout",
         "empty-key", "long-key", "negative-retries"],
)
def test_invalid_call_options(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        CallOptions(**options)


def test_due_time_of_delay_and_eta() -> None:
    now = 1_700_000_000_000
    assert CallOptions().due_ms(now) is None
    assert CallOptions(delay=1.5).due_ms(now) == now + 1500
    future = dt.datetime.fromtimestamp(now / 1000 + 60, tz=dt.UTC)
    assert CallOptions(eta=future).due_ms(now) == now + 60_000
    past = dt.datetime.fromtimestamp(now / 1000 - 60, tz=dt.UTC)
    assert CallOptions(eta=past).due_ms(now) is None  # already due: straight onto the queue


def test_policy_overrides_carry_only_what_was_set() -> None:
    assert CallOptions().policy() is None
    assert CallOptions(retries=2, jitter=False).policy() == {"retries": 2, "jitter": False}


def test_past_eta_is_queued_now_future_eta_is_scheduled() -> None:
    broker = MemoryBroker()
    client = Client(broker)

    @client.task(name="t")
    def t() -> None:
        return None

    t.options(eta=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).enqueue()
    later = t.options(eta=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)).enqueue()
    stats = broker.queue_stats("default")
    assert stats["ready"] == 1 and stats["scheduled"] == 1
    assert broker.scheduled_due_ms("default", later.id) is not None


def test_task_name_defaults_to_module_and_qualname() -> None:
    client = Client(MemoryBroker())

    @client.task
    def plain() -> None:
        return None

    assert plain.name.endswith("test_options.test_task_name_defaults_to_module_and_qualname."
                               "<locals>.plain")
    assert plain.spec.queue == "default"
    assert plain.spec.is_async is False


def test_task_options_build_the_spec() -> None:
    client = Client(MemoryBroker(), default_queue="main")

    @client.task(name="x", retries=3, initial_delay=0.5, retry_on=[KeyError], timeout=2.5)
    async def x() -> None:
        return None

    spec = client.registry.get("x")
    assert spec.is_async and spec.timeout == 2.5 and spec.queue == "main"
    assert spec.retry.retries == 3 and spec.retry.initial_delay == 0.5
    assert spec.retry.retry_on == (KeyError,)
    assert x.options(queue="other").enqueue().queue == "other"


def test_task_is_still_callable_directly() -> None:
    client = Client(MemoryBroker())

    @client.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5


@pytest.mark.parametrize("timeout", [0, -1])
def test_invalid_task_timeout(timeout: float) -> None:
    with pytest.raises(ConfigurationError):
        TaskSpec.build(lambda: None, name="t", timeout=timeout)


def test_registry_rejects_two_functions_under_one_name() -> None:
    registry = TaskRegistry()

    def first() -> None:
        return None

    def second() -> None:
        return None

    registry.add(TaskSpec.build(first, name="same"))
    with pytest.raises(ConfigurationError, match="registered twice"):
        registry.add(TaskSpec.build(second, name="same"))
    with pytest.raises(TaskNotRegistered):
        registry.get("missing")
    assert registry.find("missing") is None
    assert "same" in registry and len(registry) == 1
