"""TaskRecord: the history of tasks in the database (filled by a later issue's writer)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class TaskState(models.TextChoices):
    # The engine's record states (blitzq_django.engine.core.record), one word each.
    QUEUED = "queued", _("queued")
    SCHEDULED = "scheduled", _("scheduled")
    RUNNING = "running", _("running")
    RETRYING = "retrying", _("retrying")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    DEAD_LETTERED = "dead_lettered", _("dead-lettered")
    CANCELLED = "cancelled", _("cancelled")


class TaskRecord(models.Model):
    """One message's history: one row per task id, updated as its state changes."""

    task_id = models.CharField(_("task id"), max_length=64, unique=True)
    # Unique but nullable: many rows without a key, at most one per key.
    idempotency_key = models.CharField(_("idempotency key"), max_length=512, unique=True,
                                       null=True, blank=True)
    task_name = models.CharField(_("task"), max_length=255, db_index=True)
    queue = models.CharField(_("queue"), max_length=100)
    state = models.CharField(_("state"), max_length=20, choices=TaskState.choices,
                             default=TaskState.QUEUED)
    attempt = models.PositiveIntegerField(_("attempt"), default=1)
    args = models.JSONField(_("args"), default=list, blank=True)
    kwargs = models.JSONField(_("kwargs"), default=dict, blank=True)
    result = models.JSONField(_("result"), null=True, blank=True)
    error_type = models.CharField(_("error type"), max_length=255, blank=True)
    error_message = models.TextField(_("error message"), blank=True)
    traceback = models.TextField(_("traceback"), blank=True)
    created_at = models.DateTimeField(_("created"), db_index=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    worker = models.CharField(_("worker"), max_length=255, blank=True)

    class Meta:
        verbose_name = _("task record")
        verbose_name_plural = _("task records")
        ordering = ("-created_at",)
        indexes = [
            # The admin's usual views: one queue's or one state's newest rows.
            models.Index(fields=["queue", "state", "-created_at"], name="blitzq_queue_state_idx"),
            models.Index(fields=["state", "-created_at"], name="blitzq_state_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.task_name} {self.task_id} ({self.state})"
