"""The broker contract shared by RedisBroker and MemoryBroker.

A producer calls the sync or async half (``enqueue``/``aenqueue`` ...); a worker
calls only the async half. Every method that settles or renews a delivery checks
that the calling consumer still owns it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ..core.record import Record

DONE = "done"  # acked, final record written
RETRY = "retry"  # acked, next attempt on the schedule
DEAD = "dead"  # acked, moved to dead letters
REQUEUE = "requeue"  # acked, put back on the queue at once
RUNNING = "running"  # not acked: only the "running" record is written (track_state)


class Delivery(NamedTuple):
    """One handing-out of a message to a worker. (A NamedTuple: one per message, so cheap.)"""

    queue: str
    entry_id: str
    payload: bytes | None  # None: the entry had no message field
    delivery_count: int = 1


class Settlement(NamedTuple):
    """How one delivery ends; applied atomically with its ack. (NamedTuple: one per message.)"""

    delivery: Delivery
    kind: str  # DONE | RETRY | DEAD | REQUEUE
    message_id: str
    record: bytes = b""  # encoded Record to store, or b""
    notify: bool = False  # publish "final record written" for get_result
    body: bytes = b""  # RETRY/REQUEUE: encoded message; DEAD: encoded dead letter
    due_ms: int = 0  # RETRY: when the next attempt is due; DEAD: the dead letter's time
    state: str = ""  # the record state this settlement means (for stats and events)
    # For the worker's failure hooks once the settlement is written; never sent to the broker.
    failure: Any = None  # Record of the failed attempt
    letter: Any = None  # DeadLetter


@dataclass(frozen=True, slots=True)
class Enqueue:
    """One message to write, with what goes with it."""

    queue: str
    message_id: str
    payload: bytes
    due_ms: int = 0  # 0: ready now
    record: bytes = b""  # first record when track_state is on
    idempotency_key: str | None = None


class Broker(Protocol):
    # producer, sync
    def enqueue(self, items: Sequence[Enqueue]) -> list[str]: ...
    def get_record(self, queue: str, message_id: str) -> Record | None: ...
    def wait_record(self, queue: str, message_id: str, timeout: float) -> Record | None: ...
    def scheduled_due_ms(self, queue: str, message_id: str) -> int | None: ...
    def scheduled_payload(self, queue: str, message_id: str) -> bytes | None: ...
    def dead_letter(self, queue: str, message_id: str) -> bytes | None: ...
    def queue_stats(self, queue: str) -> dict[str, int | None]: ...
    def workers(self, now_ms: int) -> list[bytes]: ...
    def purge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]: ...

    # producer, async
    async def aenqueue(self, items: Sequence[Enqueue]) -> list[str]: ...
    async def aget_record(self, queue: str, message_id: str) -> Record | None: ...
    async def await_record(self, queue: str, message_id: str, timeout: float) -> Record | None: ...
    async def aqueue_stats(self, queue: str) -> dict[str, int | None]: ...
    async def aworkers(self, now_ms: int) -> list[bytes]: ...
    async def apurge(self, queue: str, force: bool, dead_letters: bool) -> dict[str, int]: ...

    # worker
    async def prepare(self, queues: Sequence[str]) -> None: ...
    async def fetch(self, queues: Sequence[str], consumer: str, count: int,
                    block_ms: int) -> list[Delivery]: ...
    async def settle(self, consumer: str, settlements: Sequence[Settlement],
                     now_ms: int, token: str | None = None) -> list[bool]:
        """Write settlements; one bool each (False: not owned). A batch sent again with the
        same ``token`` answers as the first time and changes nothing."""

    async def renew(self, consumer: str, deliveries: Sequence[Delivery]) -> list[str]: ...
    async def recover(self, queue: str, consumer: str, min_idle_ms: int,
                      count: int) -> tuple[list[Delivery], list[str]]: ...
    async def promote(self, queue: str, now_ms: int, limit: int) -> tuple[int, int]: ...
    async def retire(self, queues: Sequence[str], consumer: str) -> None: ...
    async def heartbeat(self, name: str, info: bytes, now_ms: int, ttl_ms: int) -> None: ...
    async def leave(self, name: str) -> None: ...
    async def prune_consumers(self, queue: str, min_idle_ms: int) -> int:
        """Remove the consumers that own no pending entry and were idle longer than
        ``min_idle_ms`` (those of workers that died); return how many."""
    async def aclose(self) -> None: ...
    def close(self) -> None: ...
