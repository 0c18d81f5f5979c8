"""Workflows in the admin: a list (WorkflowRecord rows: filters by state, kind, queue and
date) and one page per workflow that draws it as the tree of its steps, each with its
state, times, duration, result or error, linked to its task record; and Cancel.

The tree is read from Redis (``client.workflows.inspect``: the shape, and each step's
state now) and completed from the history (each step's TaskRecord: its link, its result
and error as the history keeps them, redacted). When Redis no longer holds the workflow
(expired), the tree is rebuilt from the steps' records alone, by their places (workflow_tree.py).

Everything needs staff and the ``view_workflowrecord`` permission; Cancel also
``cancel_workflowrecord``. Everything shown from task data is redacted
(BLITZQ["REDACT"]) and escaped (``format_html``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from ..engine.core.validate import task_id_ok
from ..engine.core.workflow import WorkflowInfo
from ..engine.errors import ConfigurationError
from ..models import TaskRecord, WorkflowRecord
from ..web.common import ENGINE_ERRORS, client, duration, from_ms
from .history import to_the_second
from .workflow_tree import FINAL_STEP_STATES, draw, from_info, from_rows


def _shown(rows: QuerySet[TaskRecord]) -> QuerySet[TaskRecord]:
    """What the tree shows of each step: not its arguments, timeline or message."""
    return rows.only("task_id", "task_name", "queue", "state", "attempt", "result",
                     "error_type", "error_message", "started_at", "finished_at",
                     "workflow_node", "workflow_path")


@admin.register(WorkflowRecord)
class WorkflowRecordAdmin(admin.ModelAdmin):
    list_display = ("workflow_link", "kind", "state", "started_display", "duration_display",
                    "queue", "error_type")
    # The id links to the workflow's tree page itself (workflow_link), not to a change form.
    list_display_links = None
    list_filter = ("state", "kind", "queue", "created_at")
    search_fields = ("=workflow_id",)
    search_help_text = "Workflow id (exact)."
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    show_full_result_count = False
    list_per_page = 100

    class Media:
        css = {"all": ("blitzq_django/history.css",)}

    @admin.display(description="workflow", ordering="workflow_id")
    def workflow_link(self, obj: WorkflowRecord) -> str:
        return format_html('<a href="{}">{}</a>', self.tree_url(obj.workflow_id),
                           obj.workflow_id)

    @admin.display(description="started", ordering="created_at")
    def started_display(self, obj: WorkflowRecord) -> str:
        return to_the_second(obj.created_at)

    @admin.display(description="duration")
    def duration_display(self, obj: WorkflowRecord) -> str:
        if obj.finished_at is None:
            return "-"
        return duration((obj.finished_at - obj.created_at).total_seconds() * 1000) or "-"

    # Written by the history writer, never by hand.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.cancel_workflowrecord")

    def get_urls(self) -> list[Any]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("tree/", wrap(self.tree_view), name=f"{info}_tree"),
            path("cancel/", wrap(self.cancel_view), name=f"{info}_cancel"),
            *super().get_urls(),
        ]

    def tree_url(self, workflow_id: str) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_tree",
                       current_app=self.admin_site.name) + "?" + urlencode({"id": workflow_id})

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        record = get_object_or_404(WorkflowRecord, pk=object_id) \
            if str(object_id).isdigit() else None
        if record is None:
            raise PermissionDenied  # not a row id: nothing to show
        return HttpResponseRedirect(self.tree_url(record.workflow_id))

    def _record_url(self, row: TaskRecord) -> str:
        return reverse(f"admin:{self.opts.app_label}_taskrecord_change", args=[row.pk],
                       current_app=self.admin_site.name)

    def tree_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        workflow_id = request.GET.get("id", "")
        context: dict[str, Any] = {
            **self.admin_site.each_context(request), "opts": self.opts,
            "title": f"Workflow {workflow_id}", "crumb": workflow_id,
            "workflow_id": workflow_id, "can_cancel": False,
            "list_url": reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}"
                                "_changelist", current_app=self.admin_site.name),
        }
        if not task_id_ok(workflow_id):  # nothing can be looked up by it
            context["invalid"] = True
            return self._render(request, context, status=404)
        record = WorkflowRecord.objects.filter(workflow_id=workflow_id).first()
        can_steps = request.user.has_perm(f"{self.opts.app_label}.view_taskrecord")
        rows = list(_shown(TaskRecord.objects.filter(workflow_id=workflow_id))) \
            if can_steps else []
        url_of = self._record_url if can_steps else (lambda row: "")
        info: WorkflowInfo | None = None
        try:
            info = client().workflows.inspect(workflow_id)
        except ConfigurationError:  # not an id the engine gives a workflow
            context["invalid"] = True
            return self._render(request, context, status=404)
        except ENGINE_ERRORS as exc:
            context["unavailable"] = f"{type(exc).__name__}: {exc}"
        if info is not None:
            by_id = {r.task_id: r for r in rows}
            if can_steps:
                # A step whose message was over 8 KiB has a row without its workflow (the
                # event carried only its size): found by its message id.
                missing = [m.message_id for m in info.members() if m.message_id
                           and m.state != "pending" and m.message_id not in by_id]
                for start in range(0, len(missing), 500):
                    by_id.update((r.task_id, r) for r in _shown(TaskRecord.objects.filter(
                        task_id__in=missing[start:start + 500])))
            root = from_info(info.root, by_id, url_of)
            on_error = (from_info(info.on_error, by_id, url_of, on_error=True)
                        if info.on_error is not None else None)
            summary = {"state": info.state, "kind": info.root.kind,
                       "created": from_ms(info.created_ms),
                       "finished": from_ms(info.finished_ms),
                       "took": duration(info.finished_ms - info.created_ms)
                       if info.finished_ms else "", "queue": info.home,
                       "progress": f"{info.done} of {info.total}", "source": "redis"}
            failure = info.failure
        elif rows or record is not None:
            root, on_error = from_rows(record.kind if record else "", rows, url_of)
            summary = {"state": record.state if record else "", "kind": root.kind,
                       "created": record.created_at if record else None,
                       "finished": record.finished_at if record else None,
                       "took": duration((record.finished_at - record.created_at)
                                        .total_seconds() * 1000)
                       if record and record.finished_at else "",
                       "queue": record.queue if record else "",
                       "progress": f"{sum(r.state in FINAL_STEP_STATES for r in rows)} of "
                                   f"{len([r for r in rows if r.workflow_node != 'e'])} "
                                   "recorded", "source": "history"}
            failure = None
        else:
            context["unknown"] = True
            return self._render(request, context, status=404)
        context.update({
            "summary": summary, "failure": failure, "record": record,
            "tree": format_html('<ul class="blitzq-tree blitzq-tree-root" '
                                'id="blitzq-workflow-tree">{}</ul>', draw(root)),
            "on_error": format_html('<ul class="blitzq-tree" id="blitzq-workflow-on-error">'
                                    "{}</ul>", draw(on_error)) if on_error else "",
            "can_cancel": (self.has_cancel_permission(request) and summary["state"] == "running"),
            "cancel_url": reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_cancel",
                                  current_app=self.admin_site.name),
            "steps_url": reverse(f"admin:{self.opts.app_label}_taskrecord_changelist",
                                 current_app=self.admin_site.name) + "?" + urlencode(
                                     {"q": workflow_id}) if can_steps else "",
        })
        return self._render(request, context)

    def _render(self, request: HttpRequest, context: dict[str, Any],
                status: int = 200) -> TemplateResponse:
        return TemplateResponse(request, "admin/blitzq_django/workflowrecord/tree.html",
                                context, status=status)

    def cancel_view(self, request: HttpRequest) -> HttpResponse:
        if not (self.has_view_permission(request) and self.has_cancel_permission(request)):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponse("Cancel a workflow with a POST from its page.", status=405)
        workflow_id = request.POST.get("id", "")
        if not task_id_ok(workflow_id):
            raise PermissionDenied
        ok, text = cancel(workflow_id)
        messages.add_message(request, messages.SUCCESS if ok else messages.WARNING, text)
        return HttpResponseRedirect(self.tree_url(workflow_id))


def cancel(workflow_id: str) -> tuple[bool, str]:
    """Cancel a workflow through the engine; its page and history follow from Redis and
    its events."""
    name = f"Workflow {workflow_id}"
    try:
        before = client().workflows.cancel(workflow_id)
    except ENGINE_ERRORS as exc:
        return False, f"{name}: not cancelled: {type(exc).__name__}: {exc}"
    if before == "running":
        return True, (f"{name}: cancelled. Its later steps will not be enqueued; its steps "
                      "enqueued and not finished are cancelled.")
    if before:
        return False, f"{name}: not cancelled, it has already finished ({before})."
    return False, f"{name}: not cancelled, nothing is known of it in Redis."

