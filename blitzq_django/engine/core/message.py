"""Message: one immutable request to run a task, and its msgpack codec.

Wire format: one msgpack array, positional and versioned::

    [v, id, task, queue, args, kwargs, attempt, created_ms, eta_ms, timeout,
     idempotency_key, headers, policy, expires_ms, priority, unique_key]

New fields are appended with defaults, so an older message still decodes.
Only plain data travels: None, bool, int (64-bit), float, str, bytes, list,
dict, plus datetime, date, time, Decimal and UUID as msgpack extension types.
Tuples arrive as lists. Nothing is ever unpickled.

One message may expand to at most MAX_DECODED_ITEMS items (every element of every
array, every key and value of every map) and an argument or header value may nest
containers at most MAX_DEPTH deep; the encoder refuses what the decoder would.
Options follow the one table of rules in validate.py, on both sides.
"""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import msgpack

from ..errors import MessageDecodeError, MessageEncodeError, MessageTooLarge
from . import validate
from .names import KNOWN_NAMES, name_ok, name_problem
from .validate import MAX_ATTEMPT, MAX_TASK_ID_LENGTH, MAX_TIMESTAMP_MS

T = TypeVar("T")

VERSION = 1
DEFAULT_MAX_MESSAGE_SIZE = 8 * 1024 * 1024
# What one message may expand to once decoded: an 8 MiB message of empty arrays would
# otherwise cost over half a GiB. Items: every array element, map key and map value.
MAX_DECODED_ITEMS = 250_000
MAX_DEPTH = 100  # containers nested in one argument or header value ([] is depth 1)

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
    # Not in repr(): a hook or a log line that shows a message must not show its arguments
    # (they may hold secrets; see REDACT).
    args: tuple[Any, ...] | list[Any] = field(default=(), repr=False)
    kwargs: dict[str, Any] = field(default_factory=dict, repr=False)
    attempt: int = 1  # 1-based; a retry is a new message with attempt + 1
    created_ms: int = 0
    eta_ms: int | None = None  # earliest time it may run (delayed, ETA, retry backoff)
    timeout: float | None = None  # seconds; None = the task's own timeout
    idempotency_key: str | None = None
    headers: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] | None = None  # per-call overrides of the task's retry policy
    expires_ms: int | None = None  # not started by then: dropped, recorded expired
    priority: str | None = None  # "high" or "low"; None is normal (the lane it runs in)
    unique_key: str | None = None  # held while the message is not finished (unique=True)

    def next_attempt(self, eta_ms: int) -> Message:
        return replace(self, attempt=self.attempt + 1, eta_ms=eta_ms)


_SETTERS = tuple(Message.__dict__[name].__set__ for name in Message.__dataclass_fields__)
if tuple(Message.__dataclass_fields__) != ("id", "task", "queue", "args", "kwargs", "attempt",
                                          "created_ms", "eta_ms", "timeout", "idempotency_key",
                                          "headers", "policy", "expires_ms", "priority",
                                          "unique_key"):
    raise RuntimeError("_message() assumes Message's field order")


def _message(*values: Any) -> Message:
    """Message(...) of already checked fields, positionally: the worker's decode path.

    A frozen dataclass sets each field through object.__setattr__ and parses keyword
    arguments; setting the slots directly costs half as much (about 1 µs per message),
    which pays for the checks decode makes.
    """
    message = object.__new__(Message)
    for setter, value in zip(_SETTERS, values, strict=True):
        setter(message, value)
    return message


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


_local = threading.local()  # per-thread msgpack Packers (a Packer is not thread-safe)


def pack(value: Any) -> bytes:
    """Encode plain data (a result, a record) with the message's type rules."""
    # A Packer kept per thread: packb() builds one per call, which is over a third of the
    # cost of a record, and the worker writes one record per message.
    try:
        packer = _local.plain_packer
    except AttributeError:
        packer = _local.plain_packer = msgpack.Packer(default=_default, use_bin_type=True,
                                                      datetime=False)
    return packer.pack(value)  # type: ignore[no-any-return]


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


class _Walk(Exception):  # noqa: N818 - internal signal, never escapes this module
    """A tuple or a container subclass: its keys and shape need the exact walk."""


_SCALARS = frozenset({type(None), bool, int, float, str, bytes, bytearray, dt.datetime,
                      dt.date, dt.time, decimal.Decimal, uuid.UUID})
_BASES: tuple[type[Any], ...] = (bool, int, float, str, bytes)


def _default_strict(obj: Any) -> Any:
    # strict_types sends tuples (which may be dict keys, and those cannot be rebuilt)
    # and subclasses here, so the plain path needs no walk to find them.
    if isinstance(obj, tuple | list | dict):
        raise _Walk
    for base in _BASES:
        if isinstance(obj, base):  # IntEnum, StrEnum...: sent as their base value
            return base(obj)
    return _default(obj)




