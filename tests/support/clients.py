"""A plain redis-py client for any of the test topologies, for tests that look at or
clean up keys behind the broker's back (the engine builds its own clients)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel


def _hosts_and_path(url: str) -> tuple[str | None, list[tuple[str, int]], list[str]]:
    rest = url.split("://", 1)[1]
    netloc, _, path = rest.partition("/")
    password = None
    if "@" in netloc:
        auth, netloc = netloc.rsplit("@", 1)
        password = unquote(auth.split(":", 1)[1]) if ":" in auth else unquote(auth)
    hosts = []
    for part in netloc.split(","):
        host, _, port = part.rpartition(":")
        hosts.append((host, int(port)))
    return password or None, hosts, [p for p in path.split("/") if p]


def raw_client(url: str, **options: Any) -> Any:
    """``redis.Redis`` for ``redis://``, ``RedisCluster`` for ``redis+cluster://``, the
    Sentinel master's ``redis.Redis`` for ``redis+sentinel://h:p,.../service/db``."""
    scheme = url.split("://", 1)[0]
    if scheme in ("redis", "rediss", "unix"):
        return redis.Redis.from_url(url, **options)
    password, hosts, path = _hosts_and_path(url)
    if scheme.endswith("+cluster"):
        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in hosts],
                            password=password, ssl=scheme.startswith("rediss"), **options)
    if scheme.endswith("+sentinel"):
        service = path[0]
        db = int(path[1]) if len(path) > 1 else 0
        sentinel = Sentinel(hosts, sentinel_kwargs={"password": password} if password else None)
        return sentinel.master_for(service, db=db, password=password, **options)
    raise ValueError(f"not a test Redis URL: {url!r}")


def drop_keys(client: Any, pattern: str) -> None:
    """Delete every key matching ``pattern``: SCAN on a cluster client covers every
    master, and its DEL splits the keys by slot."""
    keys = list(client.scan_iter(match=pattern, count=1000))
    if keys:
        client.delete(*keys)
