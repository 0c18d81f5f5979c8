"""Rate limits as values: parsing "N/unit", bad input named, the bucket algorithm."""

from __future__ import annotations

import math

import pytest

from blitzq_django.engine import Client, MemoryBroker, TaskSpec
from blitzq_django.engine.core import rates
from blitzq_django.engine.core.rates import Bucket, Rate, parse_rate, take
from blitzq_django.engine.errors import ConfigurationError


@pytest.mark.parametrize(("text", "count", "per"), [
    ("10/s", 10, 1), ("100/m", 100, 60), ("1000/h", 1000, 3600), ("1/S", 1, 1),
    (" 20 / s ", 20, 1), ("0.5/s", 0.5, 1), ("3/minute", 3, 60), ("2/hour", 2, 3600),
    ("5/sec", 5, 1),
])
def test_parse(text: str, count: float, per: int) -> None:
    rate = parse_rate(text)
    assert (rate.count, rate.per_seconds) == (count, per)
    assert rate.refill_per_ms == pytest.approx(count / (per * 1000))
    assert rate.interval_ms == pytest.approx(per * 1000 / count)


def test_str_and_capacity() -> None:
    assert str(parse_rate("10/s")) == "10/s"
    assert str(parse_rate("2.5/m")) == "2.5/m"
    assert parse_rate("20/s").capacity == 20  # the burst after a quiet spell is the count
    assert parse_rate("0.5/s").capacity == 1  # never below one token, or nothing would run


@pytest.mark.parametrize("text", ["10/x", "0/s", "0.0/m", "-1/s", "nan/s", "inf/s", "1e3/s",
                                  "10", "/s", "10/", "10 s", "ten/s", "10/s/s", "",
                                  "\u0661\u0660/s", "+5/s", "99999999999999/s"])
