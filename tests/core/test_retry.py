"""RetryPolicy: attempts, backoff bounds and jitter, and which errors may be retried."""

from __future__ import annotations

import pytest

from blitzq_django.engine import ConfigurationError, Retry, RetryPolicy


class Transient(Exception):
    pass


class Permanent(Transient):
    pass


def test_retries_and_attempts() -> None:
    assert RetryPolicy().max_attempts == 1
    policy = RetryPolicy(retries=3)
    assert policy.max_attempts == 4
    error = ValueError("boom")
    assert [policy.should_retry(a, error) for a in (1, 2, 3, 4, 5)] == [
        True, True, True, False, False]
    assert not RetryPolicy(retries=0).should_retry(1, error)


def test_backoff_without_jitter_is_exponential_and_capped() -> None:
    policy = RetryPolicy(initial_delay=1.0, factor=2.0, max_delay=10.0, jitter=False)
    assert [policy.backoff(a) for a in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_backoff_of_a_huge_attempt_stays_capped() -> None:
    # factor ** attempt overflows a float long before attempt 2000.
    policy = RetryPolicy(initial_delay=1.0, factor=2.0, max_delay=300.0, jitter=False)
    assert policy.backoff(2000) == 300.0


def test_full_jitter_stays_within_zero_and_the_capped_backoff() -> None:
    policy = RetryPolicy(initial_delay=0.5, factor=3.0, max_delay=20.0, jitter=True)
    for attempt in range(1, 12):
        cap = min(20.0, 0.5 * 3.0 ** (attempt - 1))
        samples = [policy.backoff(attempt) for _ in range(200)]
        assert all(0.0 <= s <= cap for s in samples), attempt
        # Really jittered: 200 draws are not all the same value.
        assert len(set(samples)) > 1


def test_zero_initial_delay_means_immediate_retry() -> None:
    policy = RetryPolicy(retries=2, initial_delay=0.0)
    assert all(policy.backoff(a) == 0.0 for a in (1, 2, 3))


def test_retry_on_and_dont_retry_on() -> None:
    policy = RetryPolicy(retries=5, retry_on=(Transient,), dont_retry_on=(Permanent,))
    assert policy.retryable(Transient())
    assert not policy.retryable(Permanent())  # dont_retry_on wins over retry_on
    assert not policy.retryable(ValueError())  # not in retry_on
    assert policy.should_retry(1, Transient())
    assert not policy.should_retry(1, Permanent())


def test_retry_is_always_retryable_and_counts_toward_the_limit() -> None:
    policy = RetryPolicy(retries=1, retry_on=(KeyError,), dont_retry_on=(Exception,))
    assert policy.retryable(Retry())
    assert policy.should_retry(1, Retry(delay=0))
    assert not policy.should_retry(2, Retry(delay=0))


def test_retry_delay_overrides_backoff() -> None:
    policy = RetryPolicy(retries=3, initial_delay=100.0, jitter=False)
    assert policy.delay_for(1, Retry(delay=2.5)) == 2.5
    assert policy.delay_for(1, Retry(delay=0)) == 0.0
    assert policy.delay_for(1, Retry(delay=-5)) == 0.0
    assert policy.delay_for(1, Retry()) == 100.0  # None: the policy's backoff
    assert policy.delay_for(2, ValueError()) == 200.0


def test_retry_reason_and_message() -> None:
    assert str(Retry()) == "retry requested"
    error = Retry(delay=1, reason="rate limited")
    assert str(error) == "rate limited"
    assert error.reason == "rate limited"
    assert error.delay == 1


def test_overrides_apply_only_known_fields() -> None:
    policy = RetryPolicy(retries=1, retry_on=(KeyError,))
    assert policy.with_overrides(None) is policy
    assert policy.with_overrides({}) is policy
    changed = policy.with_overrides({"retries": 4, "jitter": False, "retry_on": "ignored",
                                     "unknown": 1})
    assert changed.retries == 4
    assert changed.jitter is False
    assert changed.retry_on == (KeyError,)


@pytest.mark.parametrize(
    "fields",
    [{"retries": -1}, {"initial_delay": -1.0}, {"max_delay": -1.0}, {"factor": 0.5}],
)
def test_invalid_policy_is_a_configuration_error(fields: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**fields)
