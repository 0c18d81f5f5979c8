"""Message codec: every supported argument type round-trips; anything else fails early."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
import zoneinfo
from typing import Any

import msgpack
import pytest

from blitzq_django.engine import (
    Client,
    MemoryBroker,
    Message,
    MessageDecodeError,
    MessageEncodeError,
    MessageError,
    MessageTooLarge,
)
from blitzq_django.engine.core.message import decode, encode, pack, peek_id, unpack

PARIS = zoneinfo.ZoneInfo("Europe/Paris")

# (value sent, value received): tuples arrive as lists, everything else as itself.
ROUND_TRIPS: list[tuple[str, Any, Any]] = [
    ("none", None, None),
    ("true", True, True),
    ("false", False, False),
    ("zero", 0, 0),
    ("negative", -42, -42),
    ("int64_max", 2**63 - 1, 2**63 - 1),
    ("int64_min", -(2**63), -(2**63)),
    ("uint64_max", 2**64 - 1, 2**64 - 1),
    ("float", 3.141592653589793, 3.141592653589793),
    ("negative_float", -0.5, -0.5),
    ("float_inf", math.inf, math.inf),
    ("empty_str", "", ""),
    ("ascii", "hello", "hello"),
    ("unicode", "héllo wörld ✓ 你好 🚀", "héllo wörld ✓ 你好 🚀"),
    ("bytes", b"\x00\xff\x80raw", b"\x00\xff\x80raw"),
    ("empty_bytes", b"", b""),
    ("list", [1, "a", None, 2.5], [1, "a", None, 2.5]),
    ("tuple", (1, 2, (3, 4)), [1, 2, [3, 4]]),
    ("nested_dict", {"a": {"b": [1, {"c": b"x"}]}, "n": None},
     {"a": {"b": [1, {"c": b"x"}]}, "n": None}),
    ("int_keys", {1: "one", 2: "two"}, {1: "one", 2: "two"}),
    ("datetime_naive", dt.datetime(2024, 2, 29, 23, 59, 59, 123456),
     dt.datetime(2024, 2, 29, 23, 59, 59, 123456)),
    ("datetime_utc", dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC),
     dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC)),
    ("datetime_paris", dt.datetime(2024, 7, 1, 8, 30, tzinfo=PARIS),
     dt.datetime(2024, 7, 1, 8, 30, tzinfo=PARIS)),
    ("date", dt.date(1999, 12, 31), dt.date(1999, 12, 31)),
    ("time", dt.time(13, 37, 0, 42), dt.time(13, 37, 0, 42)),
    ("time_aware", dt.time(13, 37, tzinfo=dt.timezone(dt.timedelta(hours=2))),
     dt.time(13, 37, tzinfo=dt.timezone(dt.timedelta(hours=2)))),
    ("decimal", decimal.Decimal("1234567890.000000001"), decimal.Decimal("1234567890.000000001")),
    ("decimal_negative", decimal.Decimal("-0.10"), decimal.Decimal("-0.10")),
    ("uuid", uuid.UUID("12345678-1234-5678-1234-567812345678"),
     uuid.UUID("12345678-1234-5678-1234-567812345678")),
    ("mixed", [dt.date(2020, 1, 1), {"id": uuid.UUID(int=7)}, decimal.Decimal("2.5")],
     [dt.date(2020, 1, 1), {"id": uuid.UUID(int=7)}, decimal.Decimal("2.5")]),
]


def message(*args: Any, **kwargs: Any) -> Message:
    return Message(id="m1", task="app.task", queue="default", args=args, kwargs=kwargs,
                   created_ms=1_700_000_000_000)


@pytest.mark.parametrize(("sent", "received"), [(s, r) for _, s, r in ROUND_TRIPS],
                         ids=[name for name, _, _ in ROUND_TRIPS])
def test_argument_round_trips_as_positional_and_keyword(sent: Any, received: Any) -> None:
    out = decode(encode(message(sent, key=sent)))
    assert out.args == [received]
    assert out.kwargs == {"key": received}
    assert type(out.args[0]) is type(received)
    if isinstance(received, dt.datetime | dt.time):
        # An aware value stays aware at the same instant; a naive one stays naive.
        assert (out.args[0].tzinfo is None) == (received.tzinfo is None)
        if received.tzinfo is not None and isinstance(received, dt.datetime):
            assert out.args[0].utcoffset() == received.utcoffset()


def test_decimal_keeps_its_exponent() -> None:
    out = decode(encode(message(decimal.Decimal("1.10"))))
    assert str(out.args[0]) == "1.10"


def test_every_message_field_round_trips() -> None:
    sent = Message(id="abc", task="app.t", queue="q2", args=(1,), kwargs={"x": 2}, attempt=3,
                   created_ms=1, eta_ms=2, timeout=1.5, idempotency_key="k",
                   headers={"trace": "t1"}, policy={"retries": 4})
    out = decode(encode(sent))
    assert out == Message(id="abc", task="app.t", queue="q2", args=[1], kwargs={"x": 2},
                          attempt=3, created_ms=1, eta_ms=2, timeout=1.5,
                          idempotency_key="k", headers={"trace": "t1"}, policy={"retries": 4})


def test_message_with_extra_trailing_fields_still_decodes() -> None:
    # Newer producers append fields; an older worker must still read the message.
    fields = unpack(encode(message(1)))
    out = decode(pack([*fields, "future field", {"more": 1}]))
    assert out.args == [1]


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        ((1, object()), {}, "args[1]"),
        ((1, 2, {3}), {}, "args[2]"),
        ((2**70,), {}, "args[0]"),
        ((-(2**64),), {}, "args[0]"),
        ((), {"when": object()}, "kwargs['when']"),
        ((), {"ok": 1, "tags": {"a", "b"}}, "kwargs['tags']"),
        (([1, [2, object()]],), {}, "args[0]"),
        (({"deep": {"x": frozenset()}},), {}, "args[0]"),
        ((dt.timedelta(seconds=1),), {}, "args[0]"),
    ],
)
def test_unencodable_argument_is_named(args: tuple[Any, ...], kwargs: dict[str, Any],
                                       named: str) -> None:
    with pytest.raises(MessageEncodeError) as caught:
        encode(message(*args, **kwargs))
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, MessageError)
    assert named in str(caught.value)
    assert "'app.task'" in str(caught.value)


def test_unencodable_argument_fails_at_enqueue_and_writes_nothing() -> None:
    broker = MemoryBroker()
    client = Client(broker)

    @client.task(name="t")
    def t(a: Any, when: Any = None) -> None:
        return None

    with pytest.raises(TypeError, match=r"kwargs\['when'\]"):
        t.enqueue(1, when=object())
    with pytest.raises(MessageEncodeError, match=r"args\[0\]"):
        t.enqueue({1, 2})
    assert broker.queue_stats("default")["ready"] == 0


def test_unencodable_header_is_reported_as_headers() -> None:
    bad = Message(id="m", task="t", queue="q", headers={"x": object()})
    with pytest.raises(MessageEncodeError, match="headers or options"):
        encode(bad)


def test_oversized_message_raises_message_too_large() -> None:
    with pytest.raises(MessageTooLarge) as caught:
        encode(message("x" * 2000), max_size=1024)
    text = str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, MessageError)
    assert "max_message_size" in text
    assert "1024" in text
    assert "'app.task'" in text


def test_message_at_the_limit_is_accepted() -> None:
    data = encode(message("x" * 100))
    assert encode(message("x" * 100), max_size=len(data)) == data
    with pytest.raises(MessageTooLarge):
        encode(message("x" * 100), max_size=len(data) - 1)


def test_client_max_message_size_applies_to_enqueue() -> None:
    broker = MemoryBroker()
    client = Client(broker, max_message_size=4096)

    @client.task(name="t")
    def t(blob: bytes) -> None:
        return None

    t.enqueue(b"x" * 1000)
    with pytest.raises(MessageTooLarge):
        t.enqueue(b"x" * 5000)
    assert broker.queue_stats("default")["ready"] == 1


def test_enqueue_many_checks_every_message_before_writing_any() -> None:
    broker = MemoryBroker()
    client = Client(broker)

    @client.task(name="t")
    def t(x: Any) -> None:
        return None

    calls: list[Any] = [(i,) for i in range(1500)]
    calls[1200] = (object(),)
    with pytest.raises(MessageEncodeError):
        t.enqueue_many(calls)
    assert broker.queue_stats("default")["ready"] == 0


GOOD_FIELDS = [1, "id", "task", "queue", [], {}, 1, 0, None, None, None, {}, None]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",  # a byte msgpack never uses
        b"garbage that is not msgpack \xff\xfe",
        pack(GOOD_FIELDS)[:-3],  # truncated
        pack({"id": "x"}),
        pack("a string"),
        pack([1, "id", "task"]),  # too short
        pack(["1", *GOOD_FIELDS[1:]]),  # version not an int
        pack([1, 7, *GOOD_FIELDS[2:]]),  # id not a string
        pack([*GOOD_FIELDS[:4], {}, *GOOD_FIELDS[5:]]),  # args not a list
        pack([*GOOD_FIELDS[:5], [], *GOOD_FIELDS[6:]]),  # kwargs not a map
        pack([*GOOD_FIELDS[:6], "1", *GOOD_FIELDS[7:]]),  # attempt not an int
        pack([*GOOD_FIELDS[:4], [msgpack.ExtType(1, b"not a date")], *GOOD_FIELDS[5:]]),
        pack([*GOOD_FIELDS[:4], [msgpack.ExtType(5, b"short")], *GOOD_FIELDS[5:]]),
    ],
    ids=["empty", "reserved-byte", "text", "truncated", "map", "str", "short", "version",
         "id-type", "args-type", "kwargs-type", "attempt-type", "bad-datetime", "bad-uuid"],
)
def test_garbage_raises_message_decode_error(data: bytes) -> None:
    with pytest.raises(MessageDecodeError):
        decode(data)


def test_decode_refuses_data_over_max_size() -> None:
    data = encode(message("x" * 2000))
    with pytest.raises(MessageDecodeError, match="max_message_size"):
        decode(data, max_size=1024)


@pytest.mark.parametrize(
    ("index", "value"),
    [(9, "soon"), (9, -1), (8, "later"), (12, [1, 2]), (12, {"retries": "many"}),
     (12, {"retries": -1}), (11, "not a map")],
    ids=["timeout-str", "timeout-negative", "eta-str", "policy-list", "policy-retries-str",
         "policy-retries-negative", "headers-str"],
)
def test_decode_rejects_ill_typed_optional_fields(index: int, value: Any) -> None:
    # A worker trusts a decoded message: ill-typed options must not get past decode, or
    # they blow up later, outside the code that dead-letters malformed messages.
    fields = list(GOOD_FIELDS)
    fields[index] = value
    with pytest.raises(MessageDecodeError):
        decode(pack(fields))


def test_peek_id_is_best_effort() -> None:
    assert peek_id(pack([1, "the-id", "rest"])) == "the-id"
    assert peek_id(b"\xc1") is None
    assert peek_id(pack([1])) is None
    assert peek_id(pack({"a": 1})) is None


def test_unknown_extension_type_is_not_executed() -> None:
    # An unknown ext code stays an opaque ExtType: nothing is ever unpickled or called.
    value = unpack(pack(msgpack.ExtType(99, b"payload")))
    assert value == msgpack.ExtType(99, b"payload")


def test_peek_created_ms_reads_it_without_the_arguments() -> None:
    from blitzq_django.engine.core.message import peek_created_ms

    message = Message(id="a1", task="t", queue="default", args=[{"deep": [1, 2]}, b"x"],
                      kwargs={"when": dt.datetime(2026, 1, 2, tzinfo=dt.UTC)},
                      created_ms=1_733_212_345_678)
    assert peek_created_ms(encode(message)) == 1_733_212_345_678
    with pytest.raises(MessageDecodeError):
        peek_created_ms(pack([1, "a1", "t"]))
