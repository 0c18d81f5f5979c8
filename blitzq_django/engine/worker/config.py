"""WorkerConfig: every knob of a worker, validated once."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from ..core import limits
from ..core.names import check_name
from ..errors import ConfigurationError

NUMERIC_FIELDS = ("concurrency", "prefetch", "threads", "batch_size", "block_timeout",
                  "visibility_timeout", "heartbeat_interval", "recovery_interval",
                  "max_deliveries", "schedule_poll_interval", "shutdown_timeout", "max_tasks",
                  "max_memory_mb", "time_limit_grace")
OPTIONAL_FIELDS = frozenset({"heartbeat_interval", "recovery_interval"})  # None = derived


def check_queue_concurrency(caps: object) -> dict[str, int]:
    """A queue -> cap mapping: valid queue names, each cap by the concurrency rule."""
    if not isinstance(caps, dict):
        raise ConfigurationError(f"queue_concurrency must be a dict of queue -> int, "
                                 f"got {caps!r:.80}")
    for queue, cap in caps.items():
        check_name("queue", queue)
        limits.check("concurrency", cap, f"queue_concurrency[{queue!r}]")
    return caps


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    queues: tuple[str, ...] = ()  # () = every queue of the registry, plus "default"
    concurrency: int = 100  # attempts running at once
    prefetch: int = 0  # most unacked messages held (running + waiting); 0 = concurrency + batch
    threads: int = 0  # pool for `def` tasks; 0 = min(concurrency, cpu * 4 + 4)
    batch_size: int = 100  # most messages read per fetch
    block_timeout: float = 1.0  # seconds a fetch blocks when the queues are empty
    visibility_timeout: float = 60.0  # a lease not renewed for this long may be recovered
    heartbeat_interval: float | None = None  # None = visibility_timeout / 3
    recovery_interval: float | None = None  # None = visibility_timeout / 2, at most 30 s
    max_deliveries: int = 5  # deliveries beyond this dead-letter the message
    schedule_poll_interval: float = 0.5  # longest a due scheduled message waits
    promote: bool = True
    shutdown_timeout: float = 30.0
    burst: bool = False  # drain the queues, then stop
    max_tasks: int = 0  # stop gracefully after settling this many messages (0 = never)
    max_memory_mb: int = 0  # stop gracefully once resident memory exceeds this (0 = never)
    #: queue -> most attempts of that queue running at once (each queue without one may
    #: use every slot); a queue's cap also bounds what the worker prefetches of it
    queue_concurrency: dict[str, int] = field(default_factory=dict)
    name: str = field(default_factory=default_name)
    #: seconds a `def` task's thread may run on after its timeout raised TimeLimitExceeded
    #: in it; then its slot counts as lost and the worker recycles (worker/timelimits.py)
    time_limit_grace: float = 5.0

    def __post_init__(self) -> None:
        # Every number by the shared rule (core.limits), so NaN, inf, bools and
        # out-of-range values fail here, not as a lease never renewed later.
        for name in NUMERIC_FIELDS:
            value = getattr(self, name)
            if value is not None or name not in OPTIONAL_FIELDS:
                limits.check(name, value)
        check_queue_concurrency(self.queue_concurrency)
        if self.prefetch and self.prefetch < self.concurrency:
            raise ConfigurationError("prefetch must be >= concurrency (or 0 for the default)")
        # The consumer name goes into Redis and into every log line of this worker.
        if not (isinstance(self.name, str) and 0 < len(self.name) <= 200
                and self.name.isprintable() and " " not in self.name):
            raise ConfigurationError(f"name must be 1 to 200 printable characters without "
                                     f"spaces, not {self.name!r:.60}")
        if self.heartbeat_interval is not None and not (
            self.heartbeat_interval < self.visibility_timeout / 2
        ):
            raise ConfigurationError("heartbeat_interval must be below half of visibility_timeout")

    @property
    def prefetch_count(self) -> int:
        return self.prefetch or self.concurrency + min(self.batch_size, self.concurrency)

    def prefetch_of(self, queue: str) -> int:
        """Most deliveries of ``queue`` held at once: each queue has its own, so one
        queue's backlog cannot keep another's messages from being read."""
        cap = self.queue_concurrency.get(queue)
        if cap is None:
            return self.prefetch_count
        return min(self.prefetch_count, cap + min(self.batch_size, cap))

    @property
    def thread_count(self) -> int:
        return self.threads or min(self.concurrency, (os.cpu_count() or 1) * 4 + 4)

    @property
    def heartbeat_s(self) -> float:
        return self.heartbeat_interval or self.visibility_timeout / 3

    @property
    def recovery_s(self) -> float:
        return self.recovery_interval or min(self.visibility_timeout / 2, 30.0)
