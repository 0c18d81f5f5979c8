"""Redis Sentinel and Redis Cluster (issue 21): the URLs, and the engine's flows on a real
3-master cluster and a real Sentinel set; every script names in KEYS each key it touches."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.cluster

from blitzq_django.engine import (
    CallOptions,
    Client,
    RedisBroker,
    chord,
    current_task,
    group,
    metrics,
)
from blitzq_django.engine.brokers.redis import scripts, topology
from blitzq_django.engine.brokers.redis.store import redact
from blitzq_django.engine.client import TaskFailed
from blitzq_django.engine.core.schedules import build
from blitzq_django.engine.scheduler import Scheduler

from .helpers import arun_burst, run_burst

# -- URLs ---------------------------------------------------------------------------------


def test_sentinel_url_is_parsed() -> None:
    target = topology.parse("rediss+sentinel://:s%40cret@h1:26379,h2,[::1]:26380/mymaster/3")
    assert target.kind == topology.SENTINEL and target.tls
    assert target.hosts == (("h1", 26379), ("h2", 26379), ("::1", 26380))
    assert (target.password, target.service, target.db) == ("s@cret", "mymaster", 3)


def test_cluster_url_is_parsed() -> None:
    target = topology.parse("redis+cluster://user:pw@10.0.0.1:7000,10.0.0.2:7001")
    assert target.kind == topology.CLUSTER and not target.tls
    assert target.hosts == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert (target.username, target.password, target.db) == ("user", "pw", 0)


@pytest.mark.parametrize(("url", "wrong"), [
    ("redis+sentinel://:pw@h1:1,h2:2", "names no service"),
    ("redis+sentinel://:pw@h1:1/svc/x", "database 'x' is not a number"),
    ("redis+sentinel://:pw@h1:1/svc/1/2", "more path segments"),
    ("redis+cluster://:pw@h1:1/2", "database 0 only"),
    ("redis+cluster://:pw@h1:99999", "out of range"),
    ("redis+cluster://:pw@", "names no host"),
    ("redis+cluster://:pw@h1:x", "is not a number"),
    ("http+cluster://:pw@h1:1", "has scheme 'http+cluster'"),
])
def test_bad_urls_are_refused_without_their_password(url: str, wrong: str) -> None:
    problem = topology.problem(url)
    assert problem is not None and wrong in problem
    assert "pw" not in problem


def test_good_urls_have_no_problem() -> None:
    for url in ("redis://localhost:6379/0", "unix:///run/redis.sock?db=0",
                "redis+sentinel://h1:26379,h2:26379/mymaster",
                "rediss+cluster://h1:7000"):
        assert topology.problem(url) is None


@pytest.mark.parametrize(("url", "shown"), [
    ("redis+sentinel://:secret@h1:1,h2:2/svc/0", "redis+sentinel://:***@h1:1,h2:2/svc/0"),
    ("rediss+cluster://bob:secret@h1:1,h2:2", "rediss+cluster://bob:***@h1:1,h2:2"),
    ("redis+cluster://h1:1?password=secret", "redis+cluster://h1:1?password=***"),
    ("redis://:secret@h1:6379/0", "redis://:***@h1:6379/0"),
])
def test_redact_masks_passwords_of_every_topology(url: str, shown: str) -> None:
    assert redact(url) == shown
    assert RedisBroker(url).location == shown


def test_sentinel_options_go_to_the_sentinels_or_the_servers() -> None:
    url = "rediss+sentinel://:pw@127.0.0.1:1/svc/2"
    client = topology.sync_client(url, {"sentinel_kwargs": {"password": "s"},
                                        "socket_timeout": 3, "max_connections": 4})
    manager = client.connection_pool.sentinel_manager
    assert manager.sentinel_kwargs == {"password": "s"}
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["password"], kwargs["db"], kwargs["socket_timeout"]) == ("pw", 2, 3)
    assert client.connection_pool.connection_class is topology.SentinelSSLConnection
    # without sentinel_kwargs: the socket, TLS and retry options, never the password
    client = topology.sync_client(url, {"socket_timeout": 3, "max_connections": 4})
    assert client.connection_pool.sentinel_manager.sentinel_kwargs == {
        "socket_timeout": 3, "ssl": True}


def test_replica_reads_are_refused() -> None:
    with pytest.raises(ValueError, match="replicas"):
        topology.sync_client("redis+cluster://127.0.0.1:1", {"read_from_replicas": True})


# -- every script names its keys ------------------------------------------------------------


def _exercise(client: Client, queues: list[str]) -> dict[str, Any]:
    """Most of the engine's flows on ``queues``; what they gave, for the checks."""
    broker = client.broker
    assert isinstance(broker, RedisBroker)
    found: dict[str, Any] = {}

    @client.task(name="add", rate_limit="1000/s")
    async def add(x: int, y: int) -> int:
        return x + y

    @client.task(name="boom", retries=1, initial_delay=0)
    def boom() -> None:
        raise ValueError("boom")

    @client.task(name="total")
    async def total(values: list[int]) -> int:
        return sum(values)

    handles = [add.options(queue=q).enqueue(1, i) for i, q in enumerate(queues)]
    handles += add.options(queue=queues[1]).enqueue_many([((i, i), {}) for i in range(20)])
    for q in queues:
        handles += add.options(queue=q).enqueue_many([((i, 1), {}) for i in range(5)])
    unique = add.options(queue=queues[0], unique=True)
    first = unique.enqueue(7, 7)
    assert unique.enqueue(7, 7).id == first.id  # held by the unfinished first
    keyed = add.options(queue=queues[1], idempotency_key="k1")
    assert keyed.enqueue(2, 2).id == keyed.enqueue(2, 2).id
    high = add.options(queue=queues[2], priority="high").enqueue(3, 3)
    later = add.options(queue=queues[0], delay=3600).enqueue(4, 4)
    promoted = add.options(queue=queues[1], delay=3600).enqueue(5, 5)
    revoked = add.options(queue=queues[2]).enqueue(6, 6)
    assert client.cancel(later.id, queue=queues[0]).outcome == "cancelled"
    assert client.cancel(revoked.id, queue=queues[2]).outcome == "revoked"
    failing = boom.options(queue=queues[0]).enqueue()

    async def promote() -> tuple[int, int]:
        try:
            return await broker.promote(queues[1], int(time.time() * 1000) + 7_200_000, 100)
        finally:
            await broker.aclose()

    moved, _ = asyncio.run(promote())
    assert moved == 1
    # A workflow whose steps are on every queue (its own state under a tag of its own).
    flow = chord(group(add.s(i, i).options(queue=q) for i, q in enumerate(queues)),
                 total.s().options(queue=queues[0]))
    flow_handle = flow.enqueue()
    run_burst(client, queues=queues)
    found["results"] = [h.result(timeout=5) for h in [*handles, first, high, promoted]]
    assert flow_handle.result(timeout=5) == 0 + 2 + 4
    with pytest.raises(TaskFailed):
        failing.result(timeout=5)
    assert unique.enqueue(7, 7).id != first.id  # released by its final settlement
    found["stats"] = [client.queue_stats(q) for q in queues]
    dead = client.dead_letters
    letters = dead.list(queue=queues[0])
    found["dead"] = len(letters)
    assert dead.replay([letters[0].id], queue=queues[0]) == 1
    run_burst(client, queues=queues)
    assert client.purge(queues[0], dead_letters=True).dead_letters >= 0
    found["events"] = len(client.events(queues[1], count=1000))
    found["seen"] = client.seen_queues()
    found["workers"] = client.workers()
    found["inspect"] = client.inspect(first.id, queue=queues[0])
    found.update(asyncio.run(_exercise_more(client, queues)))
    broker.close()
    return found


