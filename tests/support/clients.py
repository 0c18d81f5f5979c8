"""A plain redis-py client for any of the test topologies, for tests that look at or
clean up keys behind the broker's back."""

from __future__ import annotations

from typing import Any

from blitzq_django.engine.brokers.redis.topology import is_cluster, sync_client


def raw_client(url: str, **options: Any) -> Any:
    """``redis.Redis`` for ``redis://`` and for the master of ``redis+sentinel://``, a
    ``RedisCluster`` for ``redis+cluster://``: the engine's own choice of client, without
    the broker around it."""
    return sync_client(url, options)


def drop_keys(client: Any, pattern: str) -> None:
    """Delete every key matching ``pattern``: SCAN on a cluster client covers every
    master, and its DEL splits the keys by slot."""
    keys = list(client.scan_iter(match=pattern, count=1000))
    if keys:
        client.delete(*keys)


# -- looking at the servers behind a client: on a cluster, the node that owns the key
# (the broker's channels are shard channels there) or every master -------------------


def client_list(client: Any) -> list[dict[str, Any]]:
    """CLIENT LIST of the server, or of every master of a cluster."""
    if not is_cluster(client):
        return list(client.client_list())
    per_node = client.client_list(target_nodes=client.get_primaries())
    if isinstance(per_node, dict):
        return [entry for entries in per_node.values() for entry in entries]
    return list(per_node)


def info_of(client: Any, key: str, section: str) -> dict[str, Any]:
    """INFO of the server that holds ``key`` (on a cluster, the master of its slot)."""
    if is_cluster(client):
        return dict(client.info(section, target_nodes=client.get_node_from_key(key)))
    return dict(client.info(section))


def subscribers(client: Any, channel: str) -> int:
    """How many connections listen on one of the broker's channels (PUBSUB NUMSUB; on
    a cluster PUBSUB SHARDNUMSUB on the node that owns the channel's slot)."""
    if is_cluster(client):
        reply = client.execute_command("PUBSUB SHARDNUMSUB", channel,
                                       target_nodes=client.get_node_from_key(channel))
    else:
        reply = client.execute_command("PUBSUB NUMSUB", channel)
    if isinstance(reply, dict):
        return int(next(iter(reply.values()), 0))
    counts = dict(zip(reply[::2], reply[1::2], strict=True)) if reply and not isinstance(
        reply[0], (list, tuple)) else dict(reply)
    return int(next(iter(counts.values()), 0))


class Listener:
    """A subscription to one of the broker's channels (SSUBSCRIBE on a cluster)."""

    def __init__(self, client: Any, channel: str) -> None:
        self.sharded = is_cluster(client)
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        if self.sharded:
            self.pubsub.ssubscribe(channel)
        else:
            self.pubsub.subscribe(channel)

    def get(self, timeout: float) -> dict[str, Any] | None:
        if self.sharded:
            return self.pubsub.get_sharded_message(timeout=timeout)  # type: ignore[no-any-return]
        return self.pubsub.get_message(timeout=timeout)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.pubsub.close()
