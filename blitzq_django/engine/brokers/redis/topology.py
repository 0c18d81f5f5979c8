"""Where Redis is: one server, a Sentinel-watched master, or a Redis Cluster; the URLs
that name each, and the redis-py clients (sync and asyncio) that reach them.

=================================================================  =========================
URL                                                                client
=================================================================  =========================
``redis://[[user]:password@]host[:port][/db]``, ``rediss://``,     ``redis.Redis.from_url``
``unix:///path?db=0``
``redis+sentinel://[[user]:password@]host:port[,host:port...]      ``Sentinel(...).master_for
/<service_name>[/<db>]``, ``rediss+sentinel://``                   (service)``
``redis+cluster://[[user]:password@]host:port[,host:port...]``,    ``RedisCluster(startup_
``rediss+cluster://``                                              nodes=...)``
=================================================================  =========================

The URL's password (and user) is the Redis servers' (the master and its replicas, or
every cluster node). ``REDIS_OPTIONS`` (``redis_options``) go to the servers' connections
too, except, on Sentinel, ``sentinel_kwargs`` (a dict: the options of the connections to
the sentinels themselves, e.g. ``{"password": ...}`` when the sentinels have one) and
``min_other_sentinels``. On a cluster, RedisCluster's own options (``read_from_replicas``
is refused: a replica may lag behind its master, and this queue reads what it wrote).
A ``rediss+`` scheme means TLS to the servers (and, unless ``sentinel_kwargs`` says
otherwise, to the sentinels).

Which errors are retried (the rule of store.client_options: never send again a command
that may have run, unless it is idempotent):

- every topology: a connection error (redis-py's ``retry``, 3 times, backoff 50 ms to
  1 s); never a timeout;
- Sentinel: a ``READONLY`` reply (the master this connection knew was demoted) is
  turned by redis-py into a connection error after it drops the connection, and the
  retry reconnects to the master the sentinels name now (:class:`SentinelConnection`:
  redis-py's own went back to the old address). READONLY means nothing was written (a
  replica refuses a script at its first write command, before it writes), so sending
  the call again is safe;
- Cluster: ``MOVED`` and ``ASK`` are followed, ``TRYAGAIN`` re-sent after 50 ms (none
  of these ran the command), ``CLUSTERDOWN`` and a connection error re-read the slot map
  and send again (redis-py, ``cluster_error_retry_attempts``). A timeout is not retried
  (redis-py would: :class:`Cluster` removes it from the retried errors, and the sync
  store's pipelines send again only the commands of ``NOT_RUN``; the async store times
  calls out itself, so redis-py never sees a timeout there).
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.sentinel
import redis.cluster
import redis.connection
import redis.sentinel
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

SINGLE, SENTINEL, CLUSTER = "single", "sentinel", "cluster"

#: scheme -> (topology, TLS)
SCHEMES = {
    "redis": (SINGLE, False), "rediss": (SINGLE, True), "unix": (SINGLE, False),
    "redis+sentinel": (SENTINEL, False), "rediss+sentinel": (SENTINEL, True),
    "redis+cluster": (CLUSTER, False), "rediss+cluster": (CLUSTER, True),
}

#: REDIS_OPTIONS keys that are not the servers' connections' on Sentinel
SENTINEL_OPTIONS = ("sentinel_kwargs", "min_other_sentinels")

DEFAULT_PORTS = {SENTINEL: 26379, CLUSTER: 6379}


@dataclass(frozen=True)
class Target:
    """A parsed Redis URL."""

    kind: str  # SINGLE, SENTINEL or CLUSTER
    tls: bool = False
    hosts: tuple[tuple[str, int], ...] = ()
    username: str | None = None
    password: str | None = None
    service: str = ""  # Sentinel: the master's name
    db: int = 0
    query: dict[str, str] = field(default_factory=dict)


def kind_of(url: str) -> str:
    """SINGLE, SENTINEL or CLUSTER, from the scheme alone (SINGLE when unknown)."""
    scheme = url.partition("://")[0].lower()
    return SCHEMES.get(scheme, (SINGLE, False))[0]


def _split_netloc(netloc: str) -> tuple[str | None, str | None, str]:
    """(user, password, hosts part) of a netloc; user and password unquoted."""
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        return None, None, netloc
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None), hosts


def _host_port(text: str, default: int) -> tuple[str, int]:
    if text.startswith("["):  # [IPv6]:port
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
    if not host:
        raise ValueError("a host is empty")
    try:
        port = int(port_text) if port_text else default
    except ValueError:
        raise ValueError(f"port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is out of range 1-65535")
    return host, port


def parse(url: str) -> Target:
    """The Target of a Sentinel or Cluster URL (a single server's: only its kind and TLS;
    redis-py parses the rest). ValueError, never quoting a password, when it is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError("is not a URL (no scheme://)")
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"has scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    kind, tls = SCHEMES[scheme]
    if kind == SINGLE:
        return Target(kind, tls)
    netloc, _, tail = rest.partition("/")
    netloc, _, query_text = netloc.partition("?")
    path, _, more_query = tail.partition("?")
    query = dict(parse_qsl(query_text or more_query, keep_blank_values=True))
    user, password, hosts_text = _split_netloc(netloc)
    hosts = tuple(_host_port(h.strip(), DEFAULT_PORTS[kind])
                  for h in hosts_text.split(",") if h.strip())
    if not hosts:
        raise ValueError("names no host (host:port[,host:port...])")
    segments = [s for s in path.split("/") if s]
    db = 0
    service = ""
    if kind == SENTINEL:
        if not segments:
            raise ValueError("names no service: redis+sentinel://host:port[,...]/<service>"
                             "[/<db>]")
        service = unquote(segments[0])
        extra = segments[1:]
    else:
        extra = segments
    if "db" in query:
        extra = [*extra, query.pop("db")]
    if len(extra) > 1:
        raise ValueError("has more path segments than /<db>")
    if extra:
        try:
            db = int(extra[0])
        except ValueError:
            raise ValueError(f"database {extra[0]!r} is not a number") from None
        if db < 0:
            raise ValueError("database must be 0 or more")
    if kind == CLUSTER and db:
        raise ValueError(f"names database {db}, but a Redis Cluster has database 0 only")
    return Target(kind, tls, hosts, user, password, service, db, query)


