"""Message: one immutable request to run a task, and its msgpack codec.

Wire format: one msgpack array, positional and versioned::

    [v, id, task, queue, args, kwargs, attempt, created_ms, eta_ms, timeout,
     idempotency_key, headers, policy]

New fields are appended with defaults, so an older message still decodes.
Only plain data travels: None, bool, int (64-bit), float, str, bytes, list,
dict, plus datetime, date, time, Decimal and UUID as msgpack extension types.
Tuples arrive as lists. Nothing is ever unpickled.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import msgpack

from ..errors import MessageDecodeError, MessageEncodeError, MessageTooLarge

T = TypeVar("T")

VERSION = 1
DEFAULT_MAX_MESSAGE_SIZE = 8 * 1024 * 1024

_EXT_DATETIME = 1
_EXT_DATE = 2
_EXT_TIME = 3
_EXT_DECIMAL = 4
_EXT_UUID = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    id: str
    task: str
    queue: str
    args: tuple[Any, ...] | list[Any] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1  # 1-based; a retry is a new message with attempt + 1
    created_ms: int = 0
    eta_ms: int | None = None  # earliest time it may run (delayed, ETA, retry backoff)
    timeout: float | None = None  # seconds; None = the task's own timeout
    idempotency_key: str | None = None
    headers: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] | None = None  # per-call overrides of the task's retry policy

    def next_attempt(self, eta_ms: int) -> Message:
        return replace(self, attempt=self.attempt + 1, eta_ms=eta_ms)


def _default(obj: Any) -> Any:
    # datetime before date: datetime is a subclass of date.
    if isinstance(obj, dt.datetime):
        return msgpack.ExtType(_EXT_DATETIME, obj.isoformat().encode())
    if isinstance(obj, dt.date):
        return msgpack.ExtType(_EXT_DATE, obj.isoformat().encode())
    if isinstance(obj, dt.time):
        return msgpack.ExtType(_EXT_TIME, obj.isoformat().encode())
    if isinstance(obj, decimal.Decimal):
        return msgpack.ExtType(_EXT_DECIMAL, str(obj).encode())
    if isinstance(obj, uuid.UUID):
        return msgpack.ExtType(_EXT_UUID, obj.bytes)
    raise TypeError(f"cannot encode {type(obj).__qualname__}")


_EXT_DECODERS = {
    _EXT_DATETIME: lambda b: dt.datetime.fromisoformat(b.decode()),
    _EXT_DATE: lambda b: dt.date.fromisoformat(b.decode()),
    _EXT_TIME: lambda b: dt.time.fromisoformat(b.decode()),
    _EXT_DECIMAL: lambda b: decimal.Decimal(b.decode()),
    _EXT_UUID: lambda b: uuid.UUID(bytes=b),
}


def _ext_hook(code: int, data: bytes) -> Any:
    decoder = _EXT_DECODERS.get(code)
    if decoder is None:
        return msgpack.ExtType(code, data)
    return decoder(data)


def pack(value: Any) -> bytes:
    """Encode plain data (a result, a record) with the message's type rules."""
    return msgpack.packb(value, default=_default, use_bin_type=True, datetime=False)


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, ext_hook=_ext_hook, strict_map_key=False)


def pack_fields(value: Any) -> bytes:
    """A dataclass value as a msgpack map of its non-None fields (records, dead letters)."""
    # Hand-rolled rather than dataclasses.asdict, which deep-copies.
    return pack({f: v for f in value.__dataclass_fields__ if (v := getattr(value, f)) is not None})


def unpack_fields(cls: type[T], data: bytes) -> T:
    """The inverse of pack_fields; keys it does not know (from a newer version) are ignored."""
    known = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in unpack(data).items() if k in known})


def _find_bad_argument(message: Message) -> str:
    """Name the first argument that does not encode, for the enqueue-time error."""
    named = [(f"args[{i}]", v) for i, v in enumerate(message.args)]
    named += [(f"kwargs[{k!r}]", v) for k, v in message.kwargs.items()]
    for name, value in named:
        try:
            pack(value)
        except (TypeError, ValueError, OverflowError) as exc:
            return f"argument {name} of type {type(value).__qualname__} cannot be encoded ({exc})"
    return "the message headers or options cannot be encoded"


