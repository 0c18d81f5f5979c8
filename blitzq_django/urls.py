"""``include("blitzq_django.urls")``, the path docs/metrics.md and docs/progress.md teach:
an alias of ``blitzq_django.web.urls``, where the routes are listed."""

from __future__ import annotations

from .web.urls import urlpatterns

__all__ = ["urlpatterns"]
