"""Periodic schedules: those stored in the database (create, edit, pause, resume, run
now) and, read-only beside them, those declared in code and in BLITZQ["PERIODIC"].

Rows are ``PeriodicSchedule``; the form validates with the engine's rules (the same
conversion a scheduler loads them with, ``periodic_db.to_schedule``), and a save tells
every running scheduler (``periodic_db``: post_save, after the commit). Next runs are the
engine's schedule maths; last run, last message and outcome come from Redis
(``client.schedules``-style infos). Viewing, adding, changing (pause, resume) and deleting
keep Django's model permissions; "run now" needs ``blitzq_django.run_periodicschedule``:
the action and button are hidden without it, and its URL answers 403.
"""

from __future__ import annotations

import datetime as dt
import re
from types import SimpleNamespace
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import mark_safe

from .. import periodic
from ..engine import CallOptions
from ..engine.client.schedules import ScheduleInfo
from ..engine.core import schedules as rules
from ..engine.core.ids import now_ms
from ..engine.core.names import check_name
from ..engine.core.schedules import Schedule
from ..engine.errors import BlitzqError
from ..models import PeriodicSchedule
from ..periodic import database as periodic_db
from ..registry import registry
from ..runtime import get_client
from ..web.common import ENGINE_ERRORS, age, client, safely

#: Form fields, and the words of engine messages that point at them (first match wins).
FIELD_WORDS = (("kwargs", "kwargs"), ("args", "args"), ("cron", "cron"), ("every", "every"),
               ("tz ", "timezone"), ("queue", "queue"), ("priority", "priority"),
               ("missed", "missed"), ("catch_up", "catch_up"), ("task", "task"),
               ("name", "name"))
#: A last run, message or outcome when Redis cannot be read: not "-" (never ran).
UNKNOWN = mark_safe('<span class="blitzq-muted">unknown (Redis could not be read)</span>')
RUN_NOTE = ("Each schedule's task is enqueued once, at once, with the schedule's arguments "
            "(paused ones too), as a message of its own: the schedule's occurrences are not "
            "changed.")


# -- the form ------------------------------------------------------------------------


class TaskNameInput(forms.TextInput):
    """A text input offering the registered task names (a datalist)."""

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None,
               renderer: Any = None) -> str:
        list_id = f"blitzq-tasks-{name}"
        attrs = {**(attrs or {}), "list": list_id, "autocomplete": "off"}
        options = format_html_join("", '<option value="{}">',
                                   ((spec.name,) for spec in sorted(registry,
                                                                    key=lambda s: s.name)))
        return format_html('{}<datalist id="{}">{}</datalist>',
                           super().render(name, value, attrs, renderer), list_id, options)


def code_schedule_names() -> set[str]:
    """Names of the schedules declared in code and in BLITZQ["PERIODIC"]."""
    names = {s.name for s in periodic.code_schedules}
    try:
        names |= {s.name for s in get_client().schedule_registry}
    except ENGINE_ERRORS:  # settings broken: checks report it; code names still count
        pass
    return names


