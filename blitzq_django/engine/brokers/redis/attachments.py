"""Values kept beside a message on Redis (capabilities.AttachmentStore): one string per
message with a TTL (``QueueKeys.django_call``), read with its record by one MGET."""

from __future__ import annotations

from typing import Any

from . import ops
from .ops import Op


class RedisAttachmentStore:
    def __init__(self, broker: Any) -> None:
        self._broker = broker

    def _set(self, queue: str, message_id: str, data: bytes, ttl_ms: int) -> Op:
        return Op(command=("SET", self._broker.keys.queue(queue).django_call(message_id),
                           data, "PX", ttl_ms))

    def _with_record(self, queue: str, message_id: str) -> Op:
        keys = self._broker.keys.queue(queue)
        return ops.mget([keys.record(message_id), keys.django_call(message_id)])

    def write(self, queue: str, message_id: str, data: bytes, ttl_ms: int) -> None:
        self._broker.sync.run(self._set(queue, message_id, data, ttl_ms))

    async def awrite(self, queue: str, message_id: str, data: bytes, ttl_ms: int) -> None:
        await self._broker.aio.run(self._set(queue, message_id, data, ttl_ms))

    def read(self, queue: str, message_id: str) -> bytes | None:
        return self._broker.sync.run(ops.get(self._broker.keys.queue(queue).django_call(
            message_id)))

    def read_with_record(self, queue: str, message_id: str
                         ) -> tuple[bytes | None, bytes | None]:
        record, data = self._broker.sync.run(self._with_record(queue, message_id))
        return record, data

    async def aread_with_record(self, queue: str, message_id: str
                                ) -> tuple[bytes | None, bytes | None]:
        record, data = await self._broker.aio.run(self._with_record(queue, message_id))
        return record, data
