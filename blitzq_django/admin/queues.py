"""The queue overview: per queue ready, in flight, scheduled and dead letters, and the
live workers, from the engine's stats (one Redis call per queue, one for the workers).
Needs the ``view_queueoverview`` permission."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse

from ..engine.core.registry import unserved, workers_per_queue
from ..models import QueueOverview
from ..web.common import age, client, engine_errors, from_ms, known_queues
from ..web.live import views as dashboard  # the live dashboard (docs/dashboard.md)
from .pages import PageAdmin, list_context


@admin.register(QueueOverview)
class QueueOverviewAdmin(PageAdmin):
    def get_urls(self) -> list[Any]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        return [path("", self.admin_site.admin_view(self.changelist_view),
                     name=f"{info}_changelist"),
                path("dashboard/", self.admin_site.admin_view(
                    lambda request: dashboard.dashboard_view(self, request)),
                    name=f"{info}_dashboard"),
                path("dashboard/data/", self.admin_site.admin_view(
                    lambda request: dashboard.dashboard_data(self, request)),
                    name=f"{info}_dashboard_data")]

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        queues: list[dict[str, Any]] = []
        workers: list[dict[str, Any]] = []
        unavailable = True  # until Redis answered: "No live workers" would be made up
        with engine_errors(request, "The queues could not be read"):
            live = client().workers()
            workers = [{"name": w.name, "host": w.host, "pid": w.pid,
                        "queues": ", ".join(w.queues), "running": w.running,
                        "concurrency": w.concurrency, "processed": w.processed,
                        "started": from_ms(w.started_ms), "uptime": age(w.started_ms),
                        "heartbeat": age(w.heartbeat_ms), "version": w.version}
                       for w in live]
            # Every queue named, served or seen (Redis keeps the queues ever written to).
            serving = workers_per_queue(live)
            for name in known_queues([*serving, *client().seen_queues()]):
                stats = client().queue_stats(name)
                oldest = stats.oldest_ready_age_ms
                queues.append({"name": name, "ready": stats.ready,
                               "in_flight": stats.in_flight, "scheduled": stats.scheduled,
                               "dead_letters": stats.dead_letters,
                               "consumers": stats.consumers,
                               "workers": serving[name],
                               "unserved": bool(unserved([stats], live)),
                               "oldest": "" if oldest is None else _span(oldest),
                               "dead_query": urlencode({"queue": name})})
            unavailable = False
        user = request.user
        app = self.opts.app_label
        context = {
            **self.admin_site.each_context(request), **list_context(self.opts),
            "title": "Queues", "queues": queues, "workers": workers,
            "unavailable": unavailable,
            "dead_letters_url": reverse(f"admin:{app}_deadletter_changelist",
                                        current_app=self.admin_site.name)
            if user.has_perm(f"{app}.view_deadletter") else None,
            "dashboard_url": reverse(f"admin:{app}_queueoverview_dashboard",
                                     current_app=self.admin_site.name),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/blitzq_django/queueoverview/change_list.html",
                                context)


def _span(ms: int) -> str:
    seconds = ms / 1000
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"