def problem(url: str) -> str | None:
    """What is wrong with a Redis URL of any topology, or None; never repeats the URL."""
    try:
        target = parse(url)
    except ValueError as exc:
        return str(exc)
    if target.kind == SINGLE and not url.lower().startswith("unix:"):
        try:
            urlsplit(url).port  # noqa: B018 - parsed lazily: a bad port raises only here
        except ValueError as exc:
            return "is not a valid URL" + ("" if "@" in str(exc) else f": {exc}")
    return None


def redact(url: str) -> str:
    """The URL with any password (in the user info or the query) replaced by ***."""
    scheme, sep, rest = url.partition("://")
    if sep and SCHEMES.get(scheme.lower(), (SINGLE,))[0] != SINGLE:
        netloc, slash, tail = rest.partition("/")
        netloc, qmark, query = netloc.partition("?")
        if "@" in netloc:
            userinfo, _, hosts = netloc.rpartition("@")
            user, colon, _password = userinfo.partition(":")
            netloc = f"{user}:***@{hosts}" if colon else f"{user}@{hosts}"
        path, q2, query2 = tail.partition("?")
        return (f"{scheme}{sep}{netloc}{qmark}{_redacted_query(query)}{slash}{path}{q2}"
                f"{_redacted_query(query2)}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparsable Redis URL>"
    netloc = parts.netloc
    if parts.password is not None:
        host = parts.hostname or ""
        if ":" in host:  # IPv6
            host = f"[{host}]"
        netloc = f"{parts.username or ''}:***@{host}" + (f":{port}" if port else "")
    return urlunsplit(parts._replace(netloc=netloc, query=_redacted_query(parts.query)))


def _redacted_query(query: str) -> str:
    if not query:
        return query
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, "***" if k.lower() == "password" else v) for k, v in pairs],
                     safe="*")


# -- clients --------------------------------------------------------------------------


