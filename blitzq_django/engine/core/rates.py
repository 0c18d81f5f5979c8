"""Rate limits: ``"10/s"``, ``"100/m"``, ``"1000/h"`` parsed into a Rate (pure, no I/O).

A rate is enforced by a token bucket in Redis (``brokers/redis/scripts/rate.lua``), shared by
every worker of the namespace. The bucket holds at most ``capacity`` tokens, which is
the rate's count (at least 1): after a quiet spell a task may start ``count`` times at
once, and from then on at the rate. A run takes one token; tokens come back at
``count`` per unit, continuously (``refill_per_ms``), not all at once per unit.

Bucket names go into a key name (``bq:{ns}:rl:<bucket>``) and into log lines, so they
follow the rule of message ids: 1 to 200 printable characters without whitespace.
A task's own limit uses the bucket named after the task.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..errors import ConfigurationError

#: Unit -> seconds. The short forms are the documented ones; the long forms are accepted.
UNITS: dict[str, int] = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
                         "h": 3600, "hour": 3600}
_SHORT = {1: "s", 60: "m", 3600: "h"}
#: The most a rate may allow per unit; far beyond what one Redis bucket can serve.
MAX_COUNT = 10**9
MAX_BUCKET_LENGTH = 200
_RATE = re.compile(r"\s*([0-9]{1,12}(?:\.[0-9]{1,9})?)\s*/\s*([A-Za-z]+)\s*")
EXAMPLE = "'10/s', '100/m' or '1000/h'"


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` runs per ``per_seconds`` seconds (1, 60 or 3600)."""

    count: float
    per_seconds: int

    def __post_init__(self) -> None:
        number = isinstance(self.count, int | float) and not isinstance(self.count, bool)
        if not number or not math.isfinite(self.count) or not 0 < self.count <= MAX_COUNT:
            raise ConfigurationError(f"a rate's count must be a finite number over 0 and up to "
                                     f"{MAX_COUNT}, got {self.count!r:.40}")
        if self.per_seconds not in _SHORT or isinstance(self.per_seconds, bool):
            raise ConfigurationError(f"a rate's period must be 1, 60 or 3600 seconds, "
                                     f"got {self.per_seconds!r:.40}")

    @property
    def capacity(self) -> float:
        """Tokens the bucket holds when full: the count, at least 1 (a burst after quiet)."""
        return max(float(self.count), 1.0)

    @property
    def refill_per_ms(self) -> float:
        """Tokens that come back per millisecond."""
        return self.count / (self.per_seconds * 1000)

    @property
    def interval_ms(self) -> float:
        """Milliseconds between two tokens."""
        return self.per_seconds * 1000 / self.count

    def __str__(self) -> str:
        count = int(self.count) if self.count == int(self.count) else self.count
        return f"{count}/{_SHORT[self.per_seconds]}"


def parse_rate(text: Any, label: str = "rate") -> Rate:
    """``"10/s"`` -> Rate(10, 1). Raises ConfigurationError naming ``label`` and the value.

    The count is a positive decimal number (``"0.5/s"``: one run every 2 s); the unit is
    s, m or h (second, minute, hour). NaN, infinities, exponents, signs and 0 are refused.
    """
    if not isinstance(text, str):
        raise ConfigurationError(f"{label} must be a string like {EXAMPLE}, "
                                 f"got {type(text).__name__} {text!r:.60}")
    match = _RATE.fullmatch(text)
    unit = match and UNITS.get(match.group(2).lower())
    if match is None or unit is None:
        raise ConfigurationError(f"{label} must be a count per unit like {EXAMPLE} (the unit "
                                 f"one of s, m, h), got {text!r:.60}")
    count = float(match.group(1))
    if count <= 0 or count > MAX_COUNT:
        raise ConfigurationError(f"{label} must allow more than 0 and at most {MAX_COUNT} "
                                 f"runs per unit, got {text!r:.60}")
    return Rate(int(count) if count == int(count) else count, unit)


def as_rate(value: Any, label: str = "rate") -> Rate:
    """A Rate as is, or a string parsed by parse_rate."""
    if isinstance(value, Rate):
        return value
    return parse_rate(value, label)


def bucket_ok(value: Any) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= MAX_BUCKET_LENGTH
            and value.isprintable() and not any(c.isspace() for c in value))


def bucket_problem(value: Any) -> str | None:
    """Why ``value`` cannot name a bucket, or None."""
    if bucket_ok(value):
        return None
    return (f"a rate bucket name must be a string of 1 to {MAX_BUCKET_LENGTH} printable "
            f"characters without whitespace, got {_short(value)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


#: What Client(rate_limits=) and BLITZQ["RATE_LIMITS"] take: bucket name -> rate.
RateLimits: TypeAlias = Mapping[str, Rate | str]


def rate_limits_map(value: Any, label: str = "rate_limits") -> dict[str, Rate]:
    """Check a bucket name -> rate mapping; the rates parsed. Errors name the bucket."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{label} must be a mapping of bucket name -> rate like "
                                 f"{EXAMPLE}, got {type(value).__name__}")
    out: dict[str, Rate] = {}
    for name, rate in value.items():
        problem = bucket_problem(name)
        if problem:
            raise ConfigurationError(f"{label}: {problem}")
        out[name] = as_rate(rate, f"{label}[{name!r}]")
    return out


RateKey: TypeAlias = str | Callable[..., str]


def check_rate_key(value: Any, label: str = "rate_key") -> Any:
    """A bucket name or a callable (given the task's arguments, returns one)."""
    if callable(value):
        return value
    problem = bucket_problem(value)
    if problem:
        raise ConfigurationError(f"{label} must be a bucket name or a callable returning one: "
                                 f"{problem}")
    return value


def bucket_rate(bucket: str, own: Rate | None, rates: Mapping[str, Rate],
                task: str) -> Rate:
    """The rate of ``bucket`` for task ``task``: its own rate_limit, else rate_limits'."""
    if own is not None:
        return own
    rate = rates.get(bucket)
    if rate is None:
        known = ", ".join(sorted(map(repr, rates))[:20]) or "none"
        raise ConfigurationError(f"task {task!r}: rate bucket {bucket!r} has no rate: it is "
                                 f"not in rate_limits (BLITZQ['RATE_LIMITS']; known: {known}) "
                                 "and the task has no rate_limit")
    return rate


#: A token due within this many ms counts as there already (rate.lua's GRACE_MS).
GRACE_MS = 5


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token bucket's state: tokens, ms of the last refill, deferral horizon ms."""

    tokens: float
    last_ms: float
    horizon_ms: float = 0.0


def take(bucket: Bucket | None, now_ms: float, capacity: float, refill_per_ms: float,
         wanted: int) -> tuple[Bucket, int, int]:
    """rate.lua in Python (MemoryBroker): (new state, granted, wait ms for the rest)."""
    if bucket is None:
        bucket = Bucket(capacity, now_ms)
    tokens = bucket.tokens
    if now_ms > bucket.last_ms:
        tokens += (now_ms - bucket.last_ms) * refill_per_ms
    tokens = min(tokens, capacity)
    granted = max(0, min(wanted, math.floor(tokens + GRACE_MS * refill_per_ms)))
    tokens -= granted
    horizon, wait = bucket.horizon_ms, 0
    refused = wanted - granted
    if refused > 0:
        due = max(now_ms + (1 - tokens) / refill_per_ms, horizon)
        horizon = due + refused / refill_per_ms
        wait = max(1, math.ceil(due - now_ms))
    return Bucket(tokens, now_ms, horizon), granted, wait
