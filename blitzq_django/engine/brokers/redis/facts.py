"""What the deploy checks read of the Redis server (capabilities.ServerFacts): INFO
server + memory, and the maxmemory-policy from CONFIG GET, else from INFO memory
(managed services often refuse CONFIG); on Sentinel and Cluster also the topology
(``TOPOLOGY`` in the INFO dict: cluster state, replicas, min-replicas-to-write). On a
cluster, INFO is one master's, and the policy the first master's that is not
noeviction."""

from __future__ import annotations

from typing import Any

import redis

from ...errors import BrokerError
from ..capabilities import TOPOLOGY_FACTS
from . import topology
from .ops import Op


def _refused(exc: BrokerError) -> str:
    return str(exc.__cause__ or exc)  # the server's words, not the URL again


def server_facts(run: Any) -> tuple[dict[str, Any], str | None, str]:
    """(INFO server + memory, maxmemory-policy or None, why it is None) through ``run``
    (a SyncStore's): each read may be refused on its own."""
    info: dict[str, Any] = {}
    why = ""
    for section in ("server", "memory"):
        try:
            info.update(run(Op(command=("INFO", section))))
        except BrokerError as exc:
            why = f"INFO {section} failed: {_refused(exc)}"
    policy = None
    try:
        reply = run(Op(command=("CONFIG GET", "maxmemory-policy")))
        policy = reply.get("maxmemory-policy") if isinstance(reply, dict) else None
    except BrokerError as exc:
        why = why or f"CONFIG GET failed: {_refused(exc)}"
    if isinstance(policy, bytes):
        policy = policy.decode()
    if not policy and isinstance(info.get("maxmemory_policy"), str | bytes):
        value = info["maxmemory_policy"]
        policy = value.decode() if isinstance(value, bytes) else value
    if not policy and not why:
        why = "neither CONFIG GET nor INFO memory gave it"
    return info, policy or None, why


#: The key of ``server_facts``'s INFO dict that holds the topology's facts
TOPOLOGY = TOPOLOGY_FACTS


def _each_master(client: Any, command: tuple[str, ...]) -> dict[str, Any]:
    """``command``'s reply from every master of a cluster, by node name ("host:port")."""
    return {node.name: client.execute_command(*command, target_nodes=node)
            for node in client.get_primaries()}


def _min_replicas(replies: list[Any]) -> int | None:
    values = []
    for reply in replies:
        value = reply.get("min-replicas-to-write") if isinstance(reply, dict) else None
        if value is None:
            return None
        values.append(int(value))
    return min(values, default=None)


def topology_facts(client: Any, kind: str) -> dict[str, Any]:
    """What the deploy checks read of a Sentinel or Cluster topology through redis-py's
    ``client`` (sync): {"kind", and for a cluster "cluster_state", "masters",
    "masters_without_replica" (names), for Sentinel "replicas" (connected to the master);
    "min_replicas_to_write" (the lowest of the masters'; None: CONFIG GET refused),
    "error" when a read failed}."""
    facts: dict[str, Any] = {"kind": kind}
    try:
        if kind == topology.CLUSTER:
            facts["cluster_state"] = client.cluster_info().get("cluster_state")
            # Each master's own count of its connected replicas: another node's view
            # of the cluster may lag behind (gossip).
            replicas = _each_master(client, ("INFO", "replication"))
            facts["masters"] = len(replicas)
            facts["masters_without_replica"] = sorted(
                name for name, info in replicas.items()
                if not int(info.get("connected_slaves", 0)))
            config = ("CONFIG GET", "min-replicas-to-write")
            try:
                facts["min_replicas_to_write"] = _min_replicas(
                    list(_each_master(client, config).values()))
            except redis.RedisError:
                facts["min_replicas_to_write"] = None
        elif kind == topology.SENTINEL:
            replication = client.info("replication")
            facts["replicas"] = int(replication.get("connected_slaves", 0))
            try:
                facts["min_replicas_to_write"] = _min_replicas(
                    [client.config_get("min-replicas-to-write")])
            except redis.RedisError:
                facts["min_replicas_to_write"] = None
    except (redis.RedisError, OSError) as exc:
        facts["error"] = str(exc)
    return facts


def cluster_policy(client: Any) -> tuple[str | None, str]:
    """The maxmemory-policy of a cluster: the first master's that is not noeviction,
    else noeviction (every master may be set apart). (None, why) when refused."""
    try:
        replies = _each_master(client, ("CONFIG GET", "maxmemory-policy"))
    except redis.RedisError as exc:
        return None, f"CONFIG GET failed: {exc}"
    policies = [r.get("maxmemory-policy") if isinstance(r, dict) else None
                for r in replies.values()]
    policies = [p.decode() if isinstance(p, bytes) else p for p in policies]
    if not all(policies):
        return None, "CONFIG GET gave no maxmemory-policy on a master"
    return next((p for p in policies if p != "noeviction"), "noeviction"), ""