class PeriodicScheduleForm(forms.ModelForm):
    """Every field checked with the engine's rules; each error names the schedule and the
    field it is shown under."""

    class Meta:
        model = PeriodicSchedule
        fields = ("name", "task", "cron", "every", "timezone", "args", "kwargs", "queue",
                  "priority", "missed", "catch_up", "enabled", "description")
        widgets = {"task": TaskNameInput(attrs={"size": 60}),
                   "args": forms.Textarea(attrs={"rows": 2, "cols": 60}),
                   "kwargs": forms.Textarea(attrs={"rows": 3, "cols": 60}),
                   "description": forms.Textarea(attrs={"rows": 3, "cols": 60})}
        help_texts = {"task": "One of the tasks registered in this process (suggested as "
                              "you type), e.g. shop.tasks.cleanup."}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The admin renders help texts as HTML (its fieldset.html marks them safe); ours are
        # text ("periodic:<name>:<ms>" would lose its <name> as a tag), so escape them.
        for field in self.fields.values():
            field.help_text = escape(field.help_text)

    def _where(self) -> str:
        name = self.cleaned_data.get("name") or self.data.get(self.add_prefix("name")) or ""
        return f"Schedule {str(name)!r}: " if name else "New schedule: "

    def _fail(self, text: str) -> forms.ValidationError:
        return forms.ValidationError(f"{self._where()}{text}")

    def clean_name(self) -> str:
        name = (self.cleaned_data.get("name") or "").strip()
        try:
            rules.check_schedule_name(name)
        except BlitzqError as exc:
            raise forms.ValidationError(f"Schedule {name!r}: {exc}") from None
        taken = PeriodicSchedule.objects.filter(name=name)
        if self.instance.pk is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise forms.ValidationError(f"Schedule {name!r}: name is already taken by another "
                                        "schedule in the database; choose another name.")
        if name in code_schedule_names():
            raise forms.ValidationError(
                f"Schedule {name!r}: name is already the name of a schedule declared in code "
                "or in BLITZQ['PERIODIC']; choose another name.")
        return name

    def clean_task(self) -> str:
        task = (self.cleaned_data.get("task") or "").strip()
        if registry.find(task) is None:
            raise self._fail(f"task {task!r} is not a registered task (module.function, or "
                             "its name=; its tasks.py must be in an installed app).")
        return task

    def clean_cron(self) -> str:
        cron = " ".join((self.cleaned_data.get("cron") or "").split())
        if cron:
            problem = rules.cron_problem(cron)
            if problem:
                raise self._fail(problem)
        return cron

    def clean_every(self) -> float | None:
        every = self.cleaned_data.get("every")
        if every is not None:
            try:
                rules.every_ms(every)
            except BlitzqError as exc:
                raise self._fail(str(exc)) from None
        return every

    def clean_timezone(self) -> str:
        tz = (self.cleaned_data.get("timezone") or "").strip()
        if tz:
            try:
                rules.zone(tz)
            except BlitzqError as exc:
                raise self._fail(str(exc).replace("tz ", "time zone ", 1)) from None
        return tz

    def clean_args(self) -> Any:
        args = self.cleaned_data.get("args")
        if args is None:
            return []
        if not isinstance(args, list):
            raise self._fail(f"args must be a JSON list like [1, \"two\"], got {args!r:.60}")
        return args

    def clean_kwargs(self) -> Any:
        kwargs = self.cleaned_data.get("kwargs")
        if kwargs is None:
            return {}
        if not isinstance(kwargs, dict):
            raise self._fail(f"kwargs must be a JSON object like {{\"days\": 30}}, got "
                             f"{kwargs!r:.60}")
        return kwargs

    def clean_queue(self) -> str:
        queue = (self.cleaned_data.get("queue") or "").strip()
        if queue:
            try:
                check_name("queue", queue)
            except BlitzqError as exc:
                raise self._fail(str(exc)) from None
        return queue

    def clean_catch_up(self) -> int:
        value = self.cleaned_data.get("catch_up")
        if value is None or not 1 <= value <= rules.MAX_CATCH_UP:
            raise self._fail(f"catch-up cap must be from 1 to {rules.MAX_CATCH_UP}, got "
                             f"{value!r}")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            self._name_errors()
            return data
        has_cron, has_every = bool(data.get("cron")), data.get("every") is not None
        if has_cron == has_every:
            text = ("give a cron expression or an interval (every), not both" if has_cron
                    else "give a cron expression or an interval (every)")
            self.add_error("cron", self._fail(text))
            self.add_error("every", self._fail(text))
            return data
        try:  # the conversion a scheduler loads the row with: what passes here, runs
            periodic_db.to_schedule(SimpleNamespace(**{**_defaults(), **data}))
        except BlitzqError as exc:
            text = str(exc)
            detail = text.split(": ", 1)[1] if text.startswith("schedule ") else text
            self.add_error(_field_of(detail), self._fail(detail))
        return data


    def _name_errors(self) -> None:
        """Django's own messages ("Enter a valid JSON.", "This field is required.") name
        the schedule and the field too."""
        where = self._where()
        for field, errors in list(self._errors.items()):
            if field not in self.fields:
                continue
            label = str(PeriodicSchedule._meta.get_field(field).verbose_name)
            texts = [str(e) for e in errors]
            if all(t.startswith("Schedule ") for t in texts):
                continue
            self._errors[field] = self.error_class(
                [t if t.startswith("Schedule ") else f"{where}{label}: {t}" for t in texts])


