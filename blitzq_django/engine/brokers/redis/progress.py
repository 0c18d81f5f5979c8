"""Progress reports on Redis (capabilities.ProgressStore): one hash per message
(``QueueKeys.progress``, the TTL of records) and its channel
(``QueueKeys.progress_channel``), which ``watch`` subscribes to with the message's done
channel."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from .keys import QueueKeys
from .ops import Op
from .store import mapped_errors


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _hash(reply: Any) -> dict[str, str]:
    if isinstance(reply, dict):
        return {_text(k): _text(v) for k, v in reply.items()}
    items = list(reply or [])
    return {_text(items[i]): _text(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def write(keys: QueueKeys, message_id: str, fields: Mapping[str, str], ttl_ms: int,
          publish: bytes | None, verb: str = "PUBLISH") -> list[Op]:
    """``verb``: PUBLISH, or SPUBLISH on a cluster (the channel is the queue's)."""
    key = keys.progress(message_id)
    flat: list[Any] = []
    for name, value in fields.items():
        flat += [name, value]
    out = [Op(command=("HSET", key, *flat)), Op(command=("PEXPIRE", key, ttl_ms))]
    if publish is not None:
        out.append(Op(command=(verb, keys.progress_channel(message_id), publish)))
    return out


def read(keys: QueueKeys, message_id: str) -> Op:
    return Op(command=("HGETALL", keys.progress(message_id)), parse=_hash)


class _Watch:
    def __init__(self, pubsub: Any, url: str) -> None:
        self._pubsub, self._url = pubsub, url

    async def wait(self, timeout: float) -> None:
        with mapped_errors(self._url):
            await self._pubsub.get(timeout)


class RedisProgressStore:
    def __init__(self, broker: Any) -> None:
        self._broker = broker

    def _keys(self, queue: str) -> QueueKeys:
        return self._broker.keys.queue(queue)

    def write(self, queue: str, message_id: str, fields: Mapping[str, str]) -> None:
        self._broker.sync.run_many(write(self._keys(queue), message_id, fields,
                                         self._broker.record_ttl * 1000, None))

    async def awrite(self, queue: str, message_id: str, fields: Mapping[str, str],
                     publish: bytes | None = None) -> None:
        await self._broker.aio.run_many(write(self._keys(queue), message_id, fields,
                                              self._broker.record_ttl * 1000, publish,
                                              self._broker.publish))

    def read(self, queue: str, message_id: str) -> dict[str, str]:
        return self._broker.sync.run(read(self._keys(queue), message_id))

    async def aread(self, queue: str, message_id: str) -> dict[str, str]:
        return await self._broker.aio.run(read(self._keys(queue), message_id))

    def read_many(self, which: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        return self._broker.sync.run_many([read(self._keys(q), i) for q, i in which])

    async def aread_many(self, which: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        return await self._broker.aio.run_many([read(self._keys(q), i) for q, i in which])

    @contextlib.asynccontextmanager
    async def watch(self, queue: str, message_id: str) -> AsyncIterator[_Watch]:
        keys, url = self._keys(queue), self._broker.url
        with mapped_errors(url):
            pubsub = self._broker.aio.listener(sharded=True)
            await pubsub.subscribe(keys.progress_channel(message_id),
                                   keys.done_channel(message_id))
        try:
            yield _Watch(pubsub, url)
        finally:
            await pubsub.aclose()
