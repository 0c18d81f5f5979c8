"""Reconnect after a failover, by itself (issue 21): a producer and a running worker keep
their broker across a Sentinel failover and a cluster master failover (SIGKILL of the
master), and work on the new master without being rebuilt.

What a failover may lose (writes the dead master acknowledged and had not replicated) is
measured by the failover ledger (h21-failover), not here: these tests only wait for each
write made after the failover to run."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import key_slot

from blitzq_django.engine import Client, RedisBroker

from ..engine.helpers import background_worker
from ..support import topology

pytestmark = pytest.mark.fault


def _topology_or_skip(made: Any) -> Iterator[Any]:
    why = topology.missing_reason()
    if why:
        pytest.skip(why)
    with topology.started(made) as up:
        yield up


@pytest.fixture
def sentinels() -> Iterator[topology.SentinelSet]:
    yield from _topology_or_skip(topology.SentinelSet())


@pytest.fixture
def cluster() -> Iterator[topology.Cluster]:
    yield from _topology_or_skip(topology.Cluster(node_timeout_ms=1000))


async def _survive(client: Client, kill: Any, queue: str) -> None:
    """A worker runs across ``kill()`` (kills the master, waits for the failover):
    messages enqueued before and after, on the same client, all run."""

    @client.task(name="echo", queue=queue)
    async def echo(x: int) -> int:
        return x

    async with background_worker(client, queues=[queue]):
        before = await echo.aenqueue(1)
        assert (await client.aget_result(before.id, 10, queue=queue)).result == 1
        await asyncio.get_running_loop().run_in_executor(None, kill)
        after = await echo.aenqueue(2)  # the old connection is gone: reconnected
        assert (await client.aget_result(after.id, 30, queue=queue)).result == 2
        # and the sync producer, whose connection also pointed at the dead master
        handle = await asyncio.get_running_loop().run_in_executor(None, echo.enqueue, 3)
        assert (await client.aget_result(handle.id, 30, queue=queue)).result == 3


def test_sentinel_failover(sentinels: topology.SentinelSet) -> None:
    client = Client(RedisBroker(sentinels.url(), namespace="failover"))
    client.broker.ping()  # the sync connection is made before the master dies

    def kill() -> None:
        sentinels.wait_failover(sentinels.kill_master())

    asyncio.run(_survive(client, kill, "q"))


def test_cluster_master_failover(cluster: topology.Cluster) -> None:
    queue = "q"
    slot = key_slot(f"bq:{{failover:{queue}}}:s".encode())
    client = Client(RedisBroker(cluster.url, namespace="failover"))
    client.broker.ping()

    def kill() -> None:
        cluster.wait_failover(cluster.kill_master(slot))

    asyncio.run(_survive(client, kill, queue))


def test_sentinel_demoted_master_sends_writes_to_the_new_one(
        sentinels: topology.SentinelSet) -> None:
    """SENTINEL FAILOVER demotes the master with every connection to it open: the next
    write there is answered READONLY (it did not run), and goes to the new master, at
    once, sync and async."""
    client = Client(RedisBroker(sentinels.url(), namespace="demoted"))

    @client.task(name="echo", queue="q")
    async def echo(x: int) -> int:
        return x

    def demote() -> topology.Node:
        old = sentinels.master()
        sentinels.sentinels[0].call("SENTINEL", "FAILOVER", sentinels.service)
        topology.wait_for(lambda: topology.info(old.port, "replication").get("role")
                          == "slave" and sentinels.sentinels_agree() not in (None, old.port),
                          30, "the master to be demoted")
        return sentinels.master()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        await echo.aenqueue(1)
        await loop.run_in_executor(None, echo.enqueue, 2)  # both hold a connection
        new = await loop.run_in_executor(None, demote)
        await echo.aenqueue(3)
        await loop.run_in_executor(None, echo.enqueue, 4)
        ready = new.call("XLEN", "bq:{demoted:q}:s")
        assert ready == 4, ready  # the 2 before (replicated) and the 2 after

    asyncio.run(main())