def _defaults() -> dict[str, Any]:
    return {"name": "", "task": "", "cron": "", "every": None, "timezone": "", "args": [],
            "kwargs": {}, "queue": "", "priority": "", "missed": "run_once", "catch_up": 100,
            "enabled": True}


def _field_of(message: str) -> str | None:
    argument = re.search(r"\bargument (\S+)", message)  # "argument args[0] of type ..."
    if argument:
        return "args" if argument.group(1).startswith("args[") else "kwargs"
    if "too large" in message:  # the encoded arguments over MAX_MESSAGE_SIZE
        return "args"
    for word, field in FIELD_WORDS:
        if message.startswith(word):
            return field
    return None


# -- display helpers -------------------------------------------------------------------


def _zone_of(schedule: Schedule) -> str:
    return schedule.when.tz if isinstance(schedule.when, rules.Cron) else ""


def _when(ms: int | None, tz: str = "") -> str:
    if ms is None:
        return ""
    moment = rules.ms_to_datetime(ms, tz) if tz else timezone.localtime(
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC))
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z")


def _relative(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return ""
    if ms >= now_ms:
        seconds = (ms - now_ms) / 1000
        for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
            if seconds >= size:
                return f"in {seconds / size:.0f} {unit}"
        return f"in {seconds:.0f} s"
    return f"{age(ms)} ago"


def describe_runs(schedule: Schedule | None, info: ScheduleInfo | None,
                  now_ms: int, readable: bool = True) -> dict[str, Any]:
    """What the list shows of one schedule: next runs, last run, message and outcome
    (``readable`` False: Redis could not be read, so its runs are unknown, not none)."""
    if schedule is None:
        return {"next": [], "paused": False, "invalid": True}
    tz = _zone_of(schedule)
    base = max(now_ms, info.last_run_ms or 0) if info else now_ms
    try:
        upcoming = periodic_db.next_runs(schedule, base) if schedule.enabled else []
    except Exception:  # noqa: BLE001 - one schedule whose maths fails: shown, not a 500
        return {"next": [], "paused": False, "invalid": True}
    return {
        "next": [(_when(ms, tz), _relative(ms, now_ms)) for ms in upcoming],
        "paused": not schedule.enabled, "invalid": False,
        "last_run": _when(info.last_run_ms, tz) if info and info.last_run_ms else "",
        "last_run_age": _relative(info.last_run_ms, now_ms) if info and info.last_run_ms
        else "",
        "last_message": info.last_message_id or "" if info else "",
        "outcome": info.outcome if info else "unknown",
        "missed_runs": info.missed_runs if info else 0,
        "unreadable": not readable,
    }


def _infos(request: HttpRequest, schedules: list[Schedule]) -> dict[str, ScheduleInfo] | None:
    """The schedules' last runs from Redis; None (and an error message) when it cannot
    be read."""
    found = safely(request, "The last runs could not be read from Redis",
                   lambda: client().schedule_infos(schedules), None)
    return None if found is None else {i.name: i for i in found}


def run_now(row: PeriodicSchedule) -> tuple[bool, str]:
    """Enqueue one message of the schedule's task at once, with its arguments: a run of
    its own (a fresh message id), not an occurrence of the schedule."""
    name = f"Schedule {row.name!r}"
    try:
        schedule = periodic_db.to_schedule(row)
    except BlitzqError as exc:
        return False, f"{name}: not run: {exc}"
    spec = registry.find(schedule.task)
    if spec is None:
        return False, f"{name}: not run: task {schedule.task!r} is not registered."
    try:
        handle = client().enqueue(spec, list(schedule.args), dict(schedule.kwargs), CallOptions(
            queue=schedule.queue, priority=row.priority or None,
            headers={"periodic": schedule.name, "run_now": "admin"}))
    except ENGINE_ERRORS as exc:
        return False, f"{name}: not run: {type(exc).__name__}: {exc}"
    return True, f"{name}: {schedule.task} enqueued now as {handle.id} on queue {handle.queue}."


# -- the admin -------------------------------------------------------------------------


@admin.register(PeriodicSchedule)
class PeriodicScheduleAdmin(admin.ModelAdmin):
    form = PeriodicScheduleForm
    list_display = ("name", "task", "timing", "zone", "enabled", "next_runs_display",
                    "last_run_display", "last_message_display", "outcome_display")
    list_filter = ("enabled", "missed")
    search_fields = ("name", "task", "description")
    ordering = ("name",)
    actions = ["pause_selected", "resume_selected", "run_now_selected"]
    readonly_fields = ("next_runs_display", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "task", "enabled", "description")}),
        ("When", {"fields": ("cron", "every", "timezone", "next_runs_display"),
                  "description": "A cron expression (in its time zone) or an interval in "
                                 "seconds: exactly one."}),
        ("Call", {"fields": ("args", "kwargs", "queue", "priority")}),
        ("Missed runs", {"fields": ("missed", "catch_up")}),
        ("Times", {"fields": ("created_at", "updated_at")}),
    )

    # -- permissions -----------------------------------------------------------------

    def has_run_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.run_periodicschedule")

    # -- display ---------------------------------------------------------------------

    def _runs(self, obj: PeriodicSchedule) -> dict[str, Any]:
        runs = getattr(obj, "blitzq_runs", None)
        if runs is None:  # the change form: one row
            try:
                schedule: Schedule | None = periodic_db.to_schedule(obj)
            except BlitzqError:
                schedule = None
            runs = describe_runs(schedule, None, now_ms())
        return runs

    @admin.display(description="timing")
    def timing(self, obj: PeriodicSchedule) -> str:
        if obj.cron:
            return f"cron {obj.cron}"
        return f"every {obj.every:g} s" if obj.every is not None else ""

    @admin.display(description="time zone")
    def zone(self, obj: PeriodicSchedule) -> str:
        if obj.cron:
            return obj.timezone or f"{periodic.default_tz()} (default)"
        return "-"

    @admin.display(description="next runs")
    def next_runs_display(self, obj: PeriodicSchedule) -> str:
        if obj.pk is None:
            return "-"
        runs = self._runs(obj)
        if runs["invalid"]:
            return mark_safe('<span class="blitzq-state blitzq-state-failed">invalid</span>')
        if runs["paused"]:
            return mark_safe('<span class="blitzq-muted">paused</span>')
        return format_html_join(mark_safe("<br>"), '<span class="blitzq-next">{} ({})</span>',
                                runs["next"]) or "-"

    @admin.display(description="last run")
    def last_run_display(self, obj: PeriodicSchedule) -> str:
        runs = self._runs(obj)
        if runs.get("unreadable"):
            return UNKNOWN
        if not runs.get("last_run"):
            return "-"
        return format_html('<span title="{}">{}</span>', runs["last_run"], runs["last_run_age"])

    @admin.display(description="last message")
    def last_message_display(self, obj: PeriodicSchedule) -> str:
        runs = self._runs(obj)
        if runs.get("unreadable"):
            return UNKNOWN
        return format_html('<span class="blitzq-message">{}</span>',
                           runs.get("last_message") or "-")

    @admin.display(description="outcome")
    def outcome_display(self, obj: PeriodicSchedule) -> str:
        outcome = self._runs(obj).get("outcome") or "unknown"
        return format_html('<span class="blitzq-state blitzq-state-{}">{}</span>', outcome,
                           outcome)

    # -- the list: rows with their runs, and the code schedules below -------------------

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)
        built: dict[int, Schedule | None] = {}
        for row in rows:
            try:
                built[row.pk] = periodic_db.to_schedule(row)
            except BlitzqError:
                built[row.pk] = None
        found = _infos(request, [s for s in built.values() if s is not None])
        now = now_ms()
        for row in rows:
            schedule = built[row.pk]
            row.blitzq_runs = describe_runs(
                schedule, found.get(schedule.name) if schedule and found else None, now,
                readable=found is not None)
        return changelist

    def code_rows(self, request: HttpRequest) -> list[dict[str, Any]]:
        schedules: list[Schedule] = safely(
            request, "The schedules declared in code could not be read",
            lambda: list(client().schedule_registry), list(periodic.code_schedules))
        found = _infos(request, schedules) if schedules else {}
        now = now_ms()
        out = []
        for schedule in sorted(schedules, key=lambda s: s.name):
            info = found.get(schedule.name) if found else None
            out.append({"name": schedule.name, "task": schedule.task,
                        "timing": schedule.describe(), "source": schedule.source,
                        "zone": _zone_of(schedule) or "-",
                        "queue": info.queue if info else (schedule.queue or ""),
                        "missed": schedule.missed, "enabled": schedule.enabled,
                        "registered": registry.find(schedule.task) is not None,
                        **describe_runs(schedule, info, now, readable=found is not None)})
        return out

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        context = {"blitzq_code_schedules": self.code_rows(request)
                   if self.has_view_or_change_permission(request) else [],
                   **(extra_context or {})}
        return super().changelist_view(request, context)

    # -- bulk actions, each through a confirmation page --------------------------------

    def _confirm(self, request: HttpRequest, queryset: QuerySet[PeriodicSchedule], action: str,
                 verb: str, note: str) -> TemplateResponse:
        return TemplateResponse(
            request, "admin/blitzq_django/periodicschedule/confirm_action.html", {
                **self.admin_site.each_context(request),
                "title": f"{verb.capitalize()} schedules: are you sure?",
                "opts": self.opts, "queryset": queryset, "action": action, "verb": verb,
                "note": note, "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "selected": [str(pk) for pk in queryset.values_list("pk", flat=True)],
            })

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[PeriodicSchedule],
                     enabled: bool) -> None:
        names = list(queryset.exclude(enabled=enabled).values_list("name", flat=True))
        changed = queryset.filter(name__in=names).update(enabled=enabled,
                                                         updated_at=timezone.now())
        if changed:
            periodic_db.notify_on_commit(queryset.db)  # update() sends no post_save
        verb = "Resumed" if enabled else "Paused"
        shown = ", ".join(sorted(names)[:20]) + (" …" if len(names) > 20 else "")
        messages.success(request, f"{verb} {changed} schedule{'' if changed == 1 else 's'}"
                                  f"{': ' + shown if changed else ''}. Running schedulers "
                                  "are told at once.")

    @admin.action(permissions=["change"], description="Pause selected schedules")
    def pause_selected(self, request: HttpRequest,
                       queryset: QuerySet[PeriodicSchedule]) -> HttpResponse | None:
        if request.POST.get("post") != "yes":
            return self._confirm(request, queryset, "pause_selected", "pause",
                                 "A paused schedule is not dispatched until it is resumed; "
                                 "the occurrences meanwhile are not run later.")
        self._set_enabled(request, queryset, False)
        return None

    @admin.action(permissions=["change"], description="Resume selected schedules")
    def resume_selected(self, request: HttpRequest,
                        queryset: QuerySet[PeriodicSchedule]) -> HttpResponse | None:
        if request.POST.get("post") != "yes":
            return self._confirm(request, queryset, "resume_selected", "resume",
                                 "Each is dispatched again from its next occurrence.")
        self._set_enabled(request, queryset, True)
        return None

    @admin.action(permissions=["run"], description="Run selected schedules now")
    def run_now_selected(self, request: HttpRequest,
                         queryset: QuerySet[PeriodicSchedule]) -> HttpResponse | None:
        if request.POST.get("post") != "yes":
            return self._confirm(request, queryset, "run_now_selected", "run now", RUN_NOTE)
        for ok, text in (run_now(row) for row in queryset):
            messages.add_message(request, messages.SUCCESS if ok else messages.WARNING, text)
        return None

    # -- the "run now" button of the change page (POST; a GET asks first) -------------

    def get_urls(self) -> list[Any]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        return [path("<path:object_id>/run/", self.admin_site.admin_view(self.run_view),
                     name=f"{info}_run"),
                *super().get_urls()]

    def run_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not (self.has_run_permission(request) and self.has_view_permission(request)):
            raise PermissionDenied
        if not str(object_id).isdigit():
            return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_"
                                                f"{self.opts.model_name}_changelist",
                                                current_app=self.admin_site.name))
        row = get_object_or_404(PeriodicSchedule, pk=object_id)
        if request.method != "POST":
            return self._confirm(request, PeriodicSchedule.objects.filter(pk=row.pk),
                                 "run_now_selected", "run now", RUN_NOTE)
        ok, text = run_now(row)
        messages.add_message(request, messages.SUCCESS if ok else messages.WARNING, text)
        return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_"
                                            f"{self.opts.model_name}_change", args=[row.pk],
                                            current_app=self.admin_site.name))

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], *args: Any,
                           **kwargs: Any) -> HttpResponse:
        context["can_run"] = self.has_run_permission(request)
        return super().render_change_form(request, context, *args, **kwargs)
