"""Hostile input: what a worker would refuse is refused at enqueue, naming the option.

Every case here was once written to Redis and dead-lettered later, or decoded and run.
"""

from __future__ import annotations

import collections
import enum
import fnmatch
import math
import time
import tracemalloc
from typing import Any

import pytest

from blitzq_django.engine import (
    CallOptions,
    Client,
    ConfigurationError,
    MemoryBroker,
    Message,
    MessageDecodeError,
    MessageEncodeError,
    RedisBroker,
    TaskSpec,
)
from blitzq_django.engine.brokers.redis.keys import Keyspace
from blitzq_django.engine.cli.main import parse_queues
from blitzq_django.engine.core.message import (
    MAX_DECODED_ITEMS,
    MAX_DEPTH,
    decode,
    encode,
    pack,
    unpack,
)
from blitzq_django.engine.core.names import check_name
from blitzq_django.engine.core.record import DEFAULT_MAX_RESULT_SIZE
from blitzq_django.engine.core.retry import RetryPolicy
from blitzq_django.engine.core.validate import MAX_ATTEMPT, MAX_RETRIES, MAX_TIMESTAMP_MS

GOOD = [1, "id", "task", "queue", [], {}, 1, 0, None, None, None, {}, None]


def client_and_task() -> tuple[MemoryBroker, Any]:
    broker = MemoryBroker()
    client = Client(broker)

    @client.task(name="t")
    def t(*args: Any, **kwargs: Any) -> None:
        return None

    return broker, t


def raw(index: int, value: Any) -> bytes:
    fields = list(GOOD)
    fields[index] = value
    return pack(fields)


# -- per-call options ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("task_id", 123), ("task_id", ""), ("task_id", "a b"), ("task_id", "a\nb"),
        ("task_id", "x" * 201), ("queue", 5), ("queue", "a:b"), ("queue", "{x}"),
        ("queue", ""), ("queue", "a b"), ("retries", True), ("retries", 1.5),
        ("retries", -1), ("retries", MAX_RETRIES + 1), ("initial_delay", math.nan),
        ("initial_delay", math.inf), ("max_delay", 1e300), ("factor", math.nan),
        ("factor", 0.5), ("factor", 1e9), ("jitter", 1), ("delay", math.nan),
        ("delay", math.inf), ("delay", 1e300), ("delay", "5"), ("timeout", math.nan),
        ("timeout", math.inf), ("timeout", 1e300), ("timeout", 0), ("idempotency_key", 7),
        ("headers", {1: "x"}), ("headers", "x"), ("eta", "2030-01-01"),
    ],
)
def test_hostile_option_is_refused_naming_it(option: str, value: Any) -> None:
    broker, t = client_and_task()
    with pytest.raises(ConfigurationError) as caught:
        t.options(**{option: value}).enqueue(1)
    assert option in str(caught.value)
    assert broker.queue_stats("default")["ready"] == 0


def test_eta_too_far_is_refused_at_enqueue_naming_eta() -> None:
    import datetime as dt

    broker, t = client_and_task()
    far = t.options(eta=dt.datetime(9999, 1, 1, tzinfo=dt.UTC))
    with pytest.raises(ConfigurationError, match="eta"):
        far.enqueue(1)
    assert broker.queue_stats("default")["ready"] == 0


def test_bounds_themselves_are_accepted() -> None:
    CallOptions(retries=MAX_RETRIES, delay=0, timeout=0.001, factor=1, task_id="x" * 200,
                headers={"trace": [1, 2]}, queue="a-b_c.d")
    RetryPolicy(retries=MAX_RETRIES)


@pytest.mark.parametrize("options", [{"retries": True}, {"retries": 1.5},
                                     {"initial_delay": math.nan}, {"factor": math.inf},
                                     {"timeout": math.nan}, {"queue": "a:b"}, {"queue": 5}])
def test_task_definition_uses_the_same_rules(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(options))):
        TaskSpec.build(lambda: None, **options)


# -- arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        (({(1, 2): "x"},), {}, "argument args[0]"),
        ((), {"data": {(1, 2): "x"}}, "argument kwargs['data']"),
        (([1, {"ok": {("a",): 1}}],), {}, "argument args[0]"),
        ((collections.OrderedDict({(1,): 2}),), {}, "argument args[0]"),
    ],
)
def test_dict_with_tuple_keys_is_refused_naming_the_argument(args: tuple[Any, ...],
                                                            kwargs: dict[str, Any],
                                                            named: str) -> None:
    broker, t = client_and_task()
    with pytest.raises(MessageEncodeError) as caught:
        t.enqueue(*args, **kwargs)
    assert named in str(caught.value)
    assert "key" in str(caught.value)
    assert broker.queue_stats("default")["ready"] == 0


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    pass


