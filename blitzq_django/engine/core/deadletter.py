"""DeadLetter: a message that will not be attempted again, and why."""

from __future__ import annotations

from dataclasses import dataclass

from .message import Message, decode, pack_fields, peek_id, unpack_fields

MALFORMED = "malformed message"
UNKNOWN_TASK = "unknown task"
MAX_DELIVERIES = "max deliveries exceeded"
RETRIES_EXHAUSTED = "retries exhausted"
NOT_RETRYABLE = "not retryable"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    id: str
    queue: str
    task: str | None = None
    reason: str
    payload: bytes  # the message as it was received, so it can be replayed
    attempt: int = 1
    delivery_count: int = 1
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    dead_ms: int = 0

    def to_bytes(self) -> bytes:
        return pack_fields(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> DeadLetter:
        return unpack_fields(cls, data)

    @property
    def message(self) -> Message | None:
        try:
            return decode(self.payload)
        except Exception:
            return None


def malformed_id(payload: bytes | None, entry_id: str) -> str:
    """An id for a dead letter whose bytes are not a message."""
    return (payload and peek_id(payload)) or f"malformed:{entry_id}"