#: Cluster replies of a command that did not run (the node does not serve its slot now,
#: or is failing over), or a connection error (sent again, as on one server: see
#: store.client_options): such a command of a pipeline is sent again on its own.
NOT_RUN = (MovedError, AskError, TryAgainError, ClusterDownError, SlotNotCoveredError,
           RedisConnectionError)


class Cluster(redis.cluster.RedisCluster):
    """RedisCluster that does not send a command again after a timeout: it may have run
    (redis-py retries timeouts like connection errors)."""

    ERRORS_ALLOW_RETRY = tuple(  # type: ignore[assignment]
        e for e in redis.cluster.RedisCluster.ERRORS_ALLOW_RETRY if e is not RedisTimeoutError)


class AsyncCluster(redis.asyncio.cluster.RedisCluster):
    """redis.asyncio's RedisCluster with the same rule as :class:`Cluster`."""

    ERRORS_ALLOW_RETRY = tuple(  # type: ignore[assignment]
        e for e in redis.asyncio.cluster.RedisCluster.ERRORS_ALLOW_RETRY
        if e is not RedisTimeoutError)


def _newest_master(sentinel: Any, service: str, states: list[Any]) -> tuple[str, int]:
    """The master of the newest configuration among the sentinels' answers (``states``:
    each one's SENTINEL MASTERS, or the error it raised).

    redis-py takes the first sentinel's answer. One that has not yet heard of a
    failover still names the old master, which, restarted, takes writes until the
    others make it a replica, and then drops them: the answer with the highest config
    epoch is the newest failover's."""
    valid, errors = [], []
    for state in states:
        if isinstance(state, RedisConnectionError | RedisTimeoutError):
            errors.append(f"{type(state).__name__}: {state}")
        elif isinstance(state, BaseException):
            raise state
        else:
            master = state.get(service)
            if master and sentinel.check_master_state(master, service):
                valid.append(master)
    if not valid:
        detail = f": {', '.join(errors)}" if errors else ""
        raise redis.sentinel.MasterNotFoundError(f"No master found for {service!r}{detail}")
    newest = max(valid, key=lambda m: m.get("config-epoch", 0))
    ip = sentinel._force_master_ip if sentinel._force_master_ip is not None else newest["ip"]
    return ip, newest["port"]


class Sentinel(redis.sentinel.Sentinel):
    """redis-py's Sentinel, following the newest configuration (``_newest_master``)."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        states: list[Any] = []
        for sentinel in self.sentinels:
            try:
                states.append(sentinel.sentinel_masters())
            except (RedisConnectionError, RedisTimeoutError) as exc:
                states.append(exc)
        return _newest_master(self, service_name, states)


class AsyncSentinel(redis.asyncio.sentinel.Sentinel):
    """redis.asyncio's Sentinel, following the newest configuration; asks the
    sentinels all at once."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        states = await asyncio.gather(*(s.sentinel_masters() for s in self.sentinels),
                                      return_exceptions=True)
        return _newest_master(self, service_name, list(states))


class SentinelConnection(redis.sentinel.SentinelManagedConnection):
    """Asks the sentinels where the master is at every connect. redis-py asks only when
    the pool hands the connection out: the reconnect of its retry (after a connection
    error, or the READONLY of a demoted master) went back to the old address, so the
    retry could not reach the new master."""

    def connect_check_health(self, check_health: bool = True,
                             retry_socket_connect: bool = True) -> None:
        if self._sock is None and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(check_health=check_health,
                                     retry_socket_connect=retry_socket_connect)


class SentinelSSLConnection(SentinelConnection, redis.connection.SSLConnection):
    pass


class AsyncSentinelConnection(redis.asyncio.sentinel.SentinelManagedConnection):
    """:class:`SentinelConnection` for redis.asyncio."""

    async def connect_check_health(self, check_health: bool = True,
                                   retry_socket_connect: bool = True) -> None:
        if not self.is_connected and self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super().connect_check_health(check_health=check_health,
                                           retry_socket_connect=retry_socket_connect)


class AsyncSentinelSSLConnection(AsyncSentinelConnection,
                                 redis.asyncio.connection.SSLConnection):
    pass