def test_tuples_and_subclasses_still_travel_as_their_base_values() -> None:
    sent = Message(id="m", task="t", queue="q",
                   args=((1, (2, 3)), Colour.RED, Name("n"), collections.OrderedDict(a=1),
                         collections.defaultdict(list, b=[1])))
    out = decode(encode(sent))
    assert out.args == [[1, [2, 3]], 1, "n", {"a": 1}, {"b": [1]}]
    assert [type(a) for a in out.args] == [list, int, str, dict, dict]


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_up_to_max_depth_round_trips_and_deeper_is_refused_both_ways() -> None:
    ok = Message(id="m", task="t", queue="q", args=(nested(MAX_DEPTH),))
    assert decode(encode(ok)).args == [nested(MAX_DEPTH)]
    deep = Message(id="m", task="t", queue="q", kwargs={"tree": nested(MAX_DEPTH + 1)})
    with pytest.raises(MessageEncodeError, match=r"kwargs\['tree'\].*MAX_DEPTH"):
        encode(deep)
    with pytest.raises(MessageDecodeError, match="MAX_DEPTH"):
        decode(raw(4, [nested(MAX_DEPTH + 1)]))
    with pytest.raises(MessageDecodeError, match="MAX_DEPTH"):
        decode(raw(11, {"h": nested(MAX_DEPTH + 1)}))


def test_item_budget_is_the_same_at_encode_and_decode() -> None:
    # 16 message fields + the args list's one element + the elements of that element.
    at_limit = [0] * (MAX_DECODED_ITEMS - 17)
    message = Message(id="m", task="t", queue="q", args=(at_limit,))
    assert len(decode(encode(message)).args[0]) == len(at_limit)
    over = Message(id="m", task="t", queue="q", args=([*at_limit, 0],))
    with pytest.raises(MessageEncodeError, match=r"args\[0\].*MAX_DECODED_ITEMS"):
        encode(over)
    with pytest.raises(MessageDecodeError, match="MAX_DECODED_ITEMS"):
        decode(pack([1, "m", "t", "q", [[*at_limit, 0]], {}, 1, 0, None, None, None, {},
                     None, None, None, None]))


def _decode_measured(data: bytes) -> tuple[str, float, int]:
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(MessageDecodeError) as caught:
            decode(data)
        return str(caught.value), time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_empty_array_bomb_is_refused_quickly_in_bounded_memory() -> None:
    # One valid 8 MiB message made of empty arrays once cost 578 MiB and 4.4 s.
    head = pack([1, "id", "task", "queue"])[1:]  # the four fields, without their array
    tail = pack([{}, 1, 0, None, None, None, {}, None])[1:]
    n = 8 * 1024 * 1024 - 64
    data = b"\x9d" + head + b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n + tail
    reason, elapsed, peak = _decode_measured(data)
    assert "MAX_DECODED_ITEMS" in reason
    assert peak < 64 * 1024 * 1024
    assert elapsed < 5


def test_nested_bomb_under_the_per_array_limit_is_refused_in_bounded_memory() -> None:
    # Arrays each under the length limit, together far over the item budget.
    inner = b"\xdc" + (60_000).to_bytes(2, "big") + b"\x90" * 60_000
    head = pack([1, "id", "task", "queue"])[1:]
    tail = pack([{}, 1, 0, None, None, None, {}, None])[1:]
    data = b"\x9d" + head + b"\xdc" + (130).to_bytes(2, "big") + inner * 130 + tail
    reason, _, peak = _decode_measured(data)
    assert "MAX_DECODED_ITEMS" in reason
    assert peak < 64 * 1024 * 1024