async def _exercise_more(client: Client, queues: list[str]) -> dict[str, Any]:
    """The flows beside enqueue and work: progress, the scheduler, leases, the history's
    and the metrics' reads, a worker's recovery, renewal, retirement and pruning."""
    broker = client.broker
    assert isinstance(broker, RedisBroker)
    found: dict[str, Any] = {}

    @client.task(name="slow")
    def slow() -> int:
        current_task().progress(1, 2, "half")
        return 1

    handle = slow.options(queue=queues[2]).enqueue()
    await arun_burst(client, queues=[queues[2]])
    assert (await client.aget_result(handle.id, 5, queue=queues[2])).result == 1
    found["progress"] = client.progress(handle.id, queue=queues[2])
    client.schedule_registry.add(build("tick", "add", every=60, args=(1, 1),
                                       queue=queues[1]))
    scheduler = Scheduler(client, promote=False)
    await scheduler.load()
    found["dispatched"] = sum(d.dispatched for d in await scheduler.tick(
        int(time.time() * 1000) + 120_000))
    lease = broker.lease(queues[0], "history", "token", 5000)
    assert lease.hold() and lease.hold()
    lease.release()
    read = broker.history.read(queues[0], "history", "h1", 100, 0, None)
    found["history"] = len(read.events)
    broker.history.add_unwritable(queues[0], int(time.time() * 1000), "refused")
    found["health"] = broker.history.health(queues[0], "history")[0]
    found["folded"] = metrics.fold(client, queues[1])
    # without track_state: a plain message (enqueue_plain.lua)
    Client(broker, registry=client.registry).enqueue(
        client.registry.get("add"), (2, 3), call=CallOptions(queue=queues[0]))
    await broker.prepare([queues[0]])
    held = await broker.fetch([queues[0]], "gone", 10, 0)  # a worker that will die
    assert held
    assert not await broker.renew("gone", held)  # still this consumer's: none lost
    claimed, _deleted = await broker.recover(queues[0], "heir", 0, 10)
    found["recovered"] = len(claimed)
    found["starts"] = [await broker.start_recovered("heir", d) for d in claimed]
    found["counted"] = [await broker.starts(d) for d in claimed]
    await broker.retire([queues[0]], "gone")
    found["pruned"] = await broker.prune_consumers(queues[0], 0)
    await broker.aclose()
    return found


