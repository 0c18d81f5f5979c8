"""The live dashboard's aggregator arithmetic (Tally) and its WebSocket consumer, driven
by Channels' WebsocketCommunicator through the real stack (origin check, session auth)
on a real Redis, with the in-memory channel layer and with channels-redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission, User
from django.test import Client as DjangoClient

from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.engine.core.events import Event
from blitzq_django.web.live import aggregator
from blitzq_django.web.live.aggregator import Tally
from blitzq_django.web.live.routing import websocket_application
from tests.support.waiting import await_until

PATH = "/ws/blitzq/dashboard/"


@blitzq_task(name="dashboard.tests.noop")
def noop(i: int = 0) -> None:
    pass


def ev(kind: str, id: str, time_ms: int, queue: str = "default", **more: Any) -> Event:
    return Event(f"{time_ms}-0", queue, kind, id, "t.task", time_ms, **more)


# -- Tally ----------------------------------------------------------------------------------

def test_tally_counts_per_second_rates_and_latency() -> None:
    tally = Tally()
    base = 1_700_000_000_000
    events = []
    for i in range(20):
        events.append(ev("enqueued", f"m{i}", base + i * 100))
        events.append(ev("started", f"m{i}", base + i * 100 + 10 + i))
        kind = "succeeded" if i % 5 else "dead_lettered"
        events.append(ev(kind, f"m{i}", base + i * 100 + 50, attempt=1,
                         error_type=None if i % 5 else "ValueError"))
    assert tally.feed(events) == 60
    snap = tally.snapshot(base + 5_000)
    # each total is one event kind under its own name: failed is not the failures' sum
    assert snap["totals"] == {"enqueued": 20, "started": 20, "succeeded": 16, "retried": 0,
                              "failed": 0, "dead_lettered": 4}
    assert sum(p[1] for p in snap["series"]) == 16 and sum(p[2] for p in snap["series"]) == 4
    assert snap["queues"]["default"]["enqueue_rate"] == 2.0  # 20 over the last 10 s
    assert snap["queues"]["default"]["completion_rate"] == 2.0
    assert snap["latency"] == {"p50": 20, "p99": 29, "samples": 20}
    assert [f["id"] for f in snap["failures"]] == ["m0", "m5", "m10", "m15"]
    assert snap["failures"][0]["error"] == "ValueError"


def test_tally_delta_carries_only_what_changed() -> None:
    tally = Tally()
    base = 1_700_000_000_000
    tally.feed([ev("succeeded", "a", base), ev("failed", "b", base + 1500)])
    first = tally.delta(base + 2000)
    assert first["series"] == [[base // 1000, 1, 0], [base // 1000 + 1, 0, 1]]
    assert [f["id"] for f in first["failures"]] == ["b"]
    assert "queues" in first
    second = tally.delta(base + 2000)  # nothing new
    assert "series" not in second and "failures" not in second and "queues" not in second
    tally.feed([ev("succeeded", "c", base + 1600)])
    third = tally.delta(base + 2000)
    assert third["series"] == [[base // 1000 + 1, 1, 1]]  # the whole second: idempotent


def test_tally_forgets_beyond_fifteen_minutes_and_bounds_memory() -> None:
    tally = Tally()
    base = 1_700_000_000_000
    tally.feed([ev("succeeded", "old", base)])
    tally.feed(ev("enqueued", f"x{i}", base + 1) for i in range(aggregator.PENDING_IDS + 10))
    assert len(tally._pending) == aggregator.PENDING_IDS
    snap = tally.snapshot(base + (aggregator.WINDOW_S + 5) * 1000)
    assert snap["series"] == []


# -- the consumer -----------------------------------------------------------------------------

@pytest.fixture(params=["memory", "redis"])
def layer(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    if request.param == "redis":
        pytest.importorskip("channels_redis")
        settings.CHANNEL_LAYERS = {"default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis_url], "prefix": "bqtest"}}}
    else:
        settings.CHANNEL_LAYERS = {"default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer"}}
    return request.param


def session_cookie(user: User | None) -> list[tuple[bytes, bytes]]:
    if user is None:
        return []
    web = DjangoClient()
    web.force_login(user)
    return [(b"cookie", f"sessionid={web.cookies['sessionid'].value}".encode())]


def staff(username: str, *codenames: str, is_staff: bool = True) -> User:
    user = User.objects.create_user(username, password="x", is_staff=is_staff)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def viewer(db: Any) -> User:
    return staff("viewer", "view_queueoverview", "view_taskrecord")


@pytest_asyncio.fixture
async def stop_aggregator() -> AsyncIterator[None]:
    yield
    await aggregator.stop_this_loop()
    from channels.layers import get_channel_layer

    from blitzq_django import conf

    await conf.get_client().broker.aclose()  # type: ignore[attr-defined]
    layer = get_channel_layer()
    close_pools = getattr(layer, "close_pools", None)
    if close_pools is not None:
        await close_pools()


def communicator(cookie: list[tuple[bytes, bytes]],
                 origin: bytes | None = b"http://testserver") -> WebsocketCommunicator:
    headers = [*cookie, *([(b"origin", origin)] if origin else [])]
    return WebsocketCommunicator(websocket_application(), PATH, headers=headers)


pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.mark.asyncio
async def test_staff_gets_a_snapshot_then_compact_deltas(
        layer: str, blitzq_redis: Client, stop_aggregator: None, viewer: User) -> None:
    from asgiref.sync import sync_to_async

    cookie = await sync_to_async(session_cookie)(viewer)
    socket = communicator(cookie)
    connected, _ = await socket.connect(timeout=5)
    assert connected
    snapshot = await socket.receive_json_from(timeout=5)
    assert snapshot["t"] == "snapshot" and snapshot["window_s"] == 900
    await blitzq_redis.aenqueue_many(noop.spec, [((i,), {}) for i in range(300)])
    received: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def enqueued_seen() -> bool:
        message = await socket.receive_json_from(timeout=5)
        received.append(message)
        queue = message.get("queues", {}).get("default", {})
        return message["totals"]["enqueued"] == 300 and queue.get("ready") == 300

    await await_until(enqueued_seen, timeout=10, message="a delta with 300 enqueued")
    elapsed = loop.time() - started
    assert all(m["t"] == "delta" for m in received)
    # Deltas, never a message per task: at most one per 500 ms tick (and a little slack).
    assert len(received) <= elapsed / 0.5 + 2, (len(received), elapsed)

    async def rate_seen() -> bool:  # rates count whole seconds: the next one or two
        message = await socket.receive_json_from(timeout=5)
        return message.get("queues", {}).get("default", {}).get("enqueue_rate", 0) > 0

    await await_until(rate_seen, timeout=5, message="a non-zero enqueue rate")
    await socket.disconnect()


@pytest.mark.asyncio
async def test_two_sockets_share_one_aggregator(
        blitzq_redis: Client, stop_aggregator: None, viewer: User) -> None:
    from asgiref.sync import sync_to_async

    cookie = await sync_to_async(session_cookie)(viewer)
    first, second = communicator(cookie), communicator(cookie)
    assert (await first.connect(timeout=5))[0] and (await second.connect(timeout=5))[0]
    assert len(aggregator._by_loop) == 1
    (source,) = aggregator._by_loop.values()
    assert len(source.subscribers) == 2
    for socket in (first, second):
        assert (await socket.receive_json_from(timeout=5))["t"] == "snapshot"
        await socket.disconnect()
    assert not source.subscribers



@pytest.mark.asyncio
@pytest.mark.parametrize("who", ["anonymous", "not_staff", "no_permission", "inactive"])
async def test_only_staff_with_the_view_permission_get_a_socket(
        layer: str, blitzq_redis: Client, stop_aggregator: None, who: str) -> None:
    from asgiref.sync import sync_to_async

    def make() -> list[tuple[bytes, bytes]]:
        if who == "anonymous":
            return []
        if who == "not_staff":
            user = staff("n", "view_queueoverview", is_staff=False)
        elif who == "no_permission":
            user = staff("p", "view_taskrecord")
        else:
            user = staff("i", "view_queueoverview")
            cookie = session_cookie(user)
            user.is_active = False
            user.save()
            return cookie
        return session_cookie(user)

    socket = communicator(await sync_to_async(make)())
    connected, code = await socket.connect(timeout=5)
    assert not connected
    assert code == 4403
    assert not aggregator._by_loop  # a refused socket starts no aggregator


@pytest.mark.asyncio
@pytest.mark.parametrize("origin", [b"http://evil.example", None])
async def test_a_foreign_or_missing_origin_is_refused(
        blitzq_redis: Client, stop_aggregator: None, viewer: User, origin: bytes | None) -> None:
    from asgiref.sync import sync_to_async

    socket = communicator(await sync_to_async(session_cookie)(viewer), origin=origin)
    connected, _ = await socket.connect(timeout=5)
    assert not connected
    assert not aggregator._by_loop


# -- the page and its HTTP fallback ---------------------------------------------------------

DASHBOARD = "/admin/blitzq_django/queueoverview/dashboard/"


def test_the_page_and_its_data_need_the_view_permission(blitzq_redis: Client) -> None:
    web = DjangoClient()
    web.force_login(staff("nope", "view_taskrecord"))
    assert web.get(DASHBOARD).status_code == 403
    assert web.get(DASHBOARD + "data/").status_code == 403
    web.force_login(User.objects.create_user("customer", password="x"))  # not staff
    assert web.get(DASHBOARD).status_code == 302  # the admin's login


def test_the_page_under_wsgi_polls_and_the_data_is_a_snapshot(blitzq_redis: Client) -> None:
    web = DjangoClient()
    web.force_login(staff("ops", "view_queueoverview"))
    page = web.get(DASHBOARD)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-socket=""' in html  # WSGI: no socket to open, the page polls
    assert 'data-history-url=""' in html  # no view_taskrecord: failures are not linked
    assert "blitzq_django/dashboard.js" in html and "blitzq_django/dashboard.css" in html
    blitzq_redis.enqueue_many(noop.spec, [((i,), {}) for i in range(7)])
    data = web.get(DASHBOARD + "data/").json()
    assert data["t"] == "snapshot"
    assert data["queues"]["default"]["ready"] == 7
    assert data["totals"]["enqueued"] == 7


def test_the_queues_page_links_the_dashboard(blitzq_redis: Client) -> None:
    web = DjangoClient()
    web.force_login(staff("ops", "view_queueoverview"))
    html = web.get("/admin/blitzq_django/queueoverview/").content.decode()
    assert f'href="{DASHBOARD}"' in html
