"""A producer pays one round trip per enqueue (and one write per 1000 in bulk)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from blitzq_django.engine import BrokerUnavailable, Client, RedisBroker
from blitzq_django.engine.brokers.redis.ops import Op
from blitzq_django.engine.core.message import Message, decode

# Counted on one server's connection (connection_class, MONITOR); a Sentinel or cluster
# client builds its connections itself, one pool per node.
pytestmark = pytest.mark.single_node("counts the writes of one server's connections")


class CountingConnection(redis.Connection):
    """A real connection that counts how many times it writes to the socket."""

    writes = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).writes += 1
        super().send_packed_command(command, check_health)


@pytest.fixture(params=[100_000, 0], ids=["events", "no-events"])
def counted(request: pytest.FixtureRequest, redis_url: str, namespace: str,
            redis_client: redis.Redis) -> Any:
    CountingConnection.writes = 0
    broker = RedisBroker(redis_url, namespace=namespace, events_maxlen=request.param,
                         redis_options={"connection_class": CountingConnection})
    yield broker
    broker.close()
    keys = list(redis_client.scan_iter(match=broker.keys.all_keys_pattern(), count=1000))
    if keys:
        redis_client.delete(*keys)


def own_commands(redis_url: str, addr: str, action: Callable[[], object]) -> list[str]:
    """The commands the server ran for the client at ``addr`` while ``action`` ran.

    Exact on a shared, busy Redis: MONITOR names each command's client address, and a
    marker sent after ``action`` returned tells when its commands have all been seen.
    """
    marker = f"blitzq-marker-{uuid.uuid4().hex}"
    watcher = redis.Redis.from_url(redis_url, socket_timeout=10)
    try:
        with watcher.monitor() as monitor:
            action()
            watcher.echo(marker)  # on a second connection: the monitor's is taken
            seen = []
            while True:
                command = monitor.next_command()
                if marker in command["command"]:
                    return seen
                if f"{command['client_address']}:{command['client_port']}" == addr:
                    seen.append(command["command"].split(" ")[0].upper())
    finally:
        watcher.close()


def _own_address(broker: RedisBroker) -> str:
    """The address of the connection this thread's lone commands go out on (the store
    keeps one per thread)."""
    info = broker.sync.run(Op(command=("CLIENT", "INFO")))
    text = info.decode() if isinstance(info, bytes) else info
    return next(f.split("=", 1)[1] for f in text.split() if f.startswith("addr="))


def test_plain_enqueue_is_one_command(counted: RedisBroker, redis_url: str) -> None:
    client = Client(counted)

    @client.task(name="t")
    def t(x: int) -> None:
        return None

    t.enqueue(0)  # with events on, loads the script: a NOSCRIPT costs one more trip, once
    # Connects first (the handshake is not the enqueue's cost) and names the connection
    # the enqueue will reuse.
    addr = _own_address(counted)
    writes = CountingConnection.writes
    commands = own_commands(redis_url, addr, lambda: t.enqueue(1))
    assert CountingConnection.writes - writes == 1
    # With events on, the message and its "enqueued" event are one script call.
    assert commands == (["EVALSHA"] if counted.events_maxlen else ["XADD"])


@pytest.mark.parametrize(
    ("options", "track_state"),
    [({"delay": 30}, False), ({"idempotency_key": "k"}, False), ({}, True)],
    ids=["delayed", "idempotent", "tracked"],
)
def test_scripted_enqueue_is_one_round_trip(counted: RedisBroker, redis_url: str,
                                            options: dict[str, Any], track_state: bool) -> None:
    client = Client(counted, track_state=track_state)

    @client.task(name="t")
    def t(x: int) -> None:
        return None

    t.options(delay=1).enqueue(0)  # loads the script: a NOSCRIPT reply costs one more trip, once
    addr = _own_address(counted)
    writes = CountingConnection.writes
    # Only this connection's commands (exact on a shared Redis): the writes inside the
    # script are the script's, not another round trip.
    commands = own_commands(redis_url, addr, lambda: t.options(**options).enqueue(1))
    assert CountingConnection.writes - writes == 1
    assert commands == ["EVALSHA"]


def test_bulk_enqueue_is_one_round_trip_per_1000(counted: RedisBroker) -> None:
    client = Client(counted)

    @client.task(name="t")
    def t(x: int) -> None:
        return None

    counted.sync.client.ping()  # connects the pooled connection the groups go out on
    writes = CountingConnection.writes
    handles = t.enqueue_many([(i,) for i in range(2500)])
    assert len(handles) == 2500
    assert CountingConnection.writes - writes == 3
    assert counted.queue_stats("default")["ready"] == 2500


@pytest.mark.parametrize("flush", [False, True], ids=["scripts-loaded", "after-script-flush"])
def test_bulk_enqueue_writes_every_message_once_in_order(counted: RedisBroker,
                                                         redis_client: redis.Redis,
                                                         flush: bool) -> None:
    """Each group of 1,000 is sent before the last one's replies are read; after a
    SCRIPT FLUSH (a Redis restart) every group's NOSCRIPT reply is run again, in order."""
    client = Client(counted)

    @client.task(name="t")
    def t(x: int) -> None:
        return None

    t.enqueue(-1)  # loads the script
    if flush:
        redis_client.script_flush()
    handles = t.enqueue_many([(i,) for i in range(2500)])
    assert [m.args for m in _stream(counted, redis_client)] == [[-1], *([i] for i in range(2500))]
    assert [h.id for h in handles] == [m.id for m in _stream(counted, redis_client)][1:]