def encode(message: Message, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes:
    """Encode a message, failing early and clearly on anything a worker could not read."""
    return encode_fields(message.id, message.task, message.queue, message.args, message.kwargs,
                         message.attempt, message.created_ms, message.eta_ms, message.timeout,
                         message.idempotency_key, message.headers, message.policy, max_size)


def encode_fields(id: str, task: str, queue: str, args: Any, kwargs: dict[str, Any],
                  attempt: int, created_ms: int, eta_ms: int | None, timeout: float | None,
                  idempotency_key: str | None, headers: dict[str, Any],
                  policy: dict[str, Any] | None, max_size: int = DEFAULT_MAX_MESSAGE_SIZE
                  ) -> bytes:
    """encode() without building a Message first: the producer's hot path."""
    try:
        data = msgpack.packb(
            [VERSION, id, task, queue, list(args), kwargs, attempt, created_ms, eta_ms,
             timeout, idempotency_key, headers, policy],
            default=_default, use_bin_type=True, datetime=False,
        )
    except (TypeError, ValueError, OverflowError):
        message = Message(id=id, task=task, queue=queue, args=args, kwargs=kwargs)
        raise MessageEncodeError(
            f"task {task!r}: {_find_bad_argument(message)}; "
            "only None, bool, int, float, str, bytes, list, tuple, dict, datetime, date, "
            "time, Decimal and UUID can be sent"
        ) from None
    if len(data) > max_size:
        raise MessageTooLarge(
            f"task {task!r}: message is {len(data)} bytes, over max_message_size "
            f"({max_size} bytes); pass a reference (a primary key, a URL) instead of the data"
        )
    return data


def decode(data: bytes, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> Message:
    """Decode bytes from the broker; anything that is not a message raises MessageDecodeError."""
    if len(data) > max_size:
        raise MessageDecodeError(f"message is {len(data)} bytes, over max_message_size")
    try:
        fields = unpack(data)
    except Exception as exc:  # msgpack raises several unrelated types
        raise MessageDecodeError(f"not msgpack: {exc}") from None
    # `type(x) is T` rather than isinstance: this runs for every message a worker reads.
    if type(fields) is not list or len(fields) < 13 or type(fields[0]) is not int:
        raise MessageDecodeError("not a blitzq message array")
    (_v, id_, task, queue, args, kwargs, attempt, created_ms, eta_ms, timeout, key, headers,
     policy) = fields[:13]
    if type(id_) is not str or type(task) is not str or type(queue) is not str:
        raise MessageDecodeError("id, task and queue must be strings")
    if type(args) is not list or type(kwargs) is not dict or type(attempt) is not int:
        raise MessageDecodeError("args must be a list, kwargs a map and attempt an integer")
    if not (eta_ms is None and timeout is None and key is None and policy is None
            and type(created_ms) is int and type(headers) is dict):
        _check_options(created_ms, eta_ms, timeout, key, headers, policy)
    return Message(
        id=id_,
        task=task,
        queue=queue,
        args=args,
        kwargs=kwargs,
        attempt=attempt,
        created_ms=created_ms or 0,
        eta_ms=eta_ms,
        timeout=timeout,
        idempotency_key=key,
        headers=headers or {},
        policy=policy,
    )


def _check_options(created_ms: Any, eta_ms: Any, timeout: Any, key: Any, headers: Any,
                   policy: Any) -> None:
    # A worker trusts a decoded message, so options are checked here, where a bad one
    # dead-letters the message as malformed instead of failing later in the worker.
    if not _optional(created_ms, int) or not _optional(eta_ms, int):
        raise MessageDecodeError("created_ms and eta_ms must be integers")
    if not _optional(timeout, int | float) or (timeout is not None and timeout <= 0):
        raise MessageDecodeError("timeout must be a positive number of seconds")
    if not _optional(key, str) or not _optional(headers, dict):
        raise MessageDecodeError("idempotency_key must be a string and headers a map")
    if policy is not None and not _valid_policy(policy):
        raise MessageDecodeError(f"invalid retry policy overrides: {policy!r}")


def _optional(value: Any, kind: Any) -> bool:
    return value is None or (isinstance(value, kind) and not isinstance(value, bool))


_POLICY_CHECKS = {
    "retries": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "initial_delay": lambda v: isinstance(v, int | float) and v >= 0,
    "max_delay": lambda v: isinstance(v, int | float) and v >= 0,
    "factor": lambda v: isinstance(v, int | float) and v >= 1,
    "jitter": lambda v: isinstance(v, bool),
}


def _valid_policy(policy: Any) -> bool:
    return isinstance(policy, dict) and all(
        k in _POLICY_CHECKS and _POLICY_CHECKS[k](v) for k, v in policy.items())


def peek_id(data: bytes) -> str | None:
    """Best-effort message id of undecodable bytes, for dead-letter bookkeeping."""
    try:
        fields = unpack(data)
        return fields[1] if isinstance(fields, list) and isinstance(fields[1], str) else None
    except Exception:
        return None
