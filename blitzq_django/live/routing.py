"""An alias of ``blitzq_django.web.live.routing`` (the dashboard's WebSocket route), kept
at the path asgi.py files import (docs/dashboard.md)."""

from __future__ import annotations

from ..web.live.routing import DASHBOARD_PATH, websocket_application, websocket_urlpatterns

__all__ = ["DASHBOARD_PATH", "websocket_application", "websocket_urlpatterns"]
