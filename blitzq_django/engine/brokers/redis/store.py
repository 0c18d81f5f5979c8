"""Stores run ops on a redis-py client: SyncStore on redis.Redis, AsyncStore on
redis.asyncio.Redis. Same ops, same error mapping, one round trip per call, except
``run_streamed``: groups of ops on one connection, each group sent before the previous
one's replies are read, so that Redis runs one group while this process packs the next.

Scripts are called by SHA; a NOSCRIPT reply (script cache emptied by a Redis
restart or failover) loads the script and runs only the ops that did not run.
redis-py connection and timeout errors become BrokerUnavailable naming the URL
without its password.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.cluster
import redis.sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ...errors import BrokerError, BrokerUnavailable
from . import topology
from .ops import Op
from .topology import redact

#: Longest one Redis call waits for its reply (``redis_options`` may change it), so a
#: stalled server or a black-holed network costs a caller this much, not forever. It must
#: be longer than the longest command that blocks on purpose: the worker's XREADGROUP
#: BLOCK (``block_timeout``, 1 s by default, a few seconds at most), else every idle
#: fetch would fail as a timeout.
SOCKET_TIMEOUT_S = 10.0


def client_options(extra: dict[str, Any] | None = None, url: str = "", *,
                   aio: bool = False) -> dict[str, Any]:
    """Keyword arguments of a redis-py client: redis.asyncio's when ``aio``."""
    # Retry connection errors only: a dropped idle connection (a Redis restart, a proxy's
    # idle timeout) is reopened and the command sent again after a short backoff. Never a
    # timeout: the command may have run (a re-sent XADD is a second message), and each
    # retry would add another socket_timeout to the caller's wait. On Sentinel and on a
    # cluster the same rule holds, and what else is retried there is listed in
    # topology.py's docstring (READONLY, MOVED, ASK, TRYAGAIN, CLUSTERDOWN).
    retry_class = AsyncRetry if aio else Retry
    options: dict[str, Any] = {
        "health_check_interval": 30,
        "socket_connect_timeout": 5,
        "socket_timeout": SOCKET_TIMEOUT_S,
        "retry": retry_class(ExponentialBackoff(cap=1, base=0.05), retries=3,
                             supported_errors=(RedisConnectionError,)),
        "retry_on_error": [RedisConnectionError],
    }
    if not url.startswith("unix:"):  # redis-py refuses TCP keepalive on unix sockets
        options["socket_keepalive"] = True
    options.update(extra or {})
    return options


REDIS_ERRORS = (redis.RedisError, OSError)


def mapped(exc: BaseException, url: str) -> BrokerError:
    """The blitzq error for a redis-py (or socket) error."""
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError):
        return BrokerUnavailable(f"cannot reach Redis at {redact(url)}: {exc}")
    return BrokerError(f"Redis at {redact(url)} refused a command: {exc}")


@contextlib.contextmanager
def mapped_errors(url: str) -> Iterator[None]:
    try:
        yield
    except REDIS_ERRORS as exc:
        raise mapped(exc, url) from exc


def dedicated_pool(client: Any, seconds: float, key: str = "") -> redis.ConnectionPool:
    """A pool of new connections set up like ``client``'s (to the node holding ``key``
    on a cluster, to the current master on Sentinel), none of which waits more than
    ``seconds`` to connect or for a reply: for a wait that must end by a deadline."""
    if topology.is_cluster(client):
        client = client.get_redis_connection(client.get_node_from_key(key))
    pool = client.connection_pool
    kwargs = dict(pool.connection_kwargs)
    connection_class = pool.connection_class
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        # The master as the sentinels name it now; a failover during the wait fails it.
        kwargs.pop("connection_pool", None)
        kwargs["host"], kwargs["port"] = pool.get_master_address()
        connection_class = (redis.SSLConnection if issubclass(
            connection_class, redis.connection.SSLConnection) else redis.Connection)
    seconds = max(seconds, 0.001)  # a deadline already past: the first read times out
    for name in ("socket_timeout", "socket_connect_timeout"):
        kwargs[name] = min(kwargs.get(name) or seconds, seconds)
    return redis.ConnectionPool(connection_class=connection_class, **kwargs)


def run_until(connection: Any, op: Op, deadline: float) -> Any:
    """A plain-command op on ``connection``; redis TimeoutError if no reply by ``deadline``
    (time.monotonic()). The connection must be dropped after a timeout."""
    connection.send_command(*op.command)
    if not connection.can_read(timeout=max(deadline - time.monotonic(), 0.0)):
        raise RedisTimeoutError(f"no reply to {op.command[0]!s} before the deadline")
    return op.result(connection.read_response())


def _name(op: Op) -> Any:
    return op.command[0] if op.script is None else "EVALSHA"


