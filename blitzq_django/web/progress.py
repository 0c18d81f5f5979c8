"""Following a task's progress from a user's page (docs/progress.md).

- ``for_user(task, request)``: the task, enqueued on behalf of the request's user (its
  ``user_id`` header, and the owner recorded at once for followers).
- ``TaskProgressConsumer``: a Channels consumer at ``ws/blitzq/tasks/<id>/`` (``?queue=``
  for a task outside the default queue) that sends the task's state, progress and
  result or error as JSON each time they change, then closes.
- ``progress_view``: the same snapshot over HTTP, for the polling fallback of
  ``static/blitzq_django/progress.js``.
- Who may follow a task: ``BLITZQ["PROGRESS_PERMISSION"]``, by default
  ``owner_or_viewer``: its owner, or staff allowed to read task records in the admin.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils.module_loading import import_string
from django.views.decorators.http import require_GET

from ..engine import progress as engine_progress
from ..engine.client import Task, TaskHandle
from ..engine.core.names import name_ok
from ..engine.core.validate import check
from ..engine.errors import BlitzqError
from ..runtime import get_client
from ..settings import default_queue, get_settings

USER_HEADER = engine_progress.USER_HEADER
#: The close code of a follower refused (permission) and of an unknown or bad request.
CLOSE_FORBIDDEN = 4403
CLOSE_BAD_REQUEST = 4400


@dataclass(frozen=True, slots=True)
class Followed:
    """What a permission function is told of the task a user asks to follow."""

    id: str
    queue: str
    #: the user id it was enqueued for (its user_id header), as a string; None if unknown
    owner: str | None


#: The admin's permission to read any task's arguments, results and errors (the task
#: history); the default rule lets staff who have it follow any task.
VIEW_PERMISSION = "blitzq_django.view_taskrecord"


def _is_owner(user: Any, task: Followed) -> bool:
    return task.owner is not None and task.owner == str(user.pk)


def owner_or_viewer(user: Any, task: Followed) -> bool:
    """The default permission: the authenticated user who enqueued the task, or active
    staff with ``blitzq_django.view_taskrecord`` (the admin's model permission to read
    task records: superusers have it). A staff account without it follows only its own
    tasks."""
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    if _is_owner(user, task):
        return True
    return bool(getattr(user, "is_active", False) and getattr(user, "is_staff", False)
                and user.has_perm(VIEW_PERMISSION))


def owner_or_staff(user: Any, task: Followed) -> bool:
    """Looser than the default: the task's owner, or any staff user, whatever their
    model permissions (set it in PROGRESS_PERMISSION to have that)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    if getattr(user, "is_staff", False):
        return True
    return _is_owner(user, task)


@functools.cache
def _permission(path_: str) -> Any:
    return import_string(path_)


def permitted(user: Any, task: Followed) -> bool:
    return bool(_permission(get_settings()["PROGRESS_PERMISSION"])(user, task))


# -- enqueueing for a user ----------------------------------------------------------------


class ForUser:
    """A task enqueued on behalf of one user: see ``for_user``."""

    def __init__(self, task: Task[Any, Any], owner: str) -> None:
        call = task.call
        self._task = task.options(headers={**(call.headers or {}), USER_HEADER: owner})
        self._owner = owner

    def options(self, **changes: Any) -> ForUser:
        headers = changes.pop("headers", None) or {}
        task = self._task.options(**changes)
        if headers:
            task = task.options(headers={**(task.call.headers or {}), **headers})
        return ForUser(task, self._owner)

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        handle = self._task.enqueue(*args, **kwargs)
        engine_progress.claim(get_client().broker, handle.queue, handle.id, self._owner)
        return handle

    async def aenqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        handle = await self._task.aenqueue(*args, **kwargs)
        await engine_progress.aclaim(get_client().broker, handle.queue, handle.id,
                                     self._owner)
        return handle


def for_user(task: Task[Any, Any], request_or_user: Any) -> ForUser:
    """``task`` enqueued for the request's user (or a user): the message carries the
    ``user_id`` header (as a string; it travels on to the tasks it enqueues) and the
    owner is recorded at once, so the user may follow it before it reports progress.

        handle = for_user(export_orders, request).enqueue(month)
    """
    is_request = isinstance(request_or_user, HttpRequest)
    user = getattr(request_or_user, "user", None) if is_request else request_or_user
    if user is None or not getattr(user, "is_authenticated", False):
        raise BlitzqError("for_user: the request has no authenticated user")
    return ForUser(task, str(user.pk))


