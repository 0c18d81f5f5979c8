"""The dashboard's WebSocket route, and an application to mount it with.

In a project's asgi.py::

    from channels.routing import ProtocolTypeRouter
    from blitzq_django.live.routing import websocket_application

    application = ProtocolTypeRouter({"http": django_asgi_app,
                                      "websocket": websocket_application()})

or add ``websocket_urlpatterns`` to your own ``URLRouter`` (keep it inside
``AllowedHostsOriginValidator`` and ``AuthMiddlewareStack``).
"""

from __future__ import annotations

from typing import Any

from django.urls import path

from .consumers import DashboardConsumer

#: Where the dashboard page connects (its template reads this path).
DASHBOARD_PATH = "ws/blitzq/dashboard/"

websocket_urlpatterns = [
    path(DASHBOARD_PATH, DashboardConsumer.as_asgi(), name="blitzq-dashboard-socket"),
]


def websocket_application(extra: list[Any] | None = None) -> Any:
    """The dashboard socket (plus ``extra`` WebSocket routes): origin-checked against
    ALLOWED_HOSTS, with the session's user."""
    # lazy: app loading (channels.auth imports django.contrib.auth's models)
    from channels.auth import AuthMiddlewareStack
    from channels.routing import URLRouter
    from channels.security.websocket import AllowedHostsOriginValidator

    return AllowedHostsOriginValidator(AuthMiddlewareStack(
        URLRouter([*websocket_urlpatterns, *(extra or [])])))
