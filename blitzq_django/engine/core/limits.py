"""The one rule for every number that enters the engine: type, range, finiteness.

Settings (Django checks), command-line flags (argparse types), WorkerConfig and the
brokers' constructors all call ``problem()`` with the same name, so a value refused
in one place is refused everywhere, with the same words. A number that passes can be
used as is: NaN compares False with everything (``nan <= 0`` lets it through a bare
comparison), an infinite or huge TTL makes Redis refuse ``SET ... EX``, and a timeout
that rounds to 0 ms means "block forever" to ``XREADGROUP BLOCK``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigurationError

#: Longest TTL accepted: 10 years in seconds. Redis turns EX into milliseconds since
#: the epoch, which must fit a signed 64-bit integer; far below that, this is a bound
#: no real result or idempotency key needs.
MAX_TTL = 10 * 365 * 86400
#: Redis refuses strings above 512 MiB.
MAX_BYTES = 512 * 1024 * 1024
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Limit:
    integer: bool  # True: an int; False: an int or a float (never a bool, always finite)
    low: float
    high: float
    low_open: bool = False  # True: the value must be above ``low``, not equal to it
    note: str = ""  # what 0 means, when it means something

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        low = f"> {_num(self.low)}" if self.low_open else f">= {_num(self.low)}"
        return f"{kind} {low} and <= {_num(self.high)}{self.note}"


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)  # 315360000, not 3.1536e+08


#: name -> rule. Names are the engine's (WorkerConfig fields, broker and Client
#: keywords, CLI flags with '_'); the Django settings map onto them (conf.py).
LIMITS: dict[str, Limit] = {
    # Brokers and the client.
    "record_ttl": Limit(True, 1, MAX_TTL),
    "idempotency_ttl": Limit(True, 1, MAX_TTL),
    # How long a revocation (cancel of a queued or running message) is kept, in seconds.
    "revoke_ttl": Limit(True, 1, MAX_TTL),
    "dead_letter_max": Limit(True, 0, 10**9),
    "max_message_size": Limit(True, 1024, MAX_BYTES),
    "max_result_size": Limit(True, 1024, MAX_BYTES),
    # Events stream cap (XADD MAXLEN ~): about this many events kept per queue.
    "events_maxlen": Limit(True, 0, 10**9, note=" (0 = events off)"),
    # Longest a read of the events stream blocks: within the socket timeout, as
    # block_timeout, or an idle read would fail as a timeout.
    "event_block_ms": Limit(True, 1, 5000),
    # Workers. Floors of 1 ms: the worker turns these into whole milliseconds, and
    # 0 ms is "block forever" (XREADGROUP) or "every entry is idle" (recovery).
    "concurrency": Limit(True, 1, 100_000),
    "prefetch": Limit(True, 0, 1_000_000, note=" (0 = concurrency + one batch)"),
    "threads": Limit(True, 0, 10_000, note=" (0 = the default size)"),
    "batch_size": Limit(True, 1, 100_000),
    # At most 5 s: a blocking read must end well within the socket timeout (10 s by
    # default, brokers/redis/store.py), or every idle fetch would fail as a timeout.
    "block_timeout": Limit(False, 0.001, 5),
    "visibility_timeout": Limit(False, 0.1, 7 * DAY),
    "heartbeat_interval": Limit(False, 0, DAY, low_open=True),
    "recovery_interval": Limit(False, 0.001, DAY),
    "max_deliveries": Limit(True, 1, 1_000_000),
    "schedule_poll_interval": Limit(False, 0.001, 3600),
    "shutdown_timeout": Limit(False, 0, DAY),
    "max_tasks": Limit(True, 0, 10**12, note=" (0 = never)"),
    "max_memory_mb": Limit(True, 0, 10**8, note=" (0 = never)"),
    "processes": Limit(True, 1, 1024),
    # Seconds a `def` task's thread may go on past its timeout (after TimeLimitExceeded
    # was raised in it) before the worker recycles itself (worker/timelimits.py).
    "time_limit_grace": Limit(False, 0, DAY),
    # The ops command line (cli/ops.py): dead-letter filters, listings, replay pacing.
    "age": Limit(False, 0, MAX_TTL),  # --older-than / --newer-than, in seconds
    "list_limit": Limit(True, 1, 10**9),
    "replay_rate": Limit(False, 0, 1_000_000, low_open=True),  # messages per second
    "event_count": Limit(True, 1, 10_000),  # stream entries per read
    "heartbeat_age": Limit(False, 0, DAY, low_open=True),  # health --max-age, seconds
    "min_workers": Limit(True, 1, 100_000),  # health --min-workers
}


def problem(name: str, value: object, limit: Limit | None = None) -> str | None:
    """What is wrong with ``value`` for ``name`` ("must be ..."), or None if it is fine."""
    rule = limit or LIMITS[name]
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or (rule.integer and not isinstance(value, int)):
        return f"must be {rule.describe()}, not {type(value).__name__} {value!r:.40}"
    assert isinstance(value, int | float)
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be {rule.describe()}, not {value!r}"
    too_low = value <= rule.low if rule.low_open else value < rule.low
    if too_low or value > rule.high:
        return f"must be {rule.describe()}, not {value!r}"
    return None


def check(name: str, value: object, label: str | None = None) -> None:
    """Raise ConfigurationError naming ``label`` (default ``name``) if ``value`` is wrong."""
    found = problem(name, value)
    if found:
        raise ConfigurationError(f"{label or name} {found}")


def check_all(**values: object) -> None:
    """check() each keyword: ``check_all(record_ttl=..., dead_letter_max=...)``."""
    for name, value in values.items():
        check(name, value)
