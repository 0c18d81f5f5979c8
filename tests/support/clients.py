"""A plain redis-py client for any of the test topologies, for tests that look at or
clean up keys behind the broker's back."""

from __future__ import annotations

from typing import Any

from blitzq_django.engine.brokers.redis.topology import sync_client


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
