"""The one table of rules for message options, used at enqueue and at decode.

The producer (CallOptions, TaskSpec, RetryPolicy) raises ConfigurationError with the
problem; the decoder raises MessageDecodeError with the same text. So whatever a
worker would dead-letter as malformed is refused at enqueue instead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from ..errors import MAX_SECONDS, ConfigurationError
from .ids import now_ms as clock_ms

MAX_ATTEMPT = 10_000  # attempts of one message, retries included
MAX_RETRIES = MAX_ATTEMPT - 1  # so attempt <= retries + 1 always fits
MAX_FACTOR = 100
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: last datetime
MAX_TASK_ID_LENGTH = 200
MAX_IDEMPOTENCY_KEY_LENGTH = 512
POLICY_OPTIONS = ("retries", "initial_delay", "max_delay", "factor", "jitter")
#: Priorities, highest first. Each but "normal" is a lane of its own (its own stream and
#: schedule under the queue's hash tag); on the wire "normal" is None.
PRIORITIES = ("high", "normal", "low")


def _int_range(low: int, high: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _seconds(low: float, high: float, *, open_low: bool = False) -> Callable[[Any], bool]:
    # NaN fails every comparison and inf fails the upper bound: both are refused.
    def ok(v: Any) -> bool:
        if not isinstance(v, int | float) or isinstance(v, bool):
            return False
        return (low < v if open_low else low <= v) and v <= high
    return ok


def task_id_ok(v: Any) -> bool:
    # Ids go into key names and log lines: no whitespace, no control characters.
    return (isinstance(v, str) and 0 < len(v) <= MAX_TASK_ID_LENGTH and v.isprintable()
            and " " not in v)


def _headers_ok(v: Any) -> bool:
    return isinstance(v, dict) and all(type(k) is str for k in v)


# name -> (check, what it must be). The single source of truth for both sides.
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "task_id": (task_id_ok, f"a string of 1 to {MAX_TASK_ID_LENGTH} characters without "
                            "whitespace or control characters"),
    "attempt": (_int_range(1, MAX_ATTEMPT), f"an integer from 1 to {MAX_ATTEMPT}"),
    "created_ms": (_int_range(0, MAX_TIMESTAMP_MS), "a timestamp in ms up to year 9999"),
    "eta_ms": (_int_range(0, MAX_TIMESTAMP_MS), "a timestamp in ms up to year 9999"),
    "delay": (_seconds(0, MAX_SECONDS), f"a number of seconds from 0 to {MAX_SECONDS}"),
    "timeout": (_seconds(0, MAX_SECONDS, open_low=True),
                f"a number of seconds over 0 and up to {MAX_SECONDS}"),
    "idempotency_key": (lambda v: isinstance(v, str)
                        and 0 < len(v) <= MAX_IDEMPOTENCY_KEY_LENGTH,
                        f"a string of 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters"),
    "headers": (_headers_ok, "a dict with str keys"),
    "expires_ms": (_int_range(0, MAX_TIMESTAMP_MS), "a timestamp in ms up to year 9999"),
    "priority": (lambda v: v in ("high", "low"), 'one of "high", "normal", "low"'),
    "unique_key": (lambda v: isinstance(v, str) and 0 < len(v) <= MAX_IDEMPOTENCY_KEY_LENGTH,
                   f"a string of 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters"),
    "retries": (_int_range(0, MAX_RETRIES), f"an integer from 0 to {MAX_RETRIES}"),
    "initial_delay": (_seconds(0, MAX_SECONDS), f"a number of seconds from 0 to {MAX_SECONDS}"),
    "max_delay": (_seconds(0, MAX_SECONDS), f"a number of seconds from 0 to {MAX_SECONDS}"),
    "factor": (_seconds(1, MAX_FACTOR), f"a number from 1 to {MAX_FACTOR}"),
    "jitter": (lambda v: isinstance(v, bool), "True or False"),
}


def short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not a valid ``name`` option, or None if it is."""
    ok, expected = RULES[name]
    if ok(value):
        return None
    return f"{name} must be {expected}, got {short_repr(value)}"


def check(name: str, value: Any, context: str = "") -> Any:
    """Return ``value`` if valid, else raise ConfigurationError naming the option."""
    text = problem(name, value)
    if text is not None:
        raise ConfigurationError(f"{context}{text}")
    return value


def policy_problem(policy: Any) -> str | None:
    """Why a message's retry policy overrides are invalid, or None."""
    if not isinstance(policy, dict):
        return f"retry policy overrides must be a map, got {short_repr(policy)}"
    for key, value in policy.items():
        if key not in POLICY_OPTIONS:
            return f"unknown retry policy option {short_repr(key)}"
        text = problem(key, value)
        if text is not None:
            return text
    return None


def check_eta(eta: Any) -> dt.datetime:
    if not isinstance(eta, dt.datetime) or eta.utcoffset() is None:
        raise ConfigurationError(f"eta must be a timezone-aware datetime, got {short_repr(eta)}")
    return eta


def eta_ms(eta: Any, now_ms: int) -> int | None:
    """The due time of an aware ``eta`` datetime, None if already due; bounded like delay."""
    due = int(check_eta(eta).timestamp() * 1000)
    if due <= now_ms:
        return None
    if due - now_ms > MAX_SECONDS * 1000:
        raise ConfigurationError(f"eta must be at most {MAX_SECONDS} seconds from now, "
                                 f"got {eta.isoformat()}")
    return due


def priority_lane(priority: Any, context: str = "") -> str | None:
    """The wire value of a priority option: None for "normal", else "high" or "low"."""
    if priority is None or priority == "normal":
        return None
    if isinstance(priority, str) and priority in PRIORITIES:
        return priority
    raise ConfigurationError(f"{context}priority must be one of {', '.join(map(repr, PRIORITIES))}"
                             f", got {short_repr(priority)}")


def expires_seconds_ok(value: Any) -> bool:
    return _seconds(0, MAX_SECONDS, open_low=True)(value)


def expiry_ms(expires: Any, now_ms: int, context: str = "") -> int:
    """When a message given ``expires`` (seconds, a timedelta or an aware datetime) at
    ``now_ms`` expires. Refuses naive datetimes, times in the past and non-finite numbers."""
    if isinstance(expires, dt.timedelta):
        expires = expires.total_seconds()
    if isinstance(expires, dt.datetime):
        if expires.utcoffset() is None:
            raise ConfigurationError(f"{context}expires must be a timezone-aware datetime, "
                                     f"got the naive {expires.isoformat()}")
        due = int(expires.timestamp() * 1000)
        if due <= now_ms:
            raise ConfigurationError(f"{context}expires is in the past: {expires.isoformat()}")
        if due - now_ms > MAX_SECONDS * 1000:
            raise ConfigurationError(f"{context}expires must be at most {MAX_SECONDS} seconds "
                                     f"from now, got {expires.isoformat()}")
        return due
    if not expires_seconds_ok(expires):
        raise ConfigurationError(f"{context}expires must be a number of seconds over 0 and up "
                                 f"to {MAX_SECONDS}, a timedelta or an aware datetime, got "
                                 f"{short_repr(expires)}")
    return now_ms + max(1, int(expires * 1000))


def check_expires(expires: Any, context: str = "") -> Any:
    """Check ``expires`` where it is given (decorator, options()): a datetime is checked
    again against the clock at enqueue."""
    expiry_ms(expires, clock_ms(), context)
    return expires
