"""Task history: filters, search, a detail page (arguments, result, error, traceback,
timeline of attempts) and the retry and cancel actions.

Viewing and deleting keep Django's checks (staff + view/delete permission). Retry
needs ``blitzq_django.retry_taskrecord`` and cancel ``blitzq_django.cancel_taskrecord``:
the actions and buttons are hidden without them, and their URLs answer 403.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from .. import conf, redaction
from ..engine import CallOptions
from ..engine.core.redact import MASK
from ..engine.core.registry import CANCELLED, FINISHED, REVOKED
from ..models import TaskRecord
from .common import (
    ENGINE_ERRORS,
    client,
    duration,
    engine_errors,
    from_ms,
    pretty,
)
from .live_state import live_context

#: Timeline event kinds shown with a word of their own.
EVENT_WORDS = {"enqueued": "enqueued", "scheduled": "scheduled", "started": "started",
               "succeeded": "succeeded", "failed": "failed", "retried": "retry scheduled",
               "retrying": "retry scheduled", "dead_lettered": "dead-lettered",
               "cancelled": "cancelled", "revoked": "revoked", "expired": "expired",
               "recovered": "recovered (lease expired)"}


def _has_mask(value: Any) -> bool:
    if isinstance(value, str):
        return value == MASK
    if isinstance(value, dict):
        return any(_has_mask(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_mask(v) for v in value)
    return False


def retry(record: TaskRecord) -> tuple[bool, str]:
    """Enqueue ``record``'s task again with the same arguments, as a new message.

    Refused (False, why) when the task is not registered in this process, or when the
    history holds masked values (BLITZQ["REDACT"]) instead of the real arguments.
    """
    spec = conf.registry.find(record.task_name)
    if spec is None:
        return False, (f"Task {record.task_id}: {record.task_name!r} is not registered in this "
                       "process, so it cannot be enqueued from here.")
    if not isinstance(record.args, list) or not isinstance(record.kwargs, dict):
        return False, f"Task {record.task_id}: its stored arguments are not a call (args, kwargs)."
    if _has_mask(record.args) or _has_mask(record.kwargs):
        return False, (f"Task {record.task_id}: its arguments were redacted in the history "
                       "(BLITZQ['REDACT']); the real values are not kept, so it cannot be "
                       "retried with the same arguments.")
    try:
        handle = client().enqueue(spec, record.args, record.kwargs,
                                  CallOptions(queue=record.queue))
    except ENGINE_ERRORS as exc:
        return False, f"Task {record.task_id}: not enqueued: {type(exc).__name__}: {exc}"
    return True, (f"Task {record.task_id}: {record.task_name} enqueued again as {handle.id} "
                  f"on queue {handle.queue}.")


def cancel(record: TaskRecord) -> tuple[bool, str]:
    """Cancel the message through the engine; the history follows from its events."""
    name = f"Task {record.task_id}"
    if record.is_final:
        return False, f"{name}: not cancelled, it has already finished ({record.state})."
    try:
        outcome = client().cancel(record.task_id, queue=record.queue)
    except ENGINE_ERRORS as exc:
        return False, f"{name}: not cancelled: {type(exc).__name__}: {exc}"
    if outcome.outcome == CANCELLED:
        return True, f"{name}: cancelled (it was scheduled; it will not run)."
    if outcome.outcome == REVOKED:
        was = f"it was {outcome.state}" if outcome.state else "no record of it in Redis"
        return True, (f"{name}: revoked ({was}): a worker receiving it will not run it, and "
                      "a running async task is interrupted.")
    if outcome.outcome == FINISHED:
        return False, f"{name}: not cancelled, it had already finished ({outcome.state})."
    return False, f"{name}: not cancelled, nothing is known of it in Redis."


def timeline_rows(timeline: Any) -> list[tuple[str, Any, str, str, str, str]]:
    """[kind, time_ms, attempt, worker, duration_ms, error_type] entries, each cell as text
    (rows written by hand or by an older writer may be short or odd)."""
    rows = []
    for entry in timeline if isinstance(timeline, list) else []:
        cells = list(entry) if isinstance(entry, list | tuple) else [entry]
        cells += [None] * (6 - len(cells))
        kind, time_ms, attempt, worker, took, error = cells[:6]
        when = from_ms(time_ms)
        rows.append((EVENT_WORDS.get(str(kind), str(kind)),
                     when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC" if when else "",
                     "" if attempt is None else str(attempt), str(worker or ""),
                     duration(took), str(error or "")))
    return rows


@admin.register(TaskRecord)
class TaskRecordAdmin(admin.ModelAdmin):
    list_display = ("task_id", "task_name", "queue", "state", "attempt", "created_at",
                    "finished_at")
    list_filter = ("state", "queue", "task_name", "created_at")
    search_fields = ("=task_id", "=idempotency_key", "task_name")
    search_help_text = "Task id or idempotency key (exact), or part of the task name."
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    show_full_result_count = False  # COUNT(*) on a big history table is slow
    list_per_page = 100
    actions = ["retry_selected", "cancel_selected"]
    fieldsets = (
        (None, {"fields": ("task_id", "idempotency_key", "task_name", "queue", "state",
                           "attempt", "worker")}),
        ("Call", {"fields": ("args_display", "kwargs_display")}),
        ("Outcome", {"fields": ("result_display", "error_type", "error_message",
                                "traceback_display")}),
        ("Timeline of attempts", {"fields": ("timeline_display",)}),
        ("Times", {"fields": ("created_at", "started_at", "finished_at")}),
    )
    readonly_fields = ("task_id", "idempotency_key", "task_name", "queue", "state", "attempt",
                       "worker", "args_display", "kwargs_display", "result_display",
                       "error_type", "error_message", "traceback_display", "timeline_display",
                       "created_at", "started_at", "finished_at")

    # -- display ---------------------------------------------------------------------
    # Secrets (BLITZQ["REDACT"]) are masked before display: staff who may read the
    # history need not see passwords and tokens passed to tasks.

    @admin.display(description="args")
    def args_display(self, obj: TaskRecord) -> str:
        return pretty(redaction.redact_call(obj.task_name, obj.args, obj.kwargs)[0])

    @admin.display(description="kwargs")
    def kwargs_display(self, obj: TaskRecord) -> str:
        return pretty(redaction.redact_call(obj.task_name, obj.args, obj.kwargs)[1])

    @admin.display(description="result")
    def result_display(self, obj: TaskRecord) -> str:
        return pretty(redaction.redact_result(obj.result))

    @admin.display(description="traceback")
    def traceback_display(self, obj: TaskRecord) -> str:
        if not obj.traceback:
            return "-"
        return format_html('<pre class="blitzq-data">{}</pre>', obj.traceback)

    @admin.display(description="timeline")
    def timeline_display(self, obj: TaskRecord) -> str:
        rows = timeline_rows(obj.timeline)
        if not rows:
            return "No events recorded."
        body = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                                    "<td>{}</td><td>{}</td></tr>", rows)
        return format_html(
            '<table class="blitzq-timeline"><thead><tr><th>event</th><th>time</th>'
            "<th>attempt</th><th>worker</th><th>duration</th><th>error</th></tr></thead>"
            "<tbody>{}</tbody></table>", body)

    # -- permissions -----------------------------------------------------------------
    # History is written by blitzq, never edited by hand.

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.retry_taskrecord")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.cancel_taskrecord")

    # -- bulk actions, each through a confirmation page --------------------------------

    def _confirm(self, request: HttpRequest, queryset: QuerySet[TaskRecord], action: str,
                 verb: str, note: str) -> TemplateResponse:
        return TemplateResponse(request, "admin/blitzq_django/taskrecord/confirm_action.html", {
            **self.admin_site.each_context(request),
            "title": f"{verb.capitalize()} tasks: are you sure?",
            "opts": self.opts, "queryset": queryset, "action": action, "verb": verb,
            "note": note, "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "selected": [str(pk) for pk in queryset.values_list("pk", flat=True)],
        })

    def _report(self, request: HttpRequest, outcomes: list[tuple[bool, str]]) -> None:
        for ok, text in outcomes:
            messages.add_message(request, messages.SUCCESS if ok else messages.WARNING, text)

    @admin.action(permissions=["retry"], description="Retry selected tasks (same arguments)")
    def retry_selected(self, request: HttpRequest,
                       queryset: QuerySet[TaskRecord]) -> HttpResponse | None:
        if request.POST.get("post") != "yes":
            return self._confirm(request, queryset, "retry_selected", "retry",
                                 "Each task is enqueued again, as a new message with the same "
                                 "arguments. The records shown here are kept.")
        self._report(request, [retry(r) for r in queryset])
        return None

    @admin.action(permissions=["cancel"], description="Cancel selected tasks")
    def cancel_selected(self, request: HttpRequest,
                        queryset: QuerySet[TaskRecord]) -> HttpResponse | None:
        if request.POST.get("post") != "yes":
            return self._confirm(request, queryset, "cancel_selected", "cancel",
                                 "Scheduled tasks are removed; queued and running ones are "
                                 "revoked. Finished tasks are left as they are.")
        self._report(request, [cancel(r) for r in queryset])
        return None

    # -- per-object buttons (POST with CSRF; a GET shows a confirmation page) -----------

    def get_urls(self) -> list[Any]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/retry/", wrap(self.retry_view), name=f"{info}_retry"),
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name=f"{info}_cancel"),
            *super().get_urls(),
        ]

    def _object_action(self, request: HttpRequest, object_id: str, action: str,
                       allowed: bool) -> HttpResponse:
        if not (allowed and self.has_view_permission(request)):
            raise PermissionDenied
        record = get_object_or_404(TaskRecord, pk=object_id)
        if request.method != "POST":
            queryset = TaskRecord.objects.filter(pk=record.pk)
            return getattr(self, f"{action}_selected")(request, queryset)
        ok, text = (retry if action == "retry" else cancel)(record)
        messages.add_message(request, messages.SUCCESS if ok else messages.WARNING, text)
        return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_"
                                            f"{self.opts.model_name}_change",
                                            args=[record.pk], current_app=self.admin_site.name))

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._object_action(request, object_id, "retry",
                                   self.has_retry_permission(request))

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._object_action(request, object_id, "cancel",
                                   self.has_cancel_permission(request))

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        live = None
        record = TaskRecord.objects.filter(pk=object_id).only(
            "task_id", "queue", "task_name", "state", "finished_at").first() \
            if str(object_id).isdigit() else None
        if record is not None and self.has_view_permission(request):
            with engine_errors(request, "Redis could not be asked for the live state"):
                live = live_context(record)
        # A scheduled message has not run yet: a retry would only run it twice.
        scheduled = bool(live and live.get("scheduled"))
        context = {**(extra_context or {}), "blitzq_live": live,
                   "can_retry": self.has_retry_permission(request) and not scheduled,
                   "can_cancel": self.has_cancel_permission(request)}
        return super().change_view(request, object_id, form_url, context)