def _packer() -> msgpack.Packer:
    # One Packer per thread: msgpack.packb builds a new one on every call (half the cost
    # of a small message), and a Packer cannot be shared (``default`` may switch threads).
    try:
        return _local.packer  # type: ignore[no-any-return]
    except AttributeError:
        _local.packer = msgpack.Packer(default=_default_strict, use_bin_type=True,
                                       datetime=False, strict_types=True)
        return _local.packer  # type: ignore[no-any-return]


_CONTAINERS = (list, tuple, dict)
# Every array or map header starts with one of these bytes (fixmap, fixarray, array 16/32,
# map 16/32): counting them bounds the number of containers, hence the nesting depth.
_NOT_HEADER = bytes(b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF))


def _shape_problem(value: Any, items: int, keys: bool) -> tuple[str | None, int]:
    """Walk one value level by level: (why the decoder would refuse it, or None; items).

    ``keys``: also look for tuple keys (only the encoder's tuple path needs it).
    """
    level = [value]
    depth = 0
    while True:
        level = [v for v in level if isinstance(v, _CONTAINERS)]
        if not level:
            return None, items
        depth += 1
        if depth > MAX_DEPTH:
            return f"nests containers more than MAX_DEPTH ({MAX_DEPTH}) deep", items
        dicts = [v for v in level if isinstance(v, dict)]
        items += sum(map(len, level)) + sum(map(len, dicts))  # a map entry is 2 items
        if items > MAX_DECODED_ITEMS:
            return (f"makes the message over MAX_DECODED_ITEMS ({MAX_DECODED_ITEMS}) items; "
                    "pass a reference (a primary key, a URL) instead of the data", items)
        if keys:
            for d in dicts:
                for k in d:
                    if isinstance(k, tuple):  # arrives as a list, which cannot be a key
                        return (f"has a {type(k).__qualname__} key "
                                f"{validate.short_repr(k)}, which cannot be a key once "
                                "decoded", items)
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)
                 if type(c) not in _SCALARS]


def _needs_walk(data: bytes, id: str, task: str, queue: str, args: Any,
                kwargs: dict[Any, Any], headers: Any) -> bool:
    """False when cheap facts prove the message within MAX_DEPTH and MAX_DECODED_ITEMS.

    Every item takes at least one byte, and every level of nesting one container header
    outside the id, task and queue strings; most messages are cleared by their size, the
    rest by holding no container or by counting the bytes a header can start with.
    """
    size = len(data)
    if size > MAX_DECODED_ITEMS:
        return True
    return (size - len(id) - len(task) - len(queue) > MAX_DEPTH
            and not _flat(args, kwargs, headers)
            and len(data.translate(None, _NOT_HEADER)) > MAX_DEPTH)


def _named_values(args: Any, kwargs: dict[Any, Any], headers: Any
                  ) -> list[tuple[str, Any]]:
    named = [(f"argument args[{i}]", v) for i, v in enumerate(args)]
    named += [(f"argument kwargs[{k!r}]", v) for k, v in kwargs.items()]
    if isinstance(headers, dict):
        named += [(f"header {k!r}", v) for k, v in headers.items()]
    return named


def _shape_check(args: Any, kwargs: dict[Any, Any], headers: Any, policy: Any,
                 keys: bool = False) -> str | None:
    """The first argument or header the decoder would refuse, and why; or None."""
    # Counted as decode counts: the 16 fields, the args list, and the three maps.
    items = 16 + len(args) + 2 * (len(kwargs) + len(headers or ()) + len(policy or ()))
    if items > MAX_DECODED_ITEMS:
        return f"the message has over MAX_DECODED_ITEMS ({MAX_DECODED_ITEMS}) items"
    if keys and any(isinstance(k, tuple) for k in kwargs):
        return "a keyword argument name is a tuple, which cannot be a key once decoded"
    for name, value in _named_values(args, kwargs, headers):
        problem, items = _shape_problem(value, items, keys)
        if problem is not None:
            return f"{name} {problem}"
    return None


def _flat(args: Any, kwargs: dict[Any, Any], headers: Any) -> bool:
    return (not headers and _SCALARS.issuperset(map(type, args))
            and _SCALARS.issuperset(map(type, kwargs.values())))


def _find_bad_argument(args: Any, kwargs: dict[Any, Any]) -> str:
    """Name the first argument that does not encode, for the enqueue-time error."""
    for name, value in _named_values(args, kwargs, None):
        try:
            pack(value)
        except (TypeError, ValueError, OverflowError) as exc:
            return f"{name} of type {type(value).__qualname__} cannot be encoded ({exc})"
    return "the message headers or options cannot be encoded"


