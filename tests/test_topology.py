"""The test topologies themselves: a cluster and a Sentinel set that form, fail over
and take a dead node back (the harness the engine's cluster and Sentinel tests use)."""

from __future__ import annotations

import pytest

from .support import topology
from .support.clients import drop_keys, raw_client

pytestmark = pytest.mark.skipif(topology.missing_reason() is not None,
                                reason=str(topology.missing_reason()))


def test_cluster_fails_over_and_takes_the_dead_master_back() -> None:
    with topology.started(topology.Cluster(node_timeout_ms=1000)) as cluster:
        assert len(cluster.masters()) == 3
        owner = cluster.master_of_slot(0)
        dead = cluster.kill_master(0)
        assert dead is owner and not dead.alive
        promoted = cluster.wait_failover(dead)
        assert cluster.master_of_slot(0) is promoted
        cluster.restart(dead)
        assert dead.info("replication")["role"] == "slave"
        assert int(dead.info("replication")["master_port"]) == promoted.port
    assert not any(node.alive for node in cluster.nodes)
    assert not cluster.root.exists()


def test_sentinel_set_fails_over_and_takes_the_dead_master_back() -> None:
    with topology.started(topology.SentinelSet()) as sentinels:
        assert sentinels.url().endswith("/blitzq/0")
        dead = sentinels.kill_master()
        promoted = sentinels.wait_failover(dead)
        assert promoted is not dead and sentinels.master() is promoted
        sentinels.restart(dead)
        assert int(dead.info("replication")["master_port"]) == promoted.port
    assert not any(node.alive for node in sentinels.nodes)
    assert not sentinels.root.exists()


def test_session_urls(cluster_url: str, sentinel_url: str) -> None:
    assert cluster_url.startswith("redis+cluster://127.0.0.1:")
    assert len(cluster_url.split(",")) == 6
    assert sentinel_url.startswith("redis+sentinel://127.0.0.1:")
    port = int(cluster_url.split("//")[1].split(",")[0].split(":")[1])
    assert topology.cluster_info(port)["cluster_state"] == "ok"


def test_a_failing_start_leaves_nothing_behind() -> None:
    cluster = topology.Cluster()
    cluster.nodes[0].args.append("--no-such-option")
    with pytest.raises(topology.TopologyError, match="exited"):
        cluster.start()
    assert not any(node.alive for node in cluster.nodes)
    assert not cluster.root.exists()


def test_drop_keys_empties_every_master_of_a_namespace(cluster_url: str) -> None:
    client = raw_client(cluster_url)
    try:
        keys = [f"tdrop:{{q{n}}}:k" for n in range(30)]  # 30 hash tags: every master
        for key in keys:
            client.set(key, "1")
        client.set("tdropother:k", "1")
        ports = [int(hp.rsplit(":", 1)[1]) for hp in cluster_url.split("//")[1].split(",")]
        masters = [p for p in ports if topology.info(p, "replication")["role"] == "master"]
        assert all(_scan(port, "tdrop:*") for port in masters)
        drop_keys(client, "tdrop:*")
        assert not any(_scan(port, "tdrop:*") for port in masters)
        assert client.get("tdropother:k") == b"1"
        client.delete("tdropother:k")
    finally:
        client.close()


def _scan(port: int, pattern: str) -> list[str]:
    """Every key of one node that matches (SCAN to the end, on that node alone)."""
    found, cursor = [], "0"
    while True:
        cursor, keys = topology.call(port, "SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        found += keys
        if cursor == "0":
            return found


def test_sentinel_discovery_follows_the_newest_configuration(sentinel_url: str) -> None:
    # A sentinel that has not yet heard of a failover names the old master (restarted,
    # it would take writes until made a replica, then drop them): the engine follows
    # the answer with the highest config epoch, not the first one.
    import asyncio

    import redis.sentinel

    from blitzq_django.engine.brokers.redis import topology as engine_topology

    target = engine_topology.parse(sentinel_url)
    service = target.service
    sentinel = engine_topology.Sentinel(list(target.hosts))
    states = [s.sentinel_masters() for s in sentinel.sentinels]
    real = states[0][service]
    assert isinstance(real["config-epoch"], int)  # parsed by redis-py: compared as numbers
    current = (real["ip"], real["port"])
    assert sentinel.discover_master(service) == current
    assert asyncio.run(engine_topology.AsyncSentinel(
        list(target.hosts)).discover_master(service)) == current
    older = {service: {**real, "ip": "10.9.9.9", "port": 1,
                       "config-epoch": real["config-epoch"] - 1}}
    newer = {service: {**real, "port": 2, "config-epoch": real["config-epoch"] + 1}}
    newest = engine_topology._newest_master
    assert newest(sentinel, service, [older, *states]) == current
    assert newest(sentinel, service, [*states, newer, older]) == (real["ip"], 2)
    # Sentinels out of reach are passed over; with none left, the error names them.
    down = redis.exceptions.ConnectionError("refused")
    assert newest(sentinel, service, [down, *states]) == current
    with pytest.raises(redis.sentinel.MasterNotFoundError, match="refused"):
        newest(sentinel, service, [down])
