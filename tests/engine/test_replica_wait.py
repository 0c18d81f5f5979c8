"""replica_wait (BLITZQ["REPLICA_WAIT"]): enqueue and settle send WAIT after their writes
in the same round trip; an enqueue too few replicas confirmed raises NotReplicated naming
its messages, a settle is logged and the worker goes on. On a real master with one
replica (what a failover does with these writes: tests/fault/test_failover.py)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from blitzq_django.engine import CallOptions, Client, NotReplicated, RedisBroker
from blitzq_django.engine.brokers.redis import ops
from blitzq_django.engine.errors import BrokerError, ConfigurationError
from blitzq_django.engine.worker.flusher import log as flusher_log

from ..support.redis_server import RedisServer, free_port
from ..support.waiting import wait_until
from .helpers import run_burst


class Replicated:
    """A master and one replica of it."""

    def __init__(self) -> None:
        self.master = RedisServer().start()
        self.replica_port = free_port()
        self.replica_dir = tempfile.mkdtemp(prefix="blitzq-replica-")
        self.replica = subprocess.Popen(
            [self.master.binary, "--port", str(self.replica_port), "--bind", "127.0.0.1",
             "--dir", self.replica_dir, "--save", "", "--appendonly", "no",
             "--replicaof", "127.0.0.1", str(self.master.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        master = redis.Redis(port=self.master.port)
        try:
            wait_until(lambda: master.info("replication").get("slave0", {}).get("state")
                       == "online", 10, message="the replica to be online")
        except BaseException:
            self.stop()
            raise
        finally:
            master.close()

    def stop(self) -> None:
        self.replica.kill()
        self.replica.wait()
        shutil.rmtree(self.replica_dir, ignore_errors=True)
        self.master.stop()


@pytest.fixture(scope="module")
def replicated() -> Iterator[Replicated]:
    pair = Replicated()
    try:
        yield pair
    finally:
        pair.stop()


def make_client(pair: Replicated, replica_wait: tuple[int, int] | None,
                namespace: str = "") -> Client:
    """A client that writes a record at enqueue (track_state): on_replica() looks for it."""
    broker = RedisBroker(pair.master.url, namespace=namespace or f"t{uuid.uuid4().hex[:10]}",
                         replica_wait=replica_wait)
    client = Client(broker, track_state=True)

    @client.task(name="jobs.add")
    def add(x: int, y: int) -> int:
        return x + y

    return client


def on_replica(pair: Replicated, client: Client, message_id: str) -> bool:
    replica = redis.Redis(port=pair.replica_port)
    try:
        keys = client.broker.keys.queue("default")  # type: ignore[attr-defined]
        return bool(replica.exists(keys.record(message_id)))
    finally:
        replica.close()


def test_an_enqueue_returns_once_the_replica_has_it(replicated: Replicated) -> None:
    client = make_client(replicated, (1, 5000))
    add = client.registry.get("jobs.add")
    for _ in range(2):  # the queue's first write (with the seen queues), then the next
        handle = client.enqueue(add, (1, 2))
        # WAIT answered: the replica had run the write before enqueue() returned
        assert on_replica(replicated, client, handle.id)
    handles = client.enqueue_many(add, [((i, i), {}) for i in range(50)])
    assert all(on_replica(replicated, client, h.id) for h in handles)
    stats = run_burst(client)
    assert stats.succeeded == 52
    client.broker.close()


def test_too_few_replicas_fail_the_enqueue_naming_the_written_messages(
        replicated: Replicated) -> None:
    client = make_client(replicated, (2, 20))  # one replica only: WAIT answers 1
    add = client.registry.get("jobs.add")
    with pytest.raises(NotReplicated) as caught:
        client.enqueue(add, (1, 2))
    assert (caught.value.acknowledged, caught.value.wanted) == (1, 2)
    assert "1 of the 2 replica(s)" in str(caught.value)
    assert len(caught.value.message_ids) == 1
    with pytest.raises(NotReplicated) as bulk:
        client.enqueue_many(add, [((i, i), {}) for i in range(5)])
    assert len(bulk.value.message_ids) == 5
    # written on the master all the same: a worker runs all six
    stats = run_burst(client)
    assert stats.succeeded == 6
    client.broker.close()


def test_the_async_enqueue_waits_and_raises_the_same(replicated: Replicated) -> None:
    async def scenario() -> None:
        client = make_client(replicated, (1, 5000))
        add = client.registry.get("jobs.add")
        handle = await client.aenqueue(add, (1, 2))
        assert on_replica(replicated, client, handle.id)
        handles = await client.aenqueue_many(add, [((i, i), {}) for i in range(5)])
        assert all(on_replica(replicated, client, h.id) for h in handles)
        await client.broker.aclose()
        strict = make_client(replicated, (2, 20))
        with pytest.raises(NotReplicated):
            await strict.aenqueue(strict.registry.get("jobs.add"), (1, 2))
        with pytest.raises(NotReplicated):
            await strict.aenqueue_many(strict.registry.get("jobs.add"), [((1, 1), {})] * 3)
        await strict.broker.aclose()

    asyncio.run(scenario())


def test_a_settle_too_few_replicas_confirmed_is_logged_and_kept(
        replicated: Replicated, caplog: pytest.LogCaptureFixture) -> None:
    client = make_client(replicated, None)
    add = client.registry.get("jobs.add")
    handles = client.enqueue_many(add, [((i, 1), {}) for i in range(3)])
    namespace = client.broker.keys.namespace  # type: ignore[attr-defined]
    strict = make_client(replicated, (2, 20), namespace)
    with caplog.at_level(logging.WARNING, logger="blitzq.broker"):
        stats = run_burst(strict)
    assert stats.succeeded == 3
    assert [client.get_result(h.id, timeout=1).result for h in handles] == [1, 2, 3]
    warned = [r for r in caplog.records if "settlement(s) written" in r.getMessage()]
    assert warned and "1 of the 2 replica(s)" in warned[0].getMessage()
    assert flusher_log.name == "blitzq.worker"  # the flusher did not treat it as a failure
    assert not [r for r in caplog.records if r.name == "blitzq.worker"
                and r.levelno >= logging.ERROR]
    client.broker.close()


def test_a_script_loaded_again_is_waited_for_too(replicated: Replicated) -> None:
    """NOSCRIPT (a master whose script cache was emptied: a failover, a restart) runs the
    write again after loading the script; its WAIT is sent again after it."""
    client = make_client(replicated, (1, 5000))
    add = client.registry.get("jobs.add")
    client.enqueue(add, (0, 0))  # the seen queues written
    master = redis.Redis(port=replicated.master.port)
    master.script_flush()
    master.close()
    handle = client.enqueue(add, (1, 2))
    assert on_replica(replicated, client, handle.id)
    client.broker.close()


def test_the_wait_op_names_a_key_of_its_queue() -> None:
    op = ops.wait_replicas(1, 100, "bq:{ns:q}:s")
    assert op.command == ("WAIT", 1, 100) and op.keys == ("bq:{ns:q}:s",)
    assert op.result(b"1") == 1 or op.result(1) == 1


@pytest.mark.parametrize("value", [(0, 100), (1, 0), (1, 60_001), (101, 10), (1,), "1/100",
                                   (True, 100), (1, 1.5)])
def test_a_bad_replica_wait_is_refused_at_construction(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="replica_wait"):
        RedisBroker("redis://localhost:1/0", replica_wait=value)


def test_on_each_topology_the_wait_reaches_the_node_that_wrote(
        redis_topology: str, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """One server has no replica: every enqueue raises. On a Sentinel set (2 replicas)
    and a Cluster (1 replica per master, queues on different masters) the WAIT after
    each queue's writes reaches that queue's master, on the connection that wrote."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    queues = ["qa", "qb", "qc", "qd", "qe", "qf"]

    def make(wait: tuple[int, int]) -> tuple[Client, Any]:
        client = Client(RedisBroker(redis_url, namespace=namespace, replica_wait=wait))
        task = client.task(name="jobs.echo")(_echo).spec
        return client, task

    if redis_topology == "redis":
        client, task = make((1, 20))
        with pytest.raises(NotReplicated) as caught:
            client.enqueue(task, (1,))
        assert caught.value.acknowledged == 0
        client.broker.close()
        return
    client, task = make((1, 5000))
    ids = [client.enqueue(task, (i,), call=CallOptions(queue=q)).id
           for i, q in enumerate(queues)]
    for q in queues:
        ids += [h.id for h in client.enqueue_many(task, [((i,), {}) for i in range(20)],
                                                  call=CallOptions(queue=q))]
    stats = run_burst(client, queues=queues)
    assert stats.succeeded == len(ids) == 6 + 6 * 20
    client.broker.close()
    replicas = 2 if redis_topology == "sentinel" else 1
    strict, task = make((replicas + 1, 20))
    with pytest.raises(NotReplicated) as caught:
        strict.enqueue_many(task, [((i,), {}) for i in range(3)], call=CallOptions(queue="qa"))
    assert (caught.value.acknowledged, caught.value.wanted) == (replicas, replicas + 1)
    # the worker's settle batches (redis.asyncio): each WAIT on its queue's master, which
    # has exactly ``replicas`` (a WAIT sent to every master would count them all)
    with caplog.at_level(logging.WARNING, logger="blitzq.broker"):
        assert run_burst(strict, queues=["qa"]).succeeded == 3
    warned = [r.getMessage() for r in caplog.records if "settlement(s)" in r.getMessage()]
    assert warned and all(f"{replicas} of the {replicas + 1}" in m for m in warned)


async def _echo(x: int) -> int:
    return x


def test_min_replicas_to_write_refuses_an_enqueue_naming_noreplicas(
        replicated: Replicated) -> None:
    """docs/redis.md: a master with min-replicas-to-write above its replicas refuses
    writes; the producer sees a BrokerError naming Redis' NOREPLICAS (with or without
    the replica wait)."""
    master = redis.Redis(port=replicated.master.port)
    master.config_set("min-replicas-to-write", 2)
    try:
        for wait in (None, (1, 100)):
            client = make_client(replicated, wait)
            add = client.registry.get("jobs.add")
            with pytest.raises(BrokerError, match="NOREPLICAS") as caught:
                client.enqueue(add, (1, 2))
            assert not isinstance(caught.value, NotReplicated)
            client.broker.close()
    finally:
        master.config_set("min-replicas-to-write", 0)
        master.close()
