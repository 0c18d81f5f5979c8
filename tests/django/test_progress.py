"""Task progress (docs/progress.md): current_task().progress() from def and async def
tasks, rate-limited writes, client.progress(), the Channels consumer (auth, origin,
permission) and the polling view. A real Redis and a real worker throughout."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client as DjangoClient

from blitzq_django.engine import Client
from blitzq_django.engine.progress import MIN_INTERVAL_S, Progress
from blitzq_django.web import progress
from blitzq_django.web.live.routing import websocket_application
from testproject.shop.tasks import export_orders, export_orders_async, noop
from tests.support.published import Published
from tests.support.waiting import wait_until

from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def users() -> dict[str, Any]:
    model = get_user_model()
    viewer = model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(
        content_type__app_label="blitzq_django", codename="view_taskrecord"))
    return {"alice": model.objects.create_user("alice", password="pw"),
            "bob": model.objects.create_user("bob", password="pw"),
            # staff without any permission, and staff who may read task records
            "staff": model.objects.create_user("staff", password="pw", is_staff=True),
            "viewer": viewer}


@pytest.fixture
def published(redis_url: str, blitzq_redis: Client) -> Iterator[Published]:
    tag = blitzq_redis.broker.keys.queue("default").tag  # type: ignore[attr-defined]
    # What is published on the progress channels of this namespace.
    found = Published(redis_url, pattern=f"{tag}:pg:*")
    yield found
    found.close()


@pytest.mark.parametrize("task", [export_orders, export_orders_async], ids=["def", "async"])
def test_progress_from_a_task_is_rate_limited_and_ends_with_the_last(
        blitzq_redis: Client, published: Published, task: Any) -> None:
    rows = 60
    with running_worker(blitzq_redis):
        handle = task.enqueue(rows, 0.005)  # 60 reports in about 0.3 s
        assert handle.result(timeout=20) == {"rows": rows}
        # Written before the outcome (not up to 0.1 s after it): whoever is told the
        # task succeeded reads its last report.
        last = handle.progress()
    assert isinstance(last, Progress)
    assert (last.done, last.total, last.fraction) == (rows, rows, 1.0)
    assert last.note == f"row {rows} of {rows}"
    record = handle.record()
    ran_s = (record.finished_ms - record.started_ms) / 1000  # type: ignore[operator]
    writes = wait_until(published.drain, timeout=5, message="the writes published")
    # At most one write per MIN_INTERVAL_S (plus the first, and the last at the end).
    assert 1 <= writes <= ran_s / MIN_INTERVAL_S + 3, (writes, ran_s)
    assert writes < rows


@pytest.mark.asyncio
async def test_aprogress_and_none_for_a_task_that_reports_nothing(
        blitzq_redis: Client) -> None:
    handle = noop.enqueue()
    assert handle.progress() is None
    assert await blitzq_redis.aprogress(handle.id) is None
    assert await handle.aprogress() is None


def test_progress_outside_a_worker_checks_its_arguments() -> None:
    from blitzq_django.engine.client.context import TaskContext
    from blitzq_django.engine.errors import ConfigurationError

    context = TaskContext(id="x", name="t", queue="default", attempt=1, max_attempts=1,
                          delivery_count=1, worker="w")
    context.progress(1, 2, "fine")  # no worker: nothing written, no error
    for bad in ({"done": -1}, {"done": float("nan")}, {"done": True},
                {"done": 1, "note": 5}):
        with pytest.raises(ConfigurationError):
            context.progress(**bad)


# -- the consumer -------------------------------------------------------------------------

APP = websocket_application(extra=progress.websocket_urlpatterns)  # the testproject's stack
ORIGIN = (b"origin", b"http://testserver")


def session_cookie(user: Any) -> tuple[bytes, bytes]:
    client = DjangoClient()
    client.force_login(user)
    return b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.fixture
def cookies(users: dict[str, Any]) -> dict[str, tuple[bytes, bytes]]:
    return {name: session_cookie(user) for name, user in users.items()}


async def receive_all(communicator: WebsocketCommunicator) -> list[dict[str, Any]]:
    """Every snapshot until the consumer closes the socket (each within a deadline)."""
    out: list[dict[str, Any]] = []
    while True:
        message = await communicator.receive_output(timeout=15)
        if message["type"] == "websocket.close":
            assert message.get("code", 1000) == 1000
            return out
        import json

        out.append(json.loads(message["text"]))


@pytest.mark.asyncio
async def test_the_owner_follows_progress_to_the_result_over_a_websocket(
        blitzq_redis: Client, users: dict[str, Any], cookies: dict[str, Any]) -> None:
    alice = users["alice"]
    handle = progress.for_user(export_orders, alice).enqueue(20, 0.02)
    cookie = cookies["alice"]
    communicator = WebsocketCommunicator(APP, f"/ws/blitzq/tasks/{handle.id}/",
                                         headers=[ORIGIN, cookie])
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    first = await communicator.receive_json_from(timeout=10)
    assert first["id"] == handle.id and first["state"] == "pending"
    assert first["progress"] is None and not first["final"]
    with running_worker(blitzq_redis):
        rest = await receive_all(communicator)
    await communicator.wait()
    final = rest[-1]
    assert final["final"] and final["state"] == "succeeded"
    assert final["result"] == {"rows": 20}
    moving = [s["progress"]["done"] for s in rest if s["progress"] and not s["final"]]
    assert moving, rest  # progress was pushed while it ran
    assert moving == sorted(moving)
    assert all(s["state"] == "running" for s in rest[:-1])
    assert final["progress"]["done"] == 20 or final["progress"]["done"] == moving[-1]


@pytest.mark.asyncio
async def test_a_failed_task_sends_its_error(blitzq_redis: Client, users: dict[str, Any],
                                             cookies: dict[str, Any]) -> None:
    from testproject.shop.tasks import validate_card

    handle = progress.for_user(validate_card, users["alice"]).options(retries=0).enqueue(
        "4111111111111111")
    communicator = WebsocketCommunicator(APP, f"/ws/blitzq/tasks/{handle.id}/",
                                         headers=[ORIGIN, cookies["alice"]])
    assert (await communicator.connect(timeout=10))[0]
    with running_worker(blitzq_redis):
        snapshots = await receive_all(communicator)
    final = snapshots[-1]
    assert final["final"] and final["state"] in ("dead_lettered", "failed")
    assert final["error"]["type"] == "ValueError"
    assert "declined" in final["error"]["message"]


async def refused(path: str, headers: list[tuple[bytes, bytes]]) -> int | None:
    communicator = WebsocketCommunicator(APP, path, headers=headers)
    connected, code = await communicator.connect(timeout=10)
    assert not connected
    return code


@pytest.mark.asyncio
async def test_another_user_cannot_follow_but_staff_who_may_view_records_can(
        blitzq_redis: Client, users: dict[str, Any], cookies: dict[str, Any]) -> None:
    handle = progress.for_user(export_orders, users["alice"]).enqueue(1, 0.0)
    path = f"/ws/blitzq/tasks/{handle.id}/"
    assert await refused(path, [ORIGIN, cookies["bob"]]) == \
        progress.CLOSE_FORBIDDEN
    assert await refused(path, [ORIGIN]) == progress.CLOSE_FORBIDDEN  # anonymous
    # staff, but without the admin's permission to read task records
    assert await refused(path, [ORIGIN, cookies["staff"]]) == progress.CLOSE_FORBIDDEN
    viewer = WebsocketCommunicator(APP, path, headers=[ORIGIN, cookies["viewer"]])
    assert (await viewer.connect(timeout=10))[0]
    assert (await viewer.receive_json_from(timeout=10))["state"] == "pending"
    await viewer.disconnect()


@pytest.mark.asyncio
async def test_a_header_alone_makes_the_owner_once_the_task_reports(
        blitzq_redis: Client, users: dict[str, Any], cookies: dict[str, Any]) -> None:
    """task.options(headers={"user_id": ...}) without for_user(): the worker writes the
    owner with the first report."""
    bob = users["bob"]
    handle = export_orders.options(headers={"user_id": bob.pk}).enqueue(3, 0.0)
    path = f"/ws/blitzq/tasks/{handle.id}/"
    assert await refused(path, [ORIGIN, cookies["bob"]]) == progress.CLOSE_FORBIDDEN
    with running_worker(blitzq_redis):
        handle.result(timeout=20)
    communicator = WebsocketCommunicator(APP, path, headers=[ORIGIN, cookies["bob"]])
    assert (await communicator.connect(timeout=10))[0]
    final = (await receive_all(communicator))[-1]
    assert final["state"] == "succeeded" and final["progress"]["done"] == 3


@pytest.mark.asyncio
async def test_bad_origin_and_bad_ids_are_refused(
        blitzq_redis: Client, users: dict[str, Any], cookies: dict[str, Any]) -> None:
    handle = progress.for_user(export_orders, users["alice"]).enqueue(1, 0.0)
    cookie = cookies["alice"]
    evil = (b"origin", b"http://evil.example")
    assert await refused(f"/ws/blitzq/tasks/{handle.id}/", [evil, cookie]) is not None
    assert await refused(f"/ws/blitzq/tasks/{'x' * 300}/", [ORIGIN, cookie]) == \
        progress.CLOSE_BAD_REQUEST
    assert await refused(f"/ws/blitzq/tasks/{handle.id}/?queue=no%20such",
                         [ORIGIN, cookie]) == progress.CLOSE_BAD_REQUEST


def test_the_permission_is_a_setting(settings: Any, blitzq_redis: Client,
                                     users: dict[str, Any]) -> None:
    handle = progress.for_user(export_orders, users["alice"]).enqueue(1, 0.0)
    client = DjangoClient()
    client.force_login(users["bob"])
    url = f"/blitzq/tasks/{handle.id}/progress/"
    assert client.get(url).status_code == 403
    settings.BLITZQ = {**settings.BLITZQ,
                       "PROGRESS_PERMISSION": "tests.django.test_progress.anyone"}
    assert client.get(url).status_code == 200


def anyone(user: Any, task: progress.Followed) -> bool:
    return True


# -- the polling view ---------------------------------------------------------------------


def test_polling_view(blitzq_redis: Client, users: dict[str, Any]) -> None:
    handle = progress.for_user(export_orders, users["alice"]).enqueue(5, 0.0)
    url = f"/blitzq/tasks/{handle.id}/progress/"
    assert DjangoClient().get(url).status_code == 403  # anonymous
    bob = DjangoClient()
    bob.force_login(users["bob"])
    assert bob.get(url).status_code == 403
    alice = DjangoClient()
    alice.force_login(users["alice"])
    pending = alice.get(url).json()
    assert pending == {"id": handle.id, "state": "pending", "progress": None, "final": False}
    with running_worker(blitzq_redis):
        handle.result(timeout=20)
    done = alice.get(url).json()
    assert done["final"] and done["state"] == "succeeded" and done["result"] == {"rows": 5}
    assert done["progress"]["fraction"] == 1.0
    staff = DjangoClient()
    staff.force_login(users["staff"])  # staff without view_taskrecord: not its result
    assert staff.get(url).status_code == 403
    viewer = DjangoClient()
    viewer.force_login(users["viewer"])
    assert viewer.get(url).json()["state"] == "succeeded"
    assert alice.get("/blitzq/tasks/bad%20id/progress/").status_code == 400


def test_staff_without_permissions_follow_their_own_tasks_only(
        settings: Any, blitzq_redis: Client, users: dict[str, Any]) -> None:
    staff = DjangoClient()
    staff.force_login(users["staff"])
    own = progress.for_user(export_orders, users["staff"]).enqueue(1, 0.0)
    assert staff.get(f"/blitzq/tasks/{own.id}/progress/").status_code == 200
    # a task enqueued for nobody in particular (no owner) is not theirs either
    anybody = export_orders.enqueue(1, 0.0)
    assert staff.get(f"/blitzq/tasks/{anybody.id}/progress/").status_code == 403
    # the older, looser rule is still there to choose
    settings.BLITZQ = {**settings.BLITZQ,
                       "PROGRESS_PERMISSION": "blitzq_django.progress.owner_or_staff"}
    assert staff.get(f"/blitzq/tasks/{anybody.id}/progress/").status_code == 200


def test_progress_on_the_memory_broker(blitzq_memory: Client) -> None:
    with running_worker(blitzq_memory):
        handle = export_orders.enqueue(5, 0.0)
        assert handle.result(timeout=20) == {"rows": 5}
        wait_until(lambda: (p := handle.progress()) is not None and p.done == 5, timeout=5,
                   message="the last report")
