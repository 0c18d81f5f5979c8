"""The dashboard page in the admin, and its HTTP fallback (a JSON snapshot).

Both need the ``view_queueoverview`` permission (``QueueOverviewAdmin`` mounts them under
/admin/blitzq_django/queueoverview/dashboard/). Under ASGI the page opens the WebSocket of
``routing.py``; under WSGI, or when the socket cannot connect, it polls ``data/`` every
2 seconds: a per-process ``Poller`` reads what is new in the events streams (at most
every 500 ms, whatever the number of pages polling).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from ..common import ENGINE_ERRORS, client, known_queues
from .aggregator import Poller
from .routing import DASHBOARD_PATH

_poller = Poller()


def dashboard_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    opts = model_admin.opts
    app = opts.app_label
    site = model_admin.admin_site.name
    user = request.user
    context = {
        **model_admin.admin_site.each_context(request), "opts": opts, "title": "Dashboard",
        "socket_path": f"/{DASHBOARD_PATH}" if isinstance(request, ASGIRequest) else "",
        "data_url": reverse(f"admin:{app}_queueoverview_dashboard_data", current_app=site),
        "queues_url": reverse(f"admin:{app}_queueoverview_changelist", current_app=site),
        "history_url": reverse(f"admin:{app}_taskrecord_changelist", current_app=site)
        if user.has_perm(f"{app}.view_taskrecord") else "",
        "dead_letters_url": reverse(f"admin:{app}_deadletter_changelist", current_app=site)
        if user.has_perm(f"{app}.view_deadletter") else "",
        "workflows_url": reverse(f"admin:{app}_workflowrecord_changelist", current_app=site)
        if user.has_perm(f"{app}.view_workflowrecord") else "",
    }
    return TemplateResponse(request, "admin/blitzq_django/queueoverview/dashboard.html",
                            context)


def dashboard_data(model_admin: Any, request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    try:
        snapshot = _poller.snapshot(client(), known_queues)
    except ENGINE_ERRORS as exc:
        return JsonResponse({"t": "error", "error": f"{type(exc).__name__}: {exc}"[:300]},
                            status=503)
    return JsonResponse(snapshot, json_dumps_params={"separators": (",", ":")})
