"""Admin: task history, read-only. Django's staff + model permissions apply unchanged."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from . import redaction
from .models import TaskRecord


def _pretty(value: Any) -> str:
    # format_html escapes: args, results and errors are user data.
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html("<pre>{}</pre>", text)


@admin.register(TaskRecord)
class TaskRecordAdmin(admin.ModelAdmin):
    list_display = ("task_id", "task_name", "queue", "state", "attempt", "created_at",
                    "finished_at")
    list_filter = ("state", "queue", "task_name")
    search_fields = ("=task_id", "=idempotency_key", "task_name")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    show_full_result_count = False  # COUNT(*) on a big history table is slow
    list_per_page = 100
    fields = ("task_id", "idempotency_key", "task_name", "queue", "state", "attempt",
              "args_display", "kwargs_display", "result_display", "error_type", "error_message",
              "traceback_display", "created_at", "started_at", "finished_at", "worker")
    readonly_fields = fields

    # Secrets (BLITZQ["REDACT"]) are masked before display: staff who may read the
    # history need not see passwords and tokens passed to tasks.
    @admin.display(description="args")
    def args_display(self, obj: TaskRecord) -> str:
        return _pretty(redaction.redact_call(obj.task_name, obj.args, obj.kwargs)[0])

    @admin.display(description="kwargs")
    def kwargs_display(self, obj: TaskRecord) -> str:
        return _pretty(redaction.redact_call(obj.task_name, obj.args, obj.kwargs)[1])

    @admin.display(description="result")
    def result_display(self, obj: TaskRecord) -> str:
        return _pretty(redaction.redact_result(obj.result))

    @admin.display(description="traceback")
    def traceback_display(self, obj: TaskRecord) -> str:
        return format_html("<pre>{}</pre>", obj.traceback)

    # History is written by blitzq, never edited by hand. Viewing and deleting keep
    # Django's default checks (staff + the view/delete model permission).
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
