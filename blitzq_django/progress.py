"""``blitzq_django.progress``, the path docs/progress.md teaches (``for_user``, the
permission rules named in ``BLITZQ["PROGRESS_PERMISSION"]``, the WebSocket routes): an
alias of ``blitzq_django.web.progress``, where the code lives."""

from __future__ import annotations

from .web.progress import (
    CLOSE_BAD_REQUEST,
    CLOSE_FORBIDDEN,
    USER_HEADER,
    VIEW_PERMISSION,
    Followed,
    ForUser,
    TaskProgressConsumer,
    for_user,
    owner_or_staff,
    owner_or_viewer,
    permitted,
    progress_view,
    websocket_urlpatterns,
)

__all__ = [
    "CLOSE_BAD_REQUEST", "CLOSE_FORBIDDEN", "USER_HEADER", "VIEW_PERMISSION", "Followed",
    "ForUser", "TaskProgressConsumer", "for_user", "owner_or_staff", "owner_or_viewer",
    "permitted", "progress_view", "websocket_urlpatterns",
]
