"""Task history: filters, search, a detail page (arguments, result, error, traceback,
timeline of attempts) and the retry and cancel actions.

Viewing and deleting keep Django's checks (staff + view/delete permission). Retry
needs ``blitzq_django.retry_taskrecord`` and cancel ``blitzq_django.cancel_taskrecord``:
the actions and buttons are hidden without them, and their URLs answer 403.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from .. import redaction
from ..engine import CallOptions
from ..engine.core.ids import now_ms
from ..engine.core.message import decode
from ..engine.core.redact import MASK
from ..engine.core.registry import CANCELLED, FINISHED, REVOKED
from ..engine.errors import BlitzqError
from ..history import health, history_queues
from ..models import TaskRecord, WorkflowRecord
from ..registry import registry
from ..runtime import history_on
from ..settings import get_settings
from ..web.common import (
    ENGINE_ERRORS,
    client,
    duration,
    engine_errors,
    from_ms,
    pretty,
    safely,
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


#: What Retry does, and how it differs from a dead letter's Replay (both pages say it).
RETRY_NOTE = ("Retry enqueues a new message (a new task id) with this task's exact "
              "arguments, as its message carried them; this record stays as it is. A dead "
              "letter's Replay instead puts that message itself back on its queue (the same "
              "id, a fresh attempt budget), while the dead letter is kept in Redis.")


SCHEDULED_REFUSAL = "it is scheduled: it runs at its due time (cancel it, or wait)"


def retry_refusal(record: TaskRecord) -> str | None:
    """Why Retry cannot re-send ``record``'s message as it was, or None when it can.

    Retry re-sends the arguments of the message itself (``TaskRecord.message``), never
    the JSON copy shown on the page (bytes, datetimes, Decimals, UUIDs and int keys do not
    survive it): a row without its message offers no Retry. Nor does a task that has not
    finished (it will run anyway: a retry would run it twice), nor one this process
    cannot enqueue."""
    if record.state == "scheduled":
        return SCHEDULED_REFUSAL
    if not record.is_final:
        return f"it has not finished ({record.state}): it runs anyway, a retry would run it twice"
    if registry.find(record.task_name) is None:
        return f"its task {record.task_name!r} is not registered in this process"
    if record.message is None:
        if _has_mask(record.args) or _has_mask(record.kwargs):
            return ("its arguments were redacted (BLITZQ['REDACT']): the real values are not "
                    "kept in the history")
        if (isinstance(record.args, list) and record.args and isinstance(record.args[0], str)
                and record.args[0].startswith("(not kept")):
            return "its message was over 8 KiB: its arguments are not kept in the history"
        return ("its message is not kept in the history (a row written before it was, or "
                "first seen after its enqueue)")
    try:
        decode(bytes(record.message))
    except BlitzqError as exc:
        return f"its stored message cannot be read ({exc})"
    return None


def retry(record: TaskRecord) -> tuple[bool, str]:
    """Enqueue ``record``'s task again with the exact arguments of its message, as a new
    message on its queue; refused (False, why) as ``retry_refusal`` says."""
    refusal = retry_refusal(record)
    if refusal is not None:
        return False, f"Task {record.task_id}: not retried: {refusal}."
    spec = registry.find(record.task_name)
    assert spec is not None and record.message is not None  # retry_refusal checked both
    message = decode(bytes(record.message))
    try:
        handle = client().enqueue(spec, message.args, message.kwargs,
                                  CallOptions(queue=record.queue))
    except ENGINE_ERRORS as exc:
        return False, f"Task {record.task_id}: not enqueued: {type(exc).__name__}: {exc}"
    return True, (f"Task {record.task_id}: {record.task_name} enqueued again as {handle.id} "
                  f"on queue {handle.queue}, with the arguments of its message.")


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


def to_the_second(when: dt.datetime | None) -> str:
    """A time of the history in the current time zone, to the second (the admin's
    DATETIME_FORMAT stops at the minute): "2026-03-01 14:05:09 UTC"."""
    if when is None:
        return "-"
    return timezone.localtime(when).strftime("%Y-%m-%d %H:%M:%S %Z")


class WorkflowStepFilter(admin.SimpleListFilter):
    """Steps of workflows, or messages enqueued on their own."""

    title = "workflow"
    parameter_name = "in_workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "steps of workflows"), ("no", "not in a workflow")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[TaskRecord]
                 ) -> QuerySet[TaskRecord]:
        if self.value() == "yes":
            return queryset.filter(workflow_id__isnull=False)
        if self.value() == "no":
            return queryset.filter(workflow_id__isnull=True)
        return queryset


@admin.register(TaskRecord)
class TaskRecordAdmin(admin.ModelAdmin):
    # State second, the id column narrow and the times wrapping (history.css): at 1280 px
    # beside the admin's side bar and filter panel, id, state, task and enqueued time show
    # without scrolling (everything with the side bar closed). Times to the second.
    list_display = ("task_id", "state", "task_name", "enqueued_display", "duration_display",
                    "attempt", "queue")
    list_filter = ("state", "queue", "task_name", "created_at", WorkflowStepFilter)
    search_fields = ("=task_id", "=idempotency_key", "=workflow_id", "task_name")
    search_help_text = ("Task id, idempotency key or workflow id (exact), or part of the "
                        "task name.")
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
        ("Times", {"fields": ("enqueued_display", "started_display", "finished_display",
                              "duration_display")}),
    )
    readonly_fields = ("task_id", "idempotency_key", "task_name", "queue", "state", "attempt",
                       "worker", "args_display", "kwargs_display", "result_display",
                       "error_type", "error_message", "traceback_display", "timeline_display",
                       "enqueued_display", "started_display", "finished_display",
                       "duration_display", "workflow_display", "workflow_node",
                       "workflow_path")

    class Media:
        css = {"all": ("blitzq_django/history.css",)}

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or not obj.workflow_id:
            return fieldsets
        # A workflow's step: which workflow, its place in it, and the way to its tree.
        return (fieldsets[0], ("Workflow", {"fields": ("workflow_display", "workflow_node",
                                                        "workflow_path")}), *fieldsets[1:])

    @admin.display(description="workflow")
    def workflow_display(self, obj: TaskRecord) -> str:
        if not obj.workflow_id:
            return "-"
        opts = WorkflowRecord._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_tree",
                      current_app=self.admin_site.name) + "?" + urlencode(
                          {"id": obj.workflow_id})
        return format_html('<a href="{}" id="blitzq-workflow-link">{}</a> (its tree of '
                           "steps)", url, obj.workflow_id)

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

    @admin.display(description="enqueued", ordering="created_at")
    def enqueued_display(self, obj: TaskRecord) -> str:
        return to_the_second(obj.created_at)

    @admin.display(description="started", ordering="started_at")
    def started_display(self, obj: TaskRecord) -> str:
        return to_the_second(obj.started_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished_display(self, obj: TaskRecord) -> str:
        return to_the_second(obj.finished_at)

    @admin.display(description="duration")
    def duration_display(self, obj: TaskRecord) -> str:
        """The last attempt's run time: from its start to the record's end."""
        if obj.started_at is None or obj.finished_at is None:
            return "-"
        took = (obj.finished_at - obj.started_at).total_seconds() * 1000
        return duration(took) or "-"

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
                                 f"{RETRY_NOTE} Tasks that cannot be retried (not finished, "
                                 "or their message is not kept) are left, each with why.")
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

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        self._incomplete_banner(request)
        return super().changelist_view(request, extra_context)

    def _incomplete_banner(self, request: HttpRequest) -> None:
        """An error banner per queue whose history lost or could not write events within
        HISTORY_RETENTION days (history/health.py): the list is not the whole story."""
        settings = get_settings()
        if not history_on(settings) or request.method != "GET":
            return
        since = int(now_ms() - settings["HISTORY_RETENTION"] * 86_400_000)
        found: list[health.Health] = safely(
            request, "Whether the history is complete could not be read from Redis",
            lambda: health.read(client(), history_queues(settings)), [])
        for text in health.problems(found, since):
            messages.error(request, text)

    def _retry_context(self, request: HttpRequest, object_id: str) -> dict[str, Any]:
        """Whether Retry is offered (and why not), what it does against a dead letter's
        Replay, and the link to this task's dead letter while it is one."""
        record = TaskRecord.objects.filter(pk=object_id).first() \
            if str(object_id).isdigit() else None
        if record is None:
            return {}
        dead_letter_url = None
        if (record.state == "dead_lettered"
                and request.user.has_perm(f"{self.opts.app_label}.view_deadletter")):
            dead_letter_url = reverse(f"admin:{self.opts.app_label}_deadletter_inspect",
                                      current_app=self.admin_site.name) + "?" + urlencode(
                                          {"queue": record.queue, "id": record.task_id})
        return {"retry_refusal": retry_refusal(record), "retry_note": RETRY_NOTE,
                "dead_letter_url": dead_letter_url}

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        live = None
        record = TaskRecord.objects.filter(pk=object_id).only(
            "task_id", "queue", "task_name", "state", "finished_at").first() \
            if str(object_id).isdigit() else None
        if record is not None and self.has_view_permission(request):
            with engine_errors(request, "Redis could not be asked for the live state"):
                live = live_context(record)
        context = {**(extra_context or {}), "blitzq_live": live,
                   "can_retry": self.has_retry_permission(request),
                   "can_cancel": self.has_cancel_permission(request)}
        context.update(self._retry_context(request, object_id))
        if live and live.get("scheduled") and not context.get("retry_refusal"):
            # Redis says scheduled before the history row does: it has not run yet, and
            # a retry would run it twice.
            context["retry_refusal"] = SCHEDULED_REFUSAL
        return super().change_view(request, object_id, form_url, context)