# -- reading ----------------------------------------------------------------------------------


def _queue(raw: Any) -> str:
    queue = raw or default_queue()
    if not isinstance(queue, str) or not name_ok(queue):
        raise ValueError("bad queue")
    return queue


def _task_id(raw: Any) -> str:
    check("task_id", raw)
    return raw


def _jsonable(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with a result JSON cannot carry shown as its repr."""
    if "result" in snapshot:
        try:
            DjangoJSONEncoder().encode(snapshot["result"])
        except (TypeError, ValueError):
            snapshot = {**snapshot, "result": repr(snapshot["result"])}
    return snapshot


async def _followed(message_id: str, queue: str) -> Followed:
    client = get_client()
    raw = await engine_progress.aread_raw(client.broker, queue, message_id)
    return Followed(message_id, queue, engine_progress.owner_of(raw))


class TaskProgressConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """Sends ``{"id", "state", "progress", "final", "result" | "error"}`` each time the
    task changes, then closes (code 1000) once it is finished. Refused with 4403 when
    the permission says no, 4400 for a bad id or queue."""

    follower: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        try:
            message_id = _task_id(self.scope["url_route"]["kwargs"]["task_id"])
            query = dict(_query(self.scope.get("query_string", b"")))
            queue = _queue(query.get("queue"))
        except (BlitzqError, ValueError, KeyError):
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        user = self.scope.get("user")
        task = await _followed(message_id, queue)
        if not await sync_to_async(permitted)(user, task):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.accept()
        self.follower = asyncio.ensure_future(self._follow(message_id, queue))

    async def _follow(self, message_id: str, queue: str) -> None:
        client = get_client()
        try:
            async for snapshot in engine_progress.afollow(client.broker, queue, message_id):
                await self.send_json(_jsonable(snapshot))
        except Exception:  # noqa: BLE001 - Redis unreachable: the page falls back to polling
            logging.getLogger("blitzq").warning("following %s failed", message_id,
                                                exc_info=True)
            await self.close(code=1011)
            return
        await self.close(code=1000)

    async def receive(self, text_data: Any = None, bytes_data: Any = None,
                      **kwargs: Any) -> None:
        # Nothing a client sends matters, and no frame (binary, not JSON) may end the
        # consumer: one that raises is gone without its disconnect(), its follower left
        # polling Redis.
        pass

    async def disconnect(self, code: int) -> None:
        self._stop_following()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:  # however the consumer ends (an error too): the follower stops
            self._stop_following()

    def _stop_following(self) -> None:
        if self.follower is not None and not self.follower.done():
            self.follower.cancel()

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        return DjangoJSONEncoder().encode(content)


def _query(raw: bytes) -> list[tuple[str, str]]:
    return parse_qsl(raw.decode("latin-1"))


@require_GET
def progress_view(request: HttpRequest, task_id: str) -> HttpResponse:
    """The task's snapshot as JSON: what the WebSocket sends, for polling."""
    try:
        message_id = _task_id(task_id)
        queue = _queue(request.GET.get("queue"))
    except (BlitzqError, ValueError):
        return JsonResponse({"error": "bad task id or queue"}, status=400)
    client = get_client()
    # The record first: a task's last report is written before its outcome, so a final
    # record read first comes with that report (read the other way round, the report
    # could be the one before it).
    record = client.broker.get_record(queue, message_id)
    raw = engine_progress.read_raw(client.broker, queue, message_id)
    task = Followed(message_id, queue, engine_progress.owner_of(raw))
    if not permitted(request.user, task):
        return JsonResponse({"error": "forbidden"}, status=403)
    snapshot = engine_progress.snapshot(record, raw)
    snapshot["id"] = message_id
    return JsonResponse(_jsonable(snapshot))


#: WebSocket routes: add them to the project's URLRouter (docs/progress.md).
websocket_urlpatterns = [
    path("ws/blitzq/tasks/<str:task_id>/", TaskProgressConsumer.as_asgi()),
]
