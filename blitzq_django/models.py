"""The app's tables: task history, the transactional outbox, effect markers, and two
unmanaged models that give the admin its dead-letter and queue pages (and their
permissions) without a table.

``TaskRecord`` is written only by the history writer (``blitzq_django.history``),
from the engine's per-queue events; ``OutboxMessage`` by ``enqueue(durable=True)``
in the caller's transaction and emptied by the relay (``blitzq_django.transactions.outbox``);
``TaskEffect`` by tasks declared ``effectively_once`` (``blitzq_django.transactions.effects``).
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from .engine.core.states import FINAL_STATES as ENGINE_FINAL_STATES
from .engine.core.states import RecordState


class TaskState(models.TextChoices):
    # The engine's record states (engine/core/states.py RecordState), with their labels:
    # the values are the engine's (plain strings, so the migrations keep them as such);
    # tests/django/test_models.py checks that every RecordState is here.
    QUEUED = RecordState.QUEUED.value, _("queued")
    SCHEDULED = RecordState.SCHEDULED.value, _("scheduled")
    RUNNING = RecordState.RUNNING.value, _("running")
    RETRYING = RecordState.RETRYING.value, _("retrying")
    SUCCEEDED = RecordState.SUCCEEDED.value, _("succeeded")
    FAILED = RecordState.FAILED.value, _("failed")
    DEAD_LETTERED = RecordState.DEAD_LETTERED.value, _("dead-lettered")
    CANCELLED = RecordState.CANCELLED.value, _("cancelled")
    EXPIRED = RecordState.EXPIRED.value, _("expired")


FINAL_STATES = frozenset(TaskState(state.value) for state in ENGINE_FINAL_STATES)


class TaskRecord(models.Model):
    """One message's history: one row per task id, upserted as its events arrive."""

    # The engine's longest task id (engine/core/validate.py MAX_TASK_ID_LENGTH).
    task_id = models.CharField(_("task id"), max_length=200, unique=True)
    # Unique but nullable: many rows without a key, at most one per key.
    idempotency_key = models.CharField(_("idempotency key"), max_length=512, unique=True,
                                       null=True, blank=True)
    task_name = models.CharField(_("task"), max_length=255)
    queue = models.CharField(_("queue"), max_length=100)
    state = models.CharField(_("state"), max_length=20, choices=TaskState.choices,
                             default=TaskState.QUEUED)
    attempt = models.PositiveIntegerField(_("attempt"), default=1)
    # As enqueued, with BLITZQ["REDACT"] names masked before they are written.
    args = models.JSONField(_("args"), default=list, blank=True)
    kwargs = models.JSONField(_("kwargs"), default=dict, blank=True)
    result = models.JSONField(_("result"), null=True, blank=True)
    error_type = models.CharField(_("error type"), max_length=255, blank=True)
    error_message = models.TextField(_("error message"), blank=True)
    traceback = models.TextField(_("traceback"), blank=True)
    created_at = models.DateTimeField(_("enqueued"))
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    worker = models.CharField(_("worker"), max_length=255, blank=True)
    # The message's events, oldest first: [kind, time_ms, attempt, worker, duration_ms,
    # error_type] each; the admin draws the timeline of attempts from it.
    timeline = models.JSONField(_("timeline"), default=list, blank=True)
    # The events stream entry id last applied: a re-read batch (after a writer crash)
    # is recognised and changes nothing.
    last_event = models.CharField(_("last event"), max_length=64, blank=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    # The encoded message as enqueued (msgpack, at most 8 KiB: the events' detail), so
    # that Retry re-sends its exact arguments (args and kwargs above are a JSON copy for
    # display: bytes, datetimes, Decimals and int keys do not survive it). None when not
    # kept: a larger message, arguments that BLITZQ["REDACT"] masks (no secret is stored
    # in the clear), or a row written before this column.
    message = models.BinaryField(_("message"), null=True, blank=True, editable=False)
    # The workflow the message is a step of (docs/workflows.md), from its "workflow"
    # header: its id, the step's node number ("e": the on_error task) and its place in
    # the tree (positions from the root, dotted: "1.0"). None: not a workflow step.
    workflow_id = models.CharField(_("workflow"), max_length=200, null=True, blank=True)
    workflow_node = models.CharField(_("workflow node"), max_length=20, blank=True)
    workflow_path = models.CharField(_("place in the workflow"), max_length=255, blank=True)

    class Meta:
        verbose_name = _("task record")
        verbose_name_plural = _("task records")
        ordering = ("-created_at",)
        indexes = [
            # The admin's filters: by queue and state, by state, by task, by date; and
            # the prune command's scan of finished rows.
            models.Index(fields=["queue", "state", "-created_at"], name="blitzq_queue_state_idx"),
            models.Index(fields=["state", "-created_at"], name="blitzq_state_created_idx"),
            models.Index(fields=["task_name", "-created_at"], name="blitzq_task_created_idx"),
            models.Index(fields=["-created_at"], name="blitzq_created_idx"),
            models.Index(fields=["finished_at"], name="blitzq_finished_idx"),
            # A workflow's steps (its tree page, the filter by workflow): only the rows
            # of steps are indexed.
            models.Index(fields=["workflow_id", "workflow_path"], name="blitzq_workflow_idx",
                         condition=models.Q(workflow_id__isnull=False)),
        ]
        permissions = [
            ("retry_taskrecord", _("Can retry tasks (enqueue again with the same arguments)")),
            ("cancel_taskrecord", _("Can cancel queued, scheduled or running tasks")),
        ]

    def __str__(self) -> str:
        return f"{self.task_name} {self.task_id} ({self.state})"

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES


class WorkflowState(models.TextChoices):
    # The engine's workflow states (engine/core/workflow.py WORKFLOW_STATES).
    RUNNING = "running", _("running")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")


class WorkflowRecord(models.Model):
    """One workflow's history (a chain, group or chord: docs/workflows.md): one row per
    workflow id, folded by the history writer from the workflow's own events
    (``workflow_started`` and its end event, on the queue of its first step). Its steps
    are TaskRecord rows with this ``workflow_id``."""

    workflow_id = models.CharField(_("workflow id"), max_length=200, unique=True)
    # The root's kind: chain, group, chord (or task: a workflow of one step).
    kind = models.CharField(_("kind"), max_length=10)
    state = models.CharField(_("state"), max_length=20, choices=WorkflowState.choices,
                             default=WorkflowState.RUNNING)
    # The queue of its first step, where its events are written.
    queue = models.CharField(_("queue"), max_length=100)
    created_at = models.DateTimeField(_("started"))
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    # workflow_failed: the type of the error of the step that failed it.
    error_type = models.CharField(_("error type"), max_length=255, blank=True)
    # The events stream entry id last applied (as TaskRecord.last_event).
    last_event = models.CharField(_("last event"), max_length=64, blank=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        ordering = ("-created_at",)
        indexes = [
            # The admin's filters (state, kind, date) and the prune command's scan.
            models.Index(fields=["state", "-created_at"], name="blitzq_wf_state_idx"),
            models.Index(fields=["kind", "-created_at"], name="blitzq_wf_kind_idx"),
            models.Index(fields=["-created_at"], name="blitzq_wf_created_idx"),
            models.Index(fields=["finished_at"], name="blitzq_wf_finished_idx"),
        ]
        permissions = [("cancel_workflowrecord", _("Can cancel running workflows"))]

    def __str__(self) -> str:
        return f"{self.kind} {self.workflow_id} ({self.state})"

    @property
    def is_final(self) -> bool:
        return self.state != WorkflowState.RUNNING


class OutboxMessage(models.Model):
    """A message written in the caller's transaction, published by the relay.

    ``payload`` is the engine's encoded enqueue item (msgpack, never pickle); the
    row is deleted once Redis holds the message. ``message_id`` is unique, so the
    relay publishing a row twice (it died between publish and delete) enqueues
    under the same id, and the broker's idempotency keeps one message.
    """

    message_id = models.CharField(_("message id"), max_length=200, unique=True)
    outbox = models.CharField(_("outbox"), max_length=100, default="default")
    queue = models.CharField(_("queue"), max_length=100)
    task_name = models.CharField(_("task"), max_length=255)
    payload = models.BinaryField(_("payload"))
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    attempts = models.PositiveIntegerField(_("publish attempts"), default=0)
    last_error = models.TextField(_("last error"), blank=True)

    class Meta:
        verbose_name = _("outbox message")
        verbose_name_plural = _("outbox messages")
        ordering = ("id",)
        indexes = [models.Index(fields=["outbox", "id"], name="blitzq_outbox_idx")]

    def __str__(self) -> str:
        return f"{self.task_name} {self.message_id} (outbox {self.outbox})"


class TaskEffect(models.Model):
    """Proof that an effectively-once task's body committed: inserted in the same
    transaction as the body's writes; a redelivery finds it and skips the body."""

    key = models.CharField(_("key"), max_length=600, unique=True)
    task_name = models.CharField(_("task"), max_length=255)
    task_id = models.CharField(_("task id"), max_length=200)
    result = models.JSONField(_("result"), null=True, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True, db_index=True)

    class Meta:
        verbose_name = _("task effect")
        verbose_name_plural = _("task effects")

    def __str__(self) -> str:
        return f"{self.task_name} {self.key}"


class DeadLetter(models.Model):
    """No table: the admin's dead-letter pages read the engine's dead-letter API (so
    they work with history off). The model carries their permissions."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = [
            ("replay_deadletter", _("Can replay dead letters")),
            ("purge_deadletter", _("Can purge dead letters")),
        ]
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")


class QueueOverview(models.Model):
    """No table: the admin's queue overview reads the engine's stats."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        verbose_name = _("queue")
        verbose_name_plural = _("queues")


class MissedPolicy(models.TextChoices):
    # The engine's missed-run policies (blitzq_django.engine.core.schedules).
    RUN_ONCE = "run_once", _("run once (the latest missed occurrence)")
    RUN_ALL = "run_all", _("run all (up to the catch-up cap)")
    SKIP = "skip", _("skip (unless at most 10 s late)")


class SchedulePriority(models.TextChoices):
    DEFAULT = "", _("the task's")
    HIGH = "high", _("high")
    NORMAL = "normal", _("normal")
    LOW = "low", _("low")


class PeriodicSchedule(models.Model):
    """A periodic schedule kept in the database and edited in the admin
    (docs/scheduling.md, "Schedules in the database").

    ``blitzq_django.periodic_db`` loads the rows as engine schedules for every scheduler;
    a save or delete tells running schedulers to read them again (after the commit).
    Exactly one of ``cron`` and ``every`` is set. Its name is unique here and must not be
    the name of a schedule declared in code or in BLITZQ["PERIODIC"] (the form checks).
    """

    name = models.CharField(_("name"), max_length=150, unique=True,
                            help_text=_("Unique; the occurrence ids are periodic:<name>:<ms>."))
    task = models.CharField(_("task"), max_length=255,
                            help_text=_("The registered task name, e.g. shop.tasks.cleanup."))
    cron = models.CharField(_("cron"), max_length=200, blank=True,
                            help_text=_("minute hour day-of-month month day-of-week, or "
                                        "@hourly, @daily... Leave empty for an interval."))
    every = models.FloatField(_("every (seconds)"), null=True, blank=True,
                              help_text=_("An interval in seconds, aligned on the epoch. "
                                          "Leave empty for a cron expression."))
    timezone = models.CharField(_("time zone"), max_length=64, blank=True,
                                help_text=_("IANA zone of the cron expression (empty: "
                                            "settings.TIME_ZONE)."))
    args = models.JSONField(_("args"), default=list, blank=True,
                            help_text=_('A JSON list, e.g. [1, "two"].'))
    kwargs = models.JSONField(_("kwargs"), default=dict, blank=True,
                              help_text=_('A JSON object, e.g. {"days": 30}.'))
    queue = models.CharField(_("queue"), max_length=100, blank=True,
                             help_text=_("Empty: the task's queue (after ROUTES)."))
    priority = models.CharField(_("priority"), max_length=10, blank=True,
                                choices=SchedulePriority.choices)
    missed = models.CharField(_("missed runs"), max_length=10, choices=MissedPolicy.choices,
                              default=MissedPolicy.RUN_ONCE)
    catch_up = models.PositiveIntegerField(_("catch-up cap"), default=100,
                                           help_text=_("run all: at most this many missed "
                                                       "occurrences run (the most recent)."))
    enabled = models.BooleanField(_("enabled"), default=True,
                                  help_text=_("A paused schedule is not dispatched."))
    description = models.TextField(_("description"), blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("periodic schedule")
        verbose_name_plural = _("periodic schedules")
        ordering = ("name",)
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(cron="", every__isnull=False, every__gt=0)
                           | (~models.Q(cron="") & models.Q(every__isnull=True))),
                name="blitzq_schedule_cron_xor_every"),
        ]
        permissions = [("run_periodicschedule", _("Can run a schedule now"))]

    def __str__(self) -> str:
        return self.name
