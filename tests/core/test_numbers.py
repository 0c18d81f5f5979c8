"""Every number entering the engine is checked for type, range and finiteness (core.limits)."""

from __future__ import annotations

from typing import Any

import pytest

from blitzq_django.engine import ConfigurationError, MemoryBroker, RedisBroker, WorkerConfig
from blitzq_django.engine.core import limits

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(("field", "value"), [
    ("visibility_timeout", NAN), ("visibility_timeout", INF), ("visibility_timeout", 0.0),
    ("shutdown_timeout", NAN), ("shutdown_timeout", -1.0), ("shutdown_timeout", INF),
    ("threads", -1), ("threads", 2.5), ("concurrency", True), ("concurrency", 0),
    ("prefetch", -5), ("batch_size", 0), ("batch_size", NAN),
    ("block_timeout", 0.0), ("block_timeout", 0.0001),  # 0 ms = XREADGROUP blocks forever
    ("block_timeout", NAN), ("schedule_poll_interval", INF),
    ("heartbeat_interval", NAN), ("recovery_interval", NAN), ("recovery_interval", 0.0),
    ("max_deliveries", NAN), ("max_deliveries", 0), ("max_tasks", -1), ("max_tasks", 1.5),
    ("max_memory_mb", -1), ("max_memory_mb", "100"),
])
def test_worker_config_refuses_bad_numbers_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=field):
        WorkerConfig(**{field: value})


def test_worker_config_accepts_ints_for_floats_and_none_for_derived_intervals() -> None:
    config = WorkerConfig(visibility_timeout=5, shutdown_timeout=0, threads=0, max_tasks=0,
                          heartbeat_interval=None, recovery_interval=None)
    assert config.heartbeat_s == 5 / 3


def test_heartbeat_must_stay_below_half_the_visibility_timeout() -> None:
    with pytest.raises(ConfigurationError, match="heartbeat_interval"):
        WorkerConfig(visibility_timeout=10, heartbeat_interval=5)


@pytest.mark.parametrize("broker", [MemoryBroker, RedisBroker])
@pytest.mark.parametrize(("option", "value"), [
    ("record_ttl", 10**17),  # Redis refuses SET ... EX with it: messages would loop forever
    ("record_ttl", 0), ("record_ttl", 1.5), ("record_ttl", NAN),
    ("idempotency_ttl", INF), ("idempotency_ttl", True), ("dead_letter_max", -1),
])
def test_brokers_refuse_bad_numbers_at_construction(broker: Any, option: str,
                                                    value: Any) -> None:
    with pytest.raises(ConfigurationError, match=option):
        broker(**{option: value})  # RedisBroker does not connect here


def test_ttl_bound_is_ten_years() -> None:
    assert limits.problem("record_ttl", limits.MAX_TTL) is None
    assert "315360000" in (limits.problem("record_ttl", limits.MAX_TTL + 1) or "")