# -- raw messages ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "value", "named"),
    [(6, -3, "attempt"), (6, 0, "attempt"), (6, 10**9, "attempt"), (6, MAX_ATTEMPT + 1, "attempt"),
     (6, True, "attempt"), (6, 1.0, "attempt"), (7, -1, "created_ms"), (8, 2**64 - 1, "eta_ms"),
     (9, math.nan, "timeout"), (9, math.inf, "timeout"), (9, True, "timeout"),
     (10, "", "idempotency_key"), (11, {1: "x"}, "headers"), (12, {"retries": True}, "retries"),
     (12, {"retries": 1.5}, "retries"), (12, {"retries": MAX_RETRIES + 1}, "retries"),
     (12, {"initial_delay": math.nan}, "initial_delay"), (12, {"factor": 1e9}, "factor"),
     (12, {"bogus": 1}, "bogus"), (1, "a b", "task_id"), (1, "", "task_id"),
     (1, "x\x00", "task_id"), (3, "a:b", "queue"), (3, "", "queue")],
)
def test_decode_refuses_out_of_range_fields_naming_them(index: int, value: Any,
                                                        named: str) -> None:
    with pytest.raises(MessageDecodeError, match=named):
        decode(raw(index, value))


@pytest.mark.parametrize("attempt", [-3, 0, 10**9, MAX_ATTEMPT + 1])
def test_encoder_refuses_what_the_decoder_refuses(attempt: int) -> None:
    with pytest.raises(MessageEncodeError, match="attempt"):
        encode(Message(id="m", task="t", queue="q", attempt=attempt))


def test_fields_at_their_bounds_decode() -> None:
    fields = [1, "order-42:retry", "t", "q", [1], {}, MAX_ATTEMPT, 1, 2, 0.5, "k", {"a": 1},
              {"retries": MAX_RETRIES, "factor": 1, "jitter": False}, MAX_TIMESTAMP_MS, "low",
              "k" * 512]
    out = decode(pack(fields))
    assert (out.id, out.attempt, out.policy) == (fields[1], MAX_ATTEMPT, fields[12])
    assert unpack(encode(out)) == fields


# -- names -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "a:b", "{a}", "a b", "a*", "x" * 101, 5, None])
def test_check_name_refuses_what_would_break_a_key(name: Any) -> None:
    with pytest.raises(ConfigurationError, match="queue name") as caught:
        check_name("queue", name)
    assert repr(name)[:20] in str(caught.value)


def test_names_are_checked_wherever_they_enter() -> None:
    broker = MemoryBroker()
    with pytest.raises(ConfigurationError, match="'a:b'"):
        Client(broker, default_queue="a:b")
    with pytest.raises(ConfigurationError, match="'a:b'"):
        Client(broker).task(queue="a:b")(lambda: None)
    with pytest.raises(ConfigurationError, match=r"--queues.*'b:c'"):
        parse_queues(["a,b:c"])
    assert parse_queues(["a, b.c", "a"]) == ("a", "b.c")
    with pytest.raises(ConfigurationError, match="namespace name 'ns:a'"):
        RedisBroker("redis://localhost:1/0", namespace="ns:a")
    with pytest.raises(ConfigurationError, match="namespace"):
        Keyspace("")
    with pytest.raises(ConfigurationError, match="queue name 'a:b'"):
        Keyspace("ns").queue("a:b")


def test_all_keys_pattern_stops_at_the_end_of_the_namespace() -> None:
    pattern = Keyspace("blitzq").all_keys_pattern()
    own = Keyspace("blitzq").queue("default")
    other = Keyspace("blitzq2").queue("default")
    assert fnmatch.fnmatchcase(own.stream, pattern)
    assert fnmatch.fnmatchcase("bq:{blitzq}:workers", pattern)
    assert not fnmatch.fnmatchcase(other.stream, pattern)


def test_max_result_size_is_a_validated_client_option() -> None:
    assert Client(MemoryBroker()).max_result_size == DEFAULT_MAX_RESULT_SIZE == 8 * 1024 * 1024
    assert Client(MemoryBroker(), max_result_size=1024).max_result_size == 1024
    for bad in (1023, True, 4096.0, "big"):
        with pytest.raises(ConfigurationError, match="max_result_size"):
            Client(MemoryBroker(), max_result_size=bad)  # type: ignore[arg-type]



def test_keyword_argument_names_must_be_strings_on_both_sides() -> None:
    from blitzq_django.engine.core.message import decode, encode_fields, pack
    from blitzq_django.engine.errors import MessageDecodeError, MessageEncodeError

    with pytest.raises(MessageEncodeError, match="keyword argument names must be strings"):
        encode_fields("abc", "t", "default", [], {1: "x"}, 1, 0, None, None, None, {}, None)
    raw = pack([1, "abc", "t", "default", [], {1: "x"}, 1, 0, None, None, None, {}, None])
    with pytest.raises(MessageDecodeError, match="keyword argument names must be strings"):
        decode(raw)
