"""RetryPolicy: when a failed attempt gets another one, and after how long."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from ..errors import Retry
from .validate import POLICY_OPTIONS, check


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    retries: int = 0  # N retries = N + 1 attempts
    initial_delay: float = 1.0  # seconds before the first retry
    max_delay: float = 300.0
    factor: float = 2.0
    jitter: bool = True  # "full jitter": uniform in [0, backoff]
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    dont_retry_on: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        # The rules a message's policy overrides are decoded with (validate.RULES).
        for name in POLICY_OPTIONS:
            check(name, getattr(self, name))

    @property
    def max_attempts(self) -> int:
        return self.retries + 1

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        try:
            delay = min(self.max_delay, self.initial_delay * self.factor ** (attempt - 1))
        except OverflowError:  # a huge attempt number: the cap applies
            delay = self.max_delay
        return random.uniform(0, delay) if self.jitter else delay

    def retryable(self, error: BaseException) -> bool:
        """Whether this kind of error may be retried at all (attempts aside)."""
        if isinstance(error, Retry):
            return True
        if self.dont_retry_on and isinstance(error, self.dont_retry_on):
            return False
        return isinstance(error, self.retry_on)

    def should_retry(self, attempt: int, error: BaseException) -> bool:
        return attempt < self.max_attempts and self.retryable(error)

    def delay_for(self, attempt: int, error: BaseException) -> float:
        if isinstance(error, Retry) and error.delay is not None:
            return max(0.0, error.delay)
        return self.backoff(attempt)

    def with_overrides(self, overrides: dict[str, Any] | None) -> RetryPolicy:
        """Apply the plain-data per-call overrides a message carries."""
        if not overrides:
            return self
        return replace(self, **{k: v for k, v in overrides.items() if k in POLICY_OPTIONS})