def encode(message: Message, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes:
    """Encode a message, failing early and clearly on anything a worker could not read."""
    return encode_fields(message.id, message.task, message.queue, message.args, message.kwargs,
                         message.attempt, message.created_ms, message.eta_ms, message.timeout,
                         message.idempotency_key, message.headers, message.policy, max_size,
                         expires_ms=message.expires_ms, priority=message.priority,
                         unique_key=message.unique_key)


def encode_fields(id: str, task: str, queue: str, args: Any, kwargs: dict[str, Any],
                  attempt: int, created_ms: int, eta_ms: int | None, timeout: float | None,
                  idempotency_key: str | None, headers: dict[str, Any],
                  policy: dict[str, Any] | None, max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                  *, expires_ms: int | None = None, priority: str | None = None,
                  unique_key: str | None = None) -> bytes:
    """encode() without building a Message first: the producer's hot path."""
    fields = [VERSION, id, task, queue, list(args), kwargs, attempt, created_ms, eta_ms,
              timeout, idempotency_key, headers, policy, expires_ms, priority, unique_key]
    if kwargs and not _str_keys(kwargs):
        odd = [k for k in kwargs if type(k) is not str]
        raise MessageEncodeError(f"task {task!r}: keyword argument names must be strings, "
                                 f"not {validate.short_repr(odd)}")
    # The checks decode makes (the same gate, then the same _fields_problem), so nothing
    # a worker would dead-letter as malformed is ever written.
    if not (eta_ms is timeout is idempotency_key is policy is expires_ms is priority
            is unique_key is None
            and type(attempt) is int and 0 < attempt <= MAX_ATTEMPT and type(created_ms) is int
            and 0 <= created_ms <= MAX_TIMESTAMP_MS and type(headers) is dict and not headers
            and type(id) is str and len(id) <= MAX_TASK_ID_LENGTH and id.isalnum()
            and type(queue) is str and queue in KNOWN_NAMES):
        problem = _fields_problem(id, queue, attempt, created_ms, eta_ms, timeout,
                                  idempotency_key, headers, policy, expires_ms, priority,
                                  unique_key)
        if problem is not None:
            raise MessageEncodeError(f"task {task!r}: {problem}")
    walked = False
    try:
        try:
            data = _packer().pack(fields)
        except _Walk:
            problem = _shape_check(args, kwargs, headers, policy, keys=True)
            if problem is not None:
                raise MessageEncodeError(f"task {task!r}: {problem}") from None
            walked = True
            data = pack(fields)
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, MessageEncodeError):
            raise
        raise MessageEncodeError(
            f"task {task!r}: {_find_bad_argument(args, kwargs)}; "
            "only None, bool, int, float, str, bytes, list, tuple, dict, datetime, date, "
            "time, Decimal and UUID can be sent"
        ) from None
    size = len(data)
    if size > max_size:
        raise MessageTooLarge(
            f"task {task!r}: message is {size} bytes, over max_message_size "
            f"({max_size} bytes); pass a reference (a primary key, a URL) instead of the data"
        )
    if not walked and _needs_walk(data, id, task, queue, args, kwargs, headers):
        problem = _shape_check(args, kwargs, headers, policy)
        if problem is not None:
            raise MessageEncodeError(f"task {task!r}: {problem}")
    return data


