"""DeadLetter: a message that will not be attempted again, and why."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgpack

from .message import Message, decode, pack_fields, unpack_fields

MALFORMED = "malformed message"
UNKNOWN_TASK = "unknown task"
MAX_DELIVERIES = "max deliveries exceeded"
RETRIES_EXHAUSTED = "retries exhausted"
NOT_RETRYABLE = "not retryable"
UNSETTLEABLE = "outcome could not be settled"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    id: str
    queue: str
    task: str | None = None
    reason: str
    # the message as it was received, so it can be replayed (kept out of repr(): a hook
    # that logs a dead letter must not log the arguments)
    payload: bytes = field(repr=False)
    #: the entry's size when it was too large to keep: payload is then only its start
    #: (see ``truncated``), kept to show what it was, never to replay
    payload_size: int | None = None
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
    def truncated(self) -> bool:
        return self.payload_size is not None

    @property
    def message(self) -> Message | None:
        try:
            return decode(self.payload)
        except Exception:
            return None


#: Bytes read to find the id of an entry that is not a valid message: the id comes second
#: in the array, and reading only a prefix keeps a huge entry from being unpacked whole.
PEEK_BYTES = 4096


def malformed_id(payload: bytes | None, entry_id: str) -> str:
    """An id for a dead letter whose bytes are not a message (or too large to be one)."""
    if payload:
        try:
            unpacker = msgpack.Unpacker(raw=False, max_buffer_size=PEEK_BYTES)
            unpacker.feed(payload[:PEEK_BYTES])
            if unpacker.read_array_header() >= 2:
                unpacker.skip()  # the version
                value = unpacker.unpack()
                if isinstance(value, str) and value:
                    return value
        except Exception:  # noqa: BLE001 - any bytes at all may arrive here
            pass
    return f"malformed:{entry_id}"

