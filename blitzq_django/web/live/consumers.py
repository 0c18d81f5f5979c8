"""The dashboard's WebSocket: staff with the ``view_queueoverview`` permission only.

One consumer per open dashboard. It does no Redis reads of its own: it subscribes to the
process's aggregator (``aggregator.for_this_loop``), gets a snapshot, then at most one
compact delta per 500 ms. The fan-out is in-process (an ``asyncio.Queue`` per consumer),
so it works the same with any channel layer (in-memory, channels-redis) or none: each
process's aggregator feeds that process's sockets, and no message crosses the layer.

Wrap it as ``routing.websocket_application`` does: ``AllowedHostsOriginValidator``
(cross-site pages cannot open it) around ``AuthMiddlewareStack`` (the admin session).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from ...runtime import get_client
from ..common import known_queues
from . import aggregator

PERMISSION = "blitzq_django.view_queueoverview"
#: Close code for a refused socket (an application code: 4000 + the HTTP status).
FORBIDDEN = 4403


def allowed(user: Any) -> bool:
    """Staff, active, with the queue overview's view permission (one query at most)."""
    return bool(user is not None and getattr(user, "is_authenticated", False)
                and user.is_active and user.is_staff and user.has_perm(PERMISSION))


def make_aggregator() -> aggregator.Aggregator:
    return aggregator.Aggregator(get_client, known_queues)


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """Sends the dashboard's snapshot, then its deltas; reads nothing from the page."""

    inbox: asyncio.Queue[dict[str, Any]] | None = None
    pump: asyncio.Task[None] | None = None
    source: aggregator.Aggregator | None = None

    async def connect(self) -> None:
        if not await database_sync_to_async(allowed)(self.scope.get("user")):
            await self.close(code=FORBIDDEN)  # before accept: the handshake is refused
            return
        await self.accept()
        self.source = aggregator.for_this_loop(make_aggregator)
        self.inbox = self.source.subscribe()
        self.pump = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        assert self.inbox is not None
        while True:
            await self.send_json(await self.inbox.get())

    async def receive(self, text_data: Any = None, bytes_data: Any = None,
                      **kwargs: Any) -> None:
        # The page sends nothing that matters. Any frame a client sends (binary, not JSON)
        # is ignored here: the JSON consumer's own decoding raised, and a consumer that
        # raises is gone without its disconnect(), its subscription left polling Redis.
        pass

    async def disconnect(self, code: int) -> None:
        await self._release()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:  # however the consumer ends (an error too): unsubscribed, pump stopped
            await self._release()

    async def _release(self) -> None:
        if self.source is not None and self.inbox is not None:
            self.source.unsubscribe(self.inbox)
        self.source = None
        pump, self.pump = self.pump, None
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        return json.dumps(content, separators=(",", ":"))