def _query_options(query: dict[str, str]) -> dict[str, Any]:
    parsers: dict[str, Any] = dict(redis.connection.URL_QUERY_ARGUMENT_PARSERS)
    out: dict[str, Any] = {}
    for name, value in query.items():
        parser = parsers.get(name)
        if parser is None:
            raise ValueError(f"has query option {name!r}, which redis-py does not know")
        out[name] = parser(value)
    return out


def _server_options(target: Target, options: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in options.items() if k not in SENTINEL_OPTIONS}
    out.update(_query_options(target.query))
    if target.username is not None:
        out.setdefault("username", target.username)
    if target.password is not None:
        out.setdefault("password", target.password)
    if target.tls:
        out.setdefault("ssl", True)
    return out


def _sentinel_kwargs(target: Target, options: dict[str, Any]) -> dict[str, Any]:
    given = options.get("sentinel_kwargs")
    if given is not None:
        return dict(given)
    # As redis-py does without sentinel_kwargs, but with TLS, keepalive and the retry too.
    kept = ("socket_", "retry", "ssl", "health_check_interval")
    out = {k: v for k, v in options.items() if k.startswith(kept)}
    if target.tls:
        out.setdefault("ssl", True)
    return out


def _async_cluster_options(options: dict[str, Any]) -> dict[str, Any]:
    # redis.asyncio's RedisCluster takes named parameters only (the sync one drops what
    # it does not know): leave out what it has no parameter for.
    known = inspect.signature(redis.asyncio.cluster.RedisCluster.__init__).parameters
    return {k: v for k, v in options.items() if k in known}


def _check_cluster_options(options: dict[str, Any]) -> None:
    if options.get("read_from_replicas") or options.get("load_balancing_strategy"):
        raise ValueError("REDIS_OPTIONS: reading from replicas is not supported (a "
                         "replica lags behind its master; the queue reads what it wrote)")


def sync_client(url: str, options: dict[str, Any]) -> Any:
    """redis.Redis (one server; a Sentinel-watched master) or :class:`Cluster`."""
    kind = kind_of(url)
    if kind == SINGLE:
        return redis.Redis.from_url(url, **options)
    target = parse(url)
    server = _server_options(target, options)
    if kind == SENTINEL:
        sentinel = Sentinel(
            list(target.hosts), min_other_sentinels=options.get("min_other_sentinels", 0),
            sentinel_kwargs=_sentinel_kwargs(target, options), **server)
        return sentinel.master_for(target.service, db=target.db, connection_class=(
            SentinelSSLConnection if server.get("ssl") else SentinelConnection))
    _check_cluster_options(server)
    server.pop("db", None)
    return Cluster(startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in target.hosts],
                   **server)


def async_client(url: str, options: dict[str, Any]) -> Any:
    """redis.asyncio.Redis (one server; a Sentinel-watched master) or AsyncCluster."""
    kind = kind_of(url)
    if kind == SINGLE:
        return redis.asyncio.Redis.from_url(url, **options)
    target = parse(url)
    server = _server_options(target, options)
    if kind == SENTINEL:
        sentinel = AsyncSentinel(
            list(target.hosts), min_other_sentinels=options.get("min_other_sentinels", 0),
            sentinel_kwargs=_sentinel_kwargs(target, options), **server)
        return sentinel.master_for(target.service, db=target.db, connection_class=(
            AsyncSentinelSSLConnection if server.get("ssl") else AsyncSentinelConnection))
    _check_cluster_options(server)
    server.pop("db", None)
    return AsyncCluster(
        startup_nodes=[redis.asyncio.cluster.ClusterNode(h, p) for h, p in target.hosts],
        **_async_cluster_options(server))


def is_cluster(client: Any) -> bool:
    return isinstance(client, redis.cluster.RedisCluster
                      | redis.asyncio.cluster.RedisCluster)


def option_names() -> frozenset[str]:
    """The REDIS_OPTIONS keys that only Sentinel or Cluster URLs take."""
    names = set(SENTINEL_OPTIONS)
    for cls in (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster):
        names.update(p.name for p in inspect.signature(cls.__init__).parameters.values()
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    names.discard("self")
    return frozenset(names)


__all__ = ["CLUSTER", "SENTINEL", "SINGLE", "Target", "async_client", "kind_of", "parse",
           "problem", "redact", "sync_client"]