def decode(data: bytes, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> Message:
    """Decode bytes from the broker; anything that is not a message raises MessageDecodeError."""
    size = len(data)
    if size > max_size:
        raise MessageDecodeError(f"message is {size} bytes, over max_message_size")
    try:
        # Each item takes at least one byte: only a larger message needs counting.
        fields = unpack(data) if size <= MAX_DECODED_ITEMS else _unpack_bounded(data)
    except MessageDecodeError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types
        raise MessageDecodeError(f"not msgpack: {exc}") from None
    # `type(x) is T` rather than isinstance: this runs for every message a worker reads.
    if type(fields) is not list or len(fields) < 13 or type(fields[0]) is not int:
        raise MessageDecodeError("not a blitzq message array")
    (_v, id_, task, queue, args, kwargs, attempt, created_ms, eta_ms, timeout, key, headers,
     policy) = fields[:13]
    # Fields appended later: absent from an older message.
    expires_ms, priority, unique_key = (fields[13:16] + _ABSENT)[:3] if len(fields) < 16 \
        else fields[13:16]
    if type(id_) is not str or type(task) is not str or type(queue) is not str:
        raise MessageDecodeError("id, task and queue must be strings")
    if type(args) is not list or type(kwargs) is not dict:
        raise MessageDecodeError("args must be a list and kwargs a map")
    if kwargs and not _str_keys(kwargs):
        raise MessageDecodeError("keyword argument names must be strings")
    # The common message passes this gate; it admits only what _fields_problem admits.
    if not (eta_ms is timeout is key is policy is expires_ms is priority is unique_key is None
            and type(attempt) is int and 0 < attempt <= MAX_ATTEMPT and type(created_ms) is int
            and 0 <= created_ms <= MAX_TIMESTAMP_MS and type(headers) is dict and not headers
            and len(id_) <= MAX_TASK_ID_LENGTH and id_.isalnum() and queue in KNOWN_NAMES):
        problem = _fields_problem(id_, queue, attempt, created_ms, eta_ms, timeout, key,
                                  headers, policy, expires_ms, priority, unique_key)
        if problem is not None:
            raise MessageDecodeError(problem)
    if (size > MAX_DEPTH + len(id_) + len(task) + len(queue)
            and _needs_walk(data, id_, task, queue, args, kwargs, headers)):
        problem = _shape_check(args, kwargs, headers, policy)
        if problem is not None:
            raise MessageDecodeError(problem)
    return _message(id_, task, queue, args, kwargs, attempt, created_ms or 0, eta_ms, timeout,
                    key, headers or {}, policy, expires_ms, priority, unique_key)


_ABSENT = [None, None, None]


def _str_keys(kwargs: dict[Any, Any]) -> bool:
    # A task is called with **kwargs: a name that is not a string fails every attempt.
    return all(type(k) is str for k in kwargs)


def _fields_problem(id_: Any, queue: Any, attempt: Any, created_ms: Any, eta_ms: Any,
                    timeout: Any, key: Any, headers: Any, policy: Any, expires_ms: Any = None,
                    priority: Any = None, unique_key: Any = None) -> str | None:
    """Why these message fields are invalid, or None: the one check of encode and decode.

    A worker trusts a decoded message, so a bad option is caught here, where it
    dead-letters the message as malformed instead of failing later in the worker.
    """
    checks = [("task_id", id_), ("attempt", attempt)]
    checks += [(name, value) for name, value in (
        ("created_ms", created_ms), ("eta_ms", eta_ms), ("timeout", timeout),
        ("idempotency_key", key), ("headers", headers), ("expires_ms", expires_ms),
        ("priority", priority), ("unique_key", unique_key)) if value is not None]
    for name, value in checks:
        problem = validate.problem(name, value)
        if problem is not None:
            return problem
    if not name_ok(queue):
        return name_problem("queue", queue)
    return None if policy is None else validate.policy_problem(policy)


def _unpack_bounded(data: bytes) -> Any:
    """unpack() for a message over MAX_DECODED_ITEMS bytes: stops once over the budget."""
    # [items, containers]: hooks run as each container completes, so counting the
    # containers too stops a flat array of empty arrays before it is all built.
    seen = [0, 0]

    def count(container: Any) -> Any:
        seen[0] += len(container) * (2 if type(container) is dict else 1)
        seen[1] += 1
        # Every container but the message array is an item of its parent.
        if seen[0] > MAX_DECODED_ITEMS or seen[1] > MAX_DECODED_ITEMS + 1:
            raise MessageDecodeError(f"message has over MAX_DECODED_ITEMS "
                                     f"({MAX_DECODED_ITEMS}) items")
        return container

    # The length limits bound what one array or map preallocates before its hook runs.
    try:
        return msgpack.unpackb(data, raw=False, ext_hook=_ext_hook, strict_map_key=False,
                               list_hook=count, object_hook=count,
                               max_array_len=MAX_DECODED_ITEMS, max_map_len=MAX_DECODED_ITEMS)
    except ValueError as exc:
        if "exceeds max_" not in str(exc):  # msgpack's words for a length limit
            raise
        raise MessageDecodeError(f"message has an array or map over MAX_DECODED_ITEMS "
                                 f"({MAX_DECODED_ITEMS}) items") from None


def peek_id(data: bytes) -> str | None:
    """Best-effort message id of undecodable bytes, for dead-letter bookkeeping."""
    try:
        fields = unpack(data) if len(data) <= MAX_DECODED_ITEMS else _unpack_bounded(data)
        return fields[1] if isinstance(fields, list) and isinstance(fields[1], str) else None
    except Exception:
        return None


def peek_created_ms(data: bytes) -> int:
    """The ``created_ms`` of an encoded message, its arguments skipped, not decoded: for
    a producer that needs the time its message was built (the django.tasks backend)."""
    unpacker = msgpack.Unpacker(raw=False, ext_hook=_ext_hook, strict_map_key=False,
                                max_buffer_size=len(data))
    unpacker.feed(data)
    if unpacker.read_array_header() < 8:
        raise MessageDecodeError("message has no created_ms")
    for _field in range(7):  # v, id, task, queue, args, kwargs, attempt
        unpacker.skip()
    created = unpacker.unpack()
    if type(created) is not int:
        raise MessageDecodeError(f"message created_ms is not an integer: {created!r:.40}")
    return created
