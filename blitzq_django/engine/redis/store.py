"""Stores run ops on a redis-py client: SyncStore on redis.Redis, AsyncStore on
redis.asyncio.Redis. Same ops, same error mapping, one round trip per call.

Scripts are called by SHA; a NOSCRIPT reply (script cache emptied by a Redis
restart or failover) loads the script and runs only the ops that did not run.
redis-py connection and timeout errors become BrokerUnavailable naming the URL
without its password.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ..errors import BrokerError, BrokerUnavailable
from .ops import Op


def redact(url: str) -> str:
    """The URL with any password (in the user info or the query) replaced by ***."""
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
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k.lower() == "password" else v) for k, v in pairs],
                          safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def client_options(extra: dict[str, Any] | None = None, url: str = "") -> dict[str, Any]:
    options: dict[str, Any] = {
        "health_check_interval": 30,
        "socket_connect_timeout": 5,
        "retry": Retry(ExponentialBackoff(cap=1, base=0.05), retries=3),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
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


def _queue(pipe: Any, op: Op) -> None:
    if op.script is not None:
        pipe.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
    else:
        pipe.execute_command(*op.command)


def _unrun(ops: Sequence[Op], replies: list[Any]) -> list[int]:
    return [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]


def _finish(ops: Sequence[Op], replies: list[Any]) -> list[Any]:
    out = []
    for op, reply in zip(ops, replies, strict=True):
        if isinstance(reply, Exception):
            raise reply
        out.append(op.result(reply))
    return out


class SyncStore:
    def __init__(self, client: redis.Redis, url: str = "") -> None:
        self.client = client
        self.url = url

    @classmethod
    def from_url(cls, url: str, options: dict[str, Any] | None = None) -> SyncStore:
        return cls(redis.Redis.from_url(url, **client_options(options, url)), url)

    def run(self, op: Op) -> Any:
        # try/except rather than `with mapped_errors`: this is every enqueue's path.
        try:
            if op.script is None:
                return op.result(self.client.execute_command(*op.command))
            try:
                reply = self.client.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
            except NoScriptError:
                self.client.script_load(op.script.source)
                reply = self.client.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
            return op.result(reply)
        except REDIS_ERRORS as exc:
            raise mapped(exc, self.url) from exc

    def run_many(self, ops: Sequence[Op]) -> list[Any]:
        """All ops in one round trip (not a transaction: each op is atomic on its own)."""
        if not ops:
            return []
        with mapped_errors(self.url):
            replies = self._pipeline(ops)
            missing = _unrun(ops, replies)
            if missing:
                for script in {ops[i].script.source for i in missing}:  # type: ignore[union-attr]
                    self.client.script_load(script)
                again = self._pipeline([ops[i] for i in missing])
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
            return _finish(ops, replies)

    def _pipeline(self, ops: Sequence[Op]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for op in ops:
            _queue(pipe, op)
        return pipe.execute(raise_on_error=False)

    def close(self) -> None:
        self.client.close()


class AsyncStore:
    def __init__(self, client: redis.asyncio.Redis, url: str = "") -> None:
        self.client = client
        self.url = url

    @classmethod
    def from_url(cls, url: str, options: dict[str, Any] | None = None) -> AsyncStore:
        return cls(redis.asyncio.Redis.from_url(url, **client_options(options, url)), url)

    async def run(self, op: Op) -> Any:
        # try/except rather than `with mapped_errors`: this is every enqueue's path.
        try:
            if op.script is None:
                return op.result(await self.client.execute_command(*op.command))
            try:
                reply = await self.client.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
            except NoScriptError:
                await self.client.script_load(op.script.source)
                reply = await self.client.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
            return op.result(reply)
        except REDIS_ERRORS as exc:
            raise mapped(exc, self.url) from exc

    async def run_many(self, ops: Sequence[Op]) -> list[Any]:
        if not ops:
            return []
        with mapped_errors(self.url):
            replies = await self._pipeline(ops)
            missing = _unrun(ops, replies)
            if missing:
                for script in {ops[i].script.source for i in missing}:  # type: ignore[union-attr]
                    await self.client.script_load(script)
                again = await self._pipeline([ops[i] for i in missing])
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
            return _finish(ops, replies)

    async def _pipeline(self, ops: Sequence[Op]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for op in ops:
            _queue(pipe, op)
        return await pipe.execute(raise_on_error=False)

    async def close(self) -> None:
        await self.client.aclose()
