"""The WebSocket consumers survive any frame a client sends (binary, not JSON, empty),
and stop their Redis polling when the socket closes: driven by Channels'
WebsocketCommunicator through the real stack (origin check, session auth) on a real
Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission, User
from django.test import Client as DjangoClient

from blitzq_django.engine import Client
from blitzq_django.web import progress
from blitzq_django.web.live import aggregator
from blitzq_django.web.live.routing import websocket_application
from testproject.shop.tasks import export_orders, noop
from tests.support.waiting import await_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ORIGIN = (b"origin", b"http://testserver")
#: What a client may send that is not the JSON text these consumers' base class expects
#: (as the ASGI server passes it on: an empty frame too).
BAD_FRAMES: list[dict[str, Any]] = [
    {"bytes": b"\x00\xff\x81binary"},
    {"text": "not json {"},
    {"bytes": b""},
    {"text": ""},
    {"text": '{"a": 1}'},
]


def cookie_of(user: User) -> tuple[bytes, bytes]:
    web = DjangoClient()
    web.force_login(user)
    return b"cookie", f"sessionid={web.cookies['sessionid'].value}".encode()


def viewer() -> tuple[bytes, bytes]:
    user = User.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        codename__in=["view_queueoverview", "view_taskrecord"]))
    return cookie_of(user)


@pytest_asyncio.fixture
async def stop_aggregator() -> AsyncIterator[None]:
    yield
    await aggregator.stop_this_loop()
    from blitzq_django import conf

    await conf.get_client().broker.aclose()  # type: ignore[attr-defined]


def running(qualname: str) -> list[asyncio.Task[Any]]:
    """The live tasks of this loop running a coroutine of that name."""
    return [t for t in asyncio.all_tasks() if not t.done()
            and getattr(t.get_coro(), "__qualname__", "") == qualname]


async def test_the_dashboard_ignores_any_frame_and_stops_polling_when_closed(
        blitzq_redis: Client, stop_aggregator: None) -> None:
    socket = WebsocketCommunicator(websocket_application(), "/ws/blitzq/dashboard/",
                                   headers=[ORIGIN, await sync_to_async(viewer)()])
    assert (await socket.connect(timeout=5))[0]
    assert (await socket.receive_json_from(timeout=5))["t"] == "snapshot"
    (source,) = aggregator._by_loop.values()
    source.linger_s = 0.2  # stop polling soon after the last socket left
    for frame in BAD_FRAMES:
        await socket.send_input({"type": "websocket.receive", **frame})
    # Still serving: what happens next reaches the page.
    await blitzq_redis.aenqueue_many(noop.spec, [((), {}) for _ in range(3)])

    async def enqueued_seen() -> bool:
        message = await socket.receive_json_from(timeout=5)
        return message.get("totals", {}).get("enqueued") == 3

    await await_until(enqueued_seen, timeout=10, message="a delta after the bad frames")
    await socket.disconnect()
    assert not source.subscribers
    assert running("DashboardConsumer._pump") == []
    task = source.task
    assert task is not None
    await await_until(task.done, timeout=5, message="the aggregator to stop polling Redis")


async def test_the_progress_socket_ignores_any_frame_and_stops_following_when_closed(
        blitzq_redis: Client) -> None:
    def make() -> tuple[Any, tuple[bytes, bytes]]:
        user = User.objects.create_user("alice", password="x")
        return user, cookie_of(user)

    alice, cookie = await sync_to_async(make)()
    handle = await sync_to_async(lambda: progress.for_user(export_orders, alice).enqueue(
        1, 0.0))()  # no worker runs: the socket follows a task that stays pending
    app = websocket_application(extra=progress.websocket_urlpatterns)
    socket = WebsocketCommunicator(app, f"/ws/blitzq/tasks/{handle.id}/",
                                   headers=[ORIGIN, cookie])
    assert (await socket.connect(timeout=10))[0]
    assert (await socket.receive_json_from(timeout=10))["state"] == "pending"
    for frame in BAD_FRAMES:
        await socket.send_input({"type": "websocket.receive", **frame})
    assert await socket.receive_nothing(timeout=0.3)  # still open, nothing to say
    assert len(running("TaskProgressConsumer._follow")) == 1
    await socket.disconnect()
    await await_until(lambda: not running("TaskProgressConsumer._follow"), timeout=5,
                      message="the follower to stop polling Redis")