def _check_more(found: dict[str, Any]) -> None:
    assert found["progress"] is not None and found["progress"].note == "half"
    assert found["dispatched"] == 1
    assert found["history"] > 0 and found["health"].get("unwritable") == "1"
    assert found["folded"] > 0
    assert found["recovered"] == 1
    assert found["starts"] == found["counted"] == [1]


class _Monitor:
    """Every command a Redis server runs, as MONITOR shows it, on a thread."""

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url)
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self._client.monitor() as monitor:
            self._ready.set()
            while True:  # raw lines: redis-py's parsed ones lose the quoting
                line = monitor.connection.read_response()  # type: ignore[union-attr]
                line = line.decode("latin-1") if isinstance(line, bytes) else str(line)
                self.lines.append(line)
                if '"h21-monitor-end"' in line:
                    return

    def __enter__(self) -> _Monitor:
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        redis.Redis(connection_pool=self._client.connection_pool).echo("h21-monitor-end")
        self._thread.join(10)
        self._client.close()


@pytest.mark.single_node("MONITOR on one server sees every key each script touches")
def test_every_script_names_in_keys_each_key_it_touches(redis_url: str,
                                                        namespace: str) -> None:
    """MONITOR lists each command a script runs right after the script's own call:
    each key of those commands (COMMAND GETKEYS) must be one the call declared. Dragonfly
    refuses undeclared keys, and a cluster routes a script by them."""
    client = Client(RedisBroker(redis_url, namespace=namespace), track_state=True)
    with _Monitor(redis_url) as monitor:
        _exercise(client, ["q1", "q2", "q3"])
    by_sha = {s.sha: s.name for s in vars(scripts).values() if isinstance(s, scripts.Script)}
    probe = redis.Redis.from_url(redis_url)
    seen: set[str] = set()
    undeclared: list[tuple[str, str]] = []
    declared: set[bytes] = set()
    name = ""
    for line in monitor.lines:
        # 1700000000.000000 [0 127.0.0.1:5555] "EVALSHA" "..." / [0 lua] "SET" "..."
        source, _, command = line.partition("] ")
        if source.endswith(" lua"):
            args = _split(command)
            try:
                keys = probe.command_getkeys(*args)
            except redis.ResponseError:
                keys = []  # no key (PUBLISH: a channel)
            keys = [k if isinstance(k, bytes) else str(k).encode("latin-1") for k in keys]
            undeclared += [(name, k.decode("latin-1")) for k in keys if k not in declared]
            continue
        args = _split(command)
        if args and args[0].upper() == b"EVALSHA" and namespace in command:
            name = by_sha.get(args[1].decode(), args[1].decode())
            seen.add(name)
            declared = set(args[3:3 + int(args[2])])
    probe.close()
    assert not undeclared, undeclared
    every = {s.name for s in vars(scripts).values() if isinstance(s, scripts.Script)}
    assert seen == every, every - seen


_ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", "\\": b"\\",
            '"': b'"'}


def _split(command: str) -> list[bytes]:
    """The arguments of a command as MONITOR shows them: each in double quotes, escaped
    as Redis' sdscatrepr() escapes (\\xHH, \\n, \\", ...)."""
    args: list[bytes] = []
    i = 0
    while i < len(command):
        if command[i] != '"':
            i += 1
            continue
        i += 1
        out = bytearray()
        while command[i] != '"':
            char = command[i]
            if char == "\\":
                code = command[i + 1]
                if code == "x":
                    out.append(int(command[i + 2:i + 4], 16))
                    i += 4
                    continue
                out += _ESCAPES[code]
                i += 2
                continue
            out += char.encode("latin-1")
            i += 1
        args.append(bytes(out))
        i += 1
    return args


# -- a real cluster ---------------------------------------------------------------------------


def _spread_queues(client: redis.cluster.RedisCluster, namespace: str,
                   count: int = 3) -> list[str]:
    """Queue names whose keys live on ``count`` different masters."""
    by_node: dict[str, str] = {}
    for i in range(1000):
        queue = f"q{i}"
        node = client.get_node_from_key(f"bq:{{{namespace}:{queue}}}:s").name
        by_node.setdefault(node, queue)
        if len(by_node) == count:
            return sorted(by_node.values())
    raise AssertionError("the cluster has fewer masters than asked")


def _drop_namespace(client: Any, namespace: str) -> None:
    pattern = RedisBroker("redis://x", namespace=namespace).keys.all_keys_pattern()
    for key in list(client.scan_iter(match=pattern, count=1000)):  # every master
        client.delete(key)


@pytest.fixture
def cluster(cluster_url: str, namespace: str) -> Iterator[redis.cluster.RedisCluster]:
    client = topology.sync_client(cluster_url, {})
    yield client
    _drop_namespace(client, namespace)
    client.close()


def test_cluster_runs_every_flow_on_queues_of_three_masters(
        cluster_url: str, namespace: str, cluster: redis.cluster.RedisCluster) -> None:
    queues = _spread_queues(cluster, namespace)
    client = Client(RedisBroker(cluster_url, namespace=namespace), track_state=True)
    found = _exercise(client, queues)
    assert len(found["results"]) == 3 + 20 + 15 + 3
    assert found["dead"] == 1
    assert set(queues) <= set(found["seen"])
    assert found["inspect"] is not None and found["inspect"].state == "succeeded"
    _check_more(found)
    nodes = {cluster.get_node_from_key(f"bq:{{{namespace}:{q}}}:s").name for q in queues}
    assert len(nodes) == 3