def _command(op: Op) -> tuple[Any, ...]:
    if op.script is None:
        return op.command
    return ("EVALSHA", op.script.sha, len(op.keys), *op.keys, *op.args)


def _queue(pipe: Any, op: Op, cluster: Any = None) -> None:
    if cluster is not None and op.keys and op.command[:1] == ("WAIT",):
        # A cluster pipeline cannot route a keyless command (redis.asyncio's would send
        # it to some node): WAIT goes to the node of the key it names, after that
        # node's writes, on their connection.
        pipe.execute_command(*op.command, target_nodes=cluster.get_node_from_key(op.keys[0]))
        return
    pipe.execute_command(*_command(op))


def _unrun(ops: Sequence[Op], replies: list[Any]) -> list[int]:
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:  # a WAIT after a write run again must wait for that write too
        waits = [i for i in range(missing[0] + 1, len(ops))
                 if ops[i].command[:1] == ("WAIT",) and i not in missing]
        missing = sorted(missing + waits)
    return missing


def _pooled(pool: Any) -> Any:
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        return pool.get_connection("EVALSHA")


async def _apooled(pool: Any) -> Any:
    try:
        return await pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        return await pool.get_connection("EVALSHA")


def _sentinels(client: Any) -> list[Any]:
    """The clients of the sentinels a Sentinel-watched master's pool asks (else [])."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(getattr(manager, "sentinels", ()))


def _finish(ops: Sequence[Op], replies: list[Any]) -> list[Any]:
    out = []
    for op, reply in zip(ops, replies, strict=True):
        if isinstance(reply, Exception):
            raise reply
        out.append(op.result(reply))
    return out


class SyncStore:
    """``run`` uses a connection the calling thread keeps (one of ``client``'s pool, given
    back when the thread ends): taking a connection from redis-py's pool and giving it
    back cost about a fifth of a lone command's time (~20 µs of ~100 µs for an XADD on
    loopback). The other calls use ``client`` as it is."""

    def __init__(self, client: redis.Redis, url: str = "") -> None:
        self.client = client
        self.url = url
        self._local = threading.local()
        #: a Redis Cluster: commands are routed by redis-py, one node per slot
        self.cluster = topology.is_cluster(client)
        # A cluster keeps a pool per node: no connection of a thread's own. Replaced here
        # rather than tested in _own(), which is every enqueue's path on one server.
        if self.cluster:
            self._own = lambda: client  # type: ignore[method-assign]

    @classmethod
    def from_url(cls, url: str, options: dict[str, Any] | None = None) -> SyncStore:
        return cls(topology.sync_client(url, client_options(options, url)), url)

    def _own(self) -> redis.Redis:
        """This thread's client, made again in a forked child (the parent's connection is
        not its own: redis-py closes the child's copy without shutting the socket down)."""
        # On Sentinel, the kept connection asks the sentinels for the master whenever it
        # reconnects (topology.SentinelConnection). A cluster: see __init__.
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            local.client = redis.Redis(connection_pool=self.client.connection_pool,
                                       single_connection_client=True)
            local.pid = os.getpid()
        return local.client

    def run(self, op: Op) -> Any:
        # try/except rather than `with mapped_errors`: this is every enqueue's path.
        try:
            client = self._own()
            if op.script is None:
                return op.result(client.execute_command(*op.command))
            command = _command(op)
            try:
                reply = client.execute_command(*command)
            except NoScriptError:
                client.script_load(op.script.source)
                reply = client.execute_command(*command)
            return op.result(reply)
        except REDIS_ERRORS as exc:
            raise mapped(exc, self.url) from exc

    def run_many(self, ops: Sequence[Op]) -> list[Any]:
        """All ops in one round trip (not a transaction: each op is atomic on its own)."""
        if not ops:
            return []
        with mapped_errors(self.url):
            return self._settled(ops, self._pipeline(ops))

    def _settled(self, ops: Sequence[Op], replies: list[Any]) -> list[Any]:
        """The results of ``ops`` from their ``replies``, after loading the scripts a
        NOSCRIPT reply names and running again the ops it stopped."""
        missing = _unrun(ops, replies)
        if missing:
            for script in {ops[i].script.source for i in missing  # type: ignore[union-attr]
                           if ops[i].script is not None}:
                self.client.script_load(script)
            again = self._pipeline([ops[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return _finish(ops, replies)

    def _pipeline(self, ops: Sequence[Op]) -> list[Any]:
        if self.cluster:
            return self._cluster_pipeline(ops)
        pipe = self.client.pipeline(transaction=False)
        for op in ops:
            _queue(pipe, op)
        return pipe.execute(raise_on_error=False)

    def _routed(self, op: Op) -> dict[str, Any]:
        """A cluster pipeline cannot route a keyless command: a WAIT (replica_wait) goes
        to the node of the key it names, after that node's writes, on their connection."""
        if op.keys and op.command[:1] == ("WAIT",):
            cluster: Any = self.client
            return {"target_nodes": cluster.get_node_from_key(op.keys[0])}
        return {}

    def _cluster_pipeline(self, ops: Sequence[Op]) -> list[Any]:
        # redis-py's cluster pipeline sends again, one at a time, every command whose node
        # answered MOVED, ASK... or timed out: not a timed-out one here (it may have run).
        pipe = self.client.pipeline(transaction=False)
        replies = list(pipe.send_cluster_commands(  # type: ignore[attr-defined]
            [redis.cluster.PipelineCommand(_command(op), self._routed(op), i)
             for i, op in enumerate(ops)],
            raise_on_error=False, allow_redirections=False))
        for i, reply in enumerate(replies):
            if isinstance(reply, topology.NOT_RUN) and ops[i].command[:1] == ("WAIT",):
                # Sent again, on another connection, a WAIT would count that connection's
                # writes (none), not those it follows: they are not known to be confirmed.
                # Its node is gone or moved: read the slot map again for the next call.
                replies[i] = 0
                with contextlib.suppress(redis.RedisError, OSError):
                    cluster: Any = self.client
                    cluster.nodes_manager.initialize()
            elif isinstance(reply, topology.NOT_RUN):
                try:
                    replies[i] = self.client.execute_command(*_command(ops[i]))
                except (redis.RedisError, OSError) as exc:
                    replies[i] = exc
        return replies

    def run_streamed(self, groups: Sequence[Sequence[Op]]) -> list[Any]:
        """Every op's result, in order, as run_many() of all groups would give, but each
        group is sent before the previous one's replies are read (one connection): Redis
        runs a group while this process packs the next and parses the last. Not a
        transaction, and an error of one op does not stop the others."""
        with mapped_errors(self.url):
            ops = [op for group in groups for op in group]
            if self.cluster:  # no one connection reaches every slot: a pipeline per group
                return self._settled(ops, [r for g in groups for r in self._pipeline(g)])
            return self._settled(ops, self._streamed(groups))

    def _streamed(self, groups: Sequence[Sequence[Op]]) -> list[Any]:
        pool, parse = self.client.connection_pool, self.client.parse_response
        connection = _pooled(pool)
        replies: list[Any] = []

        def read(group: Sequence[Op]) -> None:
            for op in group:
                try:
                    replies.append(parse(connection, _name(op)))
                except ResponseError as exc:
                    replies.append(exc)

        def stream() -> list[Any]:
            replies.clear()
            previous: Sequence[Op] = ()
            for group in groups:
                connection.send_packed_command(
                    connection.pack_commands([_command(op) for op in group]))
                read(previous)
                previous = group
            read(previous)
            return replies

        def fail(error: Exception) -> None:
            connection.disconnect()
            if replies:  # some groups ran: sending them again would write them twice
                raise error

        try:
            # As redis-py retries a command: a connection error reconnects and sends
            # again (a Redis restart), but only while no reply has come back.
            return connection.retry.call_with_retry(stream, fail)
        except BaseException:
            connection.disconnect()  # replies may be left unread on it
            raise
        finally:
            pool.release(connection)

    def close(self) -> None:
        self.client.close()
        for sentinel in _sentinels(self.client):  # their connections are not the pool's
            sentinel.close()


#: A shard subscription spread over several cluster nodes is read node after node, this
#: long on each: the longest a publish waits to be seen beside the others' waits.
SHARD_SLICE_S = 0.1


class Listener:
    """Publishes on some channels, for redis.asyncio: PUBLISH/SUBSCRIBE, or on a cluster
    for a queue's channels SPUBLISH/SSUBSCRIBE (``sharded``: served by the node of the
    channel's slot; classic channels are broadcast to every node of a cluster)."""

    def __init__(self, client: Any, sharded: bool) -> None:
        self._client = client
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)
        self._sharded = sharded

    async def subscribe(self, *channels: str) -> None:
        if topology.is_cluster(self._client):
            # the slot map, which a first command would have read (the channels' nodes)
            await self._client.initialize()
        if self._sharded:
            await self._pubsub.ssubscribe(*channels)
        else:
            await self._pubsub.subscribe(*channels)

    async def get(self, timeout: float) -> dict[str, Any] | None:
        """The next message published (None after ``timeout`` s, or a control message)."""
        if not self._sharded:
            message = await self._pubsub.get_message(timeout=timeout)
        else:
            nodes = len(getattr(self._pubsub, "node_pubsub_mapping", ())) or 1
            if nodes == 1:
                message = await self._pubsub.get_sharded_message(timeout=timeout)
            else:
                # redis-py reads the nodes' connections one at a time, each for timeout
                loop = asyncio.get_running_loop()
                deadline = loop.time() + timeout
                while True:
                    message = await self._pubsub.get_sharded_message(
                        timeout=min(SHARD_SLICE_S, max(deadline - loop.time(), 0.0)))
                    if message is not None or loop.time() >= deadline:
                        break
        if message is None or message.get("type") not in ("message", "smessage"):
            return None
        return message

    async def aclose(self) -> None:
        await self._pubsub.aclose()


class AsyncStore:
    """Runs ops on redis.asyncio. The socket timeout is applied here, once per call, not
    by redis-py: redis.asyncio wraps every reply it reads (each command of a pipeline) in
    a timeout of its own, which cost the worker over a tenth of its throughput. A call
    cut off by it drops its connection (redis-py disconnects on cancellation)."""

    def __init__(self, client: redis.asyncio.Redis, url: str = "",
                 timeout: float | None = None) -> None:
        self.client = client
        self.url = url
        self.timeout = timeout
        self.cluster = topology.is_cluster(client)

    @classmethod
    def from_url(cls, url: str, options: dict[str, Any] | None = None) -> AsyncStore:
        kwargs = client_options(options, url, aio=True)
        timeout = kwargs.pop("socket_timeout", None)
        # None, not left out: redis-py 8 would apply its own 5 s default to every read,
        # and fail the worker's blocking reads.
        kwargs["socket_timeout"] = None
        return cls(topology.async_client(url, kwargs), url, timeout)

    async def run(self, op: Op) -> Any:
        # try/except rather than `with mapped_errors`: this is every enqueue's path.
        # (asyncio's TimeoutError is an OSError: it maps to BrokerUnavailable.)
        try:
            async with asyncio.timeout(self.timeout):
                if op.script is None:
                    return op.result(await self.client.execute_command(*op.command))
                command = _command(op)
                try:
                    reply = await self.client.execute_command(*command)
                except NoScriptError:
                    await self.client.script_load(op.script.source)
                    reply = await self.client.execute_command(*command)
                return op.result(reply)
        except REDIS_ERRORS as exc:
            raise mapped(exc, self.url) from exc

    async def run_many(self, ops: Sequence[Op]) -> list[Any]:
        if not ops:
            return []
        with mapped_errors(self.url):
            async with asyncio.timeout(self.timeout):
                return await self._run_many(ops)

    async def _run_many(self, ops: Sequence[Op]) -> list[Any]:
        return await self._settled(ops, await self._pipeline(ops))

    async def _settled(self, ops: Sequence[Op], replies: list[Any]) -> list[Any]:
        missing = _unrun(ops, replies)
        if missing:
            for script in {ops[i].script.source for i in missing  # type: ignore[union-attr]
                           if ops[i].script is not None}:
                await self.client.script_load(script)
            again = await self._pipeline([ops[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return _finish(ops, replies)

    async def _pipeline(self, ops: Sequence[Op]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        cluster = self.client if self.cluster else None
        for op in ops:
            _queue(pipe, op, cluster)
        return await pipe.execute(raise_on_error=False)

    async def run_streamed(self, groups: Sequence[Sequence[Op]]) -> list[Any]:
        """SyncStore.run_streamed() on redis.asyncio."""
        with mapped_errors(self.url):
            async with asyncio.timeout(self.timeout):
                ops = [op for group in groups for op in group]
                if self.cluster:
                    return await self._settled(
                        ops, [r for g in groups for r in await self._pipeline(g)])
                return await self._settled(ops, await self._streamed(groups))

    async def _streamed(self, groups: Sequence[Sequence[Op]]) -> list[Any]:
        pool, parse = self.client.connection_pool, self.client.parse_response
        connection = await _apooled(pool)
        replies: list[Any] = []

        async def read(group: Sequence[Op]) -> None:
            for op in group:
                try:
                    replies.append(await parse(connection, _name(op)))
                except ResponseError as exc:
                    replies.append(exc)

        async def stream() -> list[Any]:
            replies.clear()
            previous: Sequence[Op] = ()
            for group in groups:
                await connection.send_packed_command(
                    connection.pack_commands([_command(op) for op in group]))
                await read(previous)
                previous = group
            await read(previous)
            return replies

        async def fail(error: Exception) -> None:
            await connection.disconnect()
            if replies:
                raise error

        try:
            return await connection.retry.call_with_retry(stream, fail)
        except BaseException:
            await connection.disconnect()  # replies may be left unread on it
            raise
        finally:
            await pool.release(connection)

    def listener(self, sharded: bool = False) -> Listener:
        """A new subscription (a connection of its own): ``sharded`` for a queue's
        channels, which are shard channels on a cluster."""
        return Listener(self.client, sharded and self.cluster)

    async def close(self) -> None:
        await self.client.aclose()
        for sentinel in _sentinels(self.client):
            await sentinel.aclose()