def test_malformed_rates_are_refused_naming_the_value(text: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_rate(text, "rate_limit")
    assert "rate_limit" in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("value", [10, 10.0, None, b"10/s", ["10/s"], math.nan, True])
def test_non_strings_are_refused_naming_the_value(value: object) -> None:
    with pytest.raises(ConfigurationError, match="must be a string like '10/s'") as info:
        parse_rate(value, "rate_limit")
    assert repr(value)[:20] in str(info.value)


@pytest.mark.parametrize(("count", "per"), [(0, 1), (-1, 1), (math.nan, 1), (math.inf, 1),
                                            (True, 1), (1, 2), (1, True), ("1", 1)])
def test_rate_values_are_checked(count: object, per: object) -> None:
    with pytest.raises(ConfigurationError):
        Rate(count, per)  # type: ignore[arg-type]


def test_task_spec_builds_its_rate_and_names_the_task() -> None:
    def f() -> None: ...

    spec = TaskSpec.build(f, name="t", rate_limit="20/s")
    assert spec.rate_limit == Rate(20, 1)
    assert TaskSpec.build(f, name="t", rate_limit=Rate(3, 60)).rate_limit == Rate(3, 60)
    assert TaskSpec.build(f, name="t").rate_limit is None
    with pytest.raises(ConfigurationError, match=r"^task 't': rate_limit .*'10/x'"):
        TaskSpec.build(f, name="t", rate_limit="10/x")
    with pytest.raises(ConfigurationError, match=r"^task 't': rate_limit .* got int 10"):
        TaskSpec.build(f, name="t", rate_limit=10)


def test_task_spec_rate_key() -> None:
    def f() -> None: ...

    def key(*args: object) -> str:
        return "b"

    assert TaskSpec.build(f, name="t", rate_key="stripe:IN").rate_key == "stripe:IN"
    assert TaskSpec.build(f, name="t", rate_key=key).rate_key is key
    for bad in ("", "a b", "x" * 201, 5, "tab\there"):
        with pytest.raises(ConfigurationError, match=r"^task 't': rate_key must be a bucket"):
            TaskSpec.build(f, name="t", rate_key=bad)


def test_client_rate_limits_are_parsed_and_checked() -> None:
    client = Client(MemoryBroker(), rate_limits={"stripe": "25/s", "geo": Rate(600, 60)})
    assert client.rate_limits == {"stripe": Rate(25, 1), "geo": Rate(600, 60)}
    assert Client(MemoryBroker()).rate_limits == {}
    with pytest.raises(ConfigurationError, match=r"rate_limits\['stripe'\] .*'25/y'"):
        Client(MemoryBroker(), rate_limits={"stripe": "25/y"})
    with pytest.raises(ConfigurationError, match="rate bucket name"):
        Client(MemoryBroker(), rate_limits={"a b": "1/s"})
    with pytest.raises(ConfigurationError, match="must be a mapping"):
        Client(MemoryBroker(), rate_limits=["1/s"])  # type: ignore[arg-type]


def test_bucket_rate_names_the_missing_bucket() -> None:
    assert rates.bucket_rate("b", None, {"b": Rate(1, 1)}, "t") == Rate(1, 1)
    assert rates.bucket_rate("zz", Rate(2, 1), {}, "t") == Rate(2, 1)  # its own rate wins
    with pytest.raises(ConfigurationError, match=r"task 't': rate bucket 'zz' has no rate"):
        rates.bucket_rate("zz", None, {"b": Rate(1, 1)}, "t")


# -- the algorithm (rate.lua in Python; tests/engine/test_rate_limits.py runs the script) --

def test_a_full_bucket_grants_its_capacity_then_refuses() -> None:
    rate = Rate(10, 1)  # a token every 100 ms
    state, granted, wait = take(None, 1000.0, rate.capacity, rate.refill_per_ms, 15)
    assert (granted, wait) == (10, 100)
    assert state.tokens == 0
    # The 5 refused were told to come back 100 ms apart: the horizon is after them.
    assert state.horizon_ms == pytest.approx(1000 + 100 + 5 * 100)


def test_refusing_reserves_nothing() -> None:
    rate = Rate(10, 1)
    state = Bucket(0.5, 1000.0)
    after, granted, wait = take(state, 1000.0, rate.capacity, rate.refill_per_ms, 3)
    assert granted == 0 and wait == 50  # half a token left to come
    assert after.tokens == 0.5  # unchanged: no token taken for what does not run
    # The next take, later, finds the tokens that came back since.
    later, granted, _ = take(after, 1060.0, rate.capacity, rate.refill_per_ms, 1)
    assert granted == 1 and later.tokens == pytest.approx(0.1)


def test_refill_is_continuous_and_capped() -> None:
    rate = Rate(20, 1)
    state, _, _ = take(None, 0.0, rate.capacity, rate.refill_per_ms, 20)
    state, granted, _ = take(state, 250.0, rate.capacity, rate.refill_per_ms, 100)
    assert granted == 5  # 250 ms at 20/s
    state, granted, _ = take(state, 1_000_000.0, rate.capacity, rate.refill_per_ms, 100)
    assert granted == 20  # never more than the capacity, however long the quiet


def test_refused_batches_line_up_after_each_other() -> None:
    """Two workers refused in turn get consecutive slots, not the same one."""
    rate = Rate(10, 1)
    state = Bucket(0.0, 0.0)
    state, _, first = take(state, 0.0, rate.capacity, rate.refill_per_ms, 3)  # slots 100..300
    state, _, second = take(state, 1.0, rate.capacity, rate.refill_per_ms, 2)
    assert first == 100
    assert second == pytest.approx(400 - 1, abs=1)  # after the 3 refused before


def test_a_token_due_within_the_grace_counts() -> None:
    rate = Rate(10, 1)
    _, granted, _ = take(Bucket(0.0, 0.0), 97.0, rate.capacity, rate.refill_per_ms, 1)
    assert granted == 1  # due at 100 ms, asked at 97 ms: within GRACE_MS
    _, granted, _ = take(Bucket(0.0, 0.0), 90.0, rate.capacity, rate.refill_per_ms, 1)
    assert granted == 0


def test_a_clock_that_goes_back_refills_nothing() -> None:
    rate = Rate(10, 1)
    state, granted, _ = take(Bucket(0.0, 5000.0), 4000.0, rate.capacity, rate.refill_per_ms, 1)
    assert granted == 0 and state.last_ms == 4000.0