def test_cluster_notifies_a_result_on_its_shard_channel(
        cluster_url: str, namespace: str, cluster: redis.cluster.RedisCluster) -> None:
    queue = _spread_queues(cluster, namespace, 2)[1]
    client = Client(RedisBroker(cluster_url, namespace=namespace))

    @client.task(name="echo", queue=queue)
    async def echo(x: int) -> int:
        return x

    handle = echo.enqueue(42)
    channel = client.broker.keys.queue(queue).done_channel(handle.id)  # type: ignore[union-attr]
    pubsub = cluster.pubsub()
    pubsub.ssubscribe(channel)
    try:
        run_burst(client, queues=[queue])
        message = None
        deadline = time.monotonic() + 10
        while message is None and time.monotonic() < deadline:
            message = pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=1)
        assert message is not None and message["data"] == b"done"
    finally:
        pubsub.close()
    assert handle.result(timeout=5) == 42


def test_cluster_get_result_waits_on_the_shard_channel(
        cluster_url: str, namespace: str, cluster: redis.cluster.RedisCluster) -> None:
    """A waiter subscribed before the worker ran is given the result (sync and async)."""
    queue = _spread_queues(cluster, namespace, 3)[2]
    client = Client(RedisBroker(cluster_url, namespace=namespace))

    @client.task(name="echo", queue=queue)
    async def echo(x: int) -> int:
        return x

    first, second = echo.enqueue(1), echo.enqueue(2)
    node = cluster.get_node_from_key(f"bq:{{{namespace}:{queue}}}:s")
    waiting: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: waiting.update(r=first.result(timeout=30)))
    waiter.start()

    async def main() -> Any:
        task = asyncio.create_task(client.aget_result(second.id, 30, queue=queue))
        # both waiters subscribed on the node of the queue's slot
        deadline = time.monotonic() + 20
        channels = [client.broker.keys.queue(queue).done_channel(h.id)  # type: ignore[union-attr]
                    for h in (first, second)]
        while sum(n for _c, n in cluster.pubsub_shardnumsub(*channels, target_nodes=node)) < 2:
            assert time.monotonic() < deadline, "the waiters never subscribed"
            await asyncio.sleep(0.01)  # (noqa: sleep) a poll under the deadline above
        await arun_burst(client, queues=[queue])
        try:
            return await task
        finally:
            await client.broker.aclose()  # type: ignore[union-attr]

    assert asyncio.run(main()).result == 2
    waiter.join(30)
    assert waiting["r"] == 1


# -- a real Sentinel set -------------------------------------------------------------------------


def test_sentinel_runs_every_flow(sentinel_url: str, namespace: str) -> None:
    client = Client(RedisBroker(sentinel_url, namespace=namespace), track_state=True)
    try:
        found = _exercise(client, ["s1", "s2", "s3"])
        assert found["dead"] == 1
        _check_more(found)
    finally:
        master = topology.sync_client(sentinel_url, {})
        _drop_namespace(master, namespace)
        master.close()


def test_cluster_pipeline_sends_a_moved_command_to_its_node(
        cluster_url: str, namespace: str, cluster: redis.cluster.RedisCluster) -> None:
    """A slot map gone stale (a failover, a resharding): the node answers MOVED, and the
    command is sent again to the node serving the slot now, once."""
    queue = _spread_queues(cluster, namespace, 1)[0]
    client = Client(RedisBroker(cluster_url, namespace=namespace))
    broker = client.broker
    assert isinstance(broker, RedisBroker)
    stream = broker.keys.queue(queue).stream
    routed = broker.sync.client
    slot = routed.keyslot(stream)
    right = routed.nodes_manager.slots_cache[slot][0]
    wrong = next(n for n in routed.get_primaries() if n.name != right.name)
    routed.nodes_manager.slots_cache[slot] = [wrong]

    @client.task(name="echo", queue=queue)
    def echo(x: int) -> int:
        return x

    echo.enqueue(1)  # the queue's first write: a pipeline with the seen queues' SADD
    assert cluster.xlen(stream) == 1
    broker.close()