@pytest.mark.asyncio
@pytest.mark.parametrize("events_maxlen", [100_000, 0], ids=["events", "no-events"])
async def test_async_bulk_enqueue_writes_every_message_once_in_order(
        redis_url: str, namespace: str, redis_client: redis.Redis, events_maxlen: int) -> None:
    broker = RedisBroker(redis_url, namespace=namespace, events_maxlen=events_maxlen)
    client = Client(broker)

    @client.task(name="t")
    async def t(x: int) -> None:
        return None

    await t.aenqueue(-1)
    redis_client.script_flush()
    try:
        handles = await t.aenqueue_many([(i,) for i in range(2500)])
        written = _stream(broker, redis_client)
        assert [m.args for m in written] == [[-1], *([i] for i in range(2500))]
        assert [h.id for h in handles] == [m.id for m in written][1:]
    finally:
        await broker.aclose()
        redis_client.delete(*redis_client.scan_iter(match=broker.keys.all_keys_pattern()))


def _stream(broker: RedisBroker, redis_client: redis.Redis) -> list[Message]:
    entries = redis_client.xrange(broker.keys.queue("default").stream)
    return [decode(fields[b"m"]) for _id, fields in entries]


def test_bulk_enqueue_cut_off_by_a_stalled_redis_leaves_no_reply_behind(
        redis_url: str, namespace: str, redis_client: redis.Redis) -> None:
    """Redis stalls (CLIENT PAUSE) while groups are in flight: the enqueue fails with
    BrokerUnavailable and its connection is dropped (by redis-py on the timeout, by the
    store on any other error), so no unread reply is left on a pooled connection to be
    taken for the next call's."""
    broker = RedisBroker(redis_url, namespace=namespace,
                         redis_options={"socket_timeout": 0.2})
    client = Client(broker)

    @client.task(name="t")
    def t(x: int) -> None:
        return None

    try:
        t.enqueue(-1)  # loads the script
        redis_client.client_pause(10_000, all=False)  # every write waits
        try:
            with pytest.raises(BrokerUnavailable):
                t.enqueue_many([(i,) for i in range(2500)])
        finally:
            redis_client.client_unpause()
        before = {m.id for m in _stream(broker, redis_client)}
        handles = t.enqueue_many([(i,) for i in range(2500, 5000)])
        after = [m for m in _stream(broker, redis_client) if m.id not in before]
        assert [m.args for m in after] == [[i] for i in range(2500, 5000)]
        assert [h.id for h in handles] == [m.id for m in after]
    finally:
        broker.close()
        redis_client.delete(*redis_client.scan_iter(match=broker.keys.all_keys_pattern()))

