"""Periodic schedules stored in the database and their admin, through Django's test
client against a real Redis: the form refuses bad input naming the schedule and the
field, permissions (403 and hidden actions), pause / resume / run now with their
confirmation pages, the code schedules listed read-only, and a save reaching running
schedulers at once (a publish after the commit), each occurrence dispatched once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test import Client as DjangoClient

from blitzq_django import periodic_db
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.engine.client.context import current_task
from blitzq_django.engine.core.schedules import Cron, Every
from blitzq_django.models import PeriodicSchedule
from testproject.shop import tasks
from tests.support.published import Published
from tests.support.waiting import wait_until

from .conftest import running_worker
from .scheduler_threads import running_schedulers

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/blitzq_django/periodicschedule/"
ADD = LIST + "add/"
XSS = "<script>alert(1)</script>"
EDIT = ("view_periodicschedule", "add_periodicschedule", "change_periodicschedule",
        "delete_periodicschedule")

_runs: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
_runs_lock = threading.Lock()


@blitzq_task(name="tests.schedules.tick")
def tick(*args: Any, **kwargs: Any) -> None:
    context = current_task()
    with _runs_lock:
        _runs.append((context.id if context else "", args, kwargs))


def runs_of(prefix: str) -> list[str]:
    with _runs_lock:
        return [message_id for message_id, _a, _k in _runs if message_id.startswith(prefix)]


@pytest.fixture(autouse=True)
def _no_runs() -> Iterator[None]:
    with _runs_lock:
        _runs.clear()
    yield


def login(*perms: str, csrf: bool = False) -> DjangoClient:
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="blitzq_django", codename__in=perms))
    browser = DjangoClient(enforce_csrf_checks=csrf)
    browser.force_login(user)
    return browser


def form(**changes: Any) -> dict[str, Any]:
    data = {"name": "nightly-report", "task": tick.name, "cron": "", "every": "60",
            "timezone": "", "args": "[]", "kwargs": "{}", "queue": "", "priority": "",
            "missed": "run_once", "catch_up": "100", "enabled": "on", "description": "",
            "_save": "Save"}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def row(**changes: Any) -> PeriodicSchedule:
    values: dict[str, Any] = {"name": "row", "task": tick.name, "every": 60.0}
    values.update(changes)
    return PeriodicSchedule.objects.create(**values)


@pytest.fixture
def published(blitzq_redis: Client, redis_url: str) -> Iterator[Published]:
    # The "schedules changed" publishes (what running schedulers listen to).
    watcher = Published(redis_url,
                        channel=blitzq_redis.broker.keys.schedules_channel)  # type: ignore[attr-defined]
    yield watcher
    watcher.close()


# -- the form ------------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"every": "", "cron": "61 * * * *"}, "cron", ["61 * * * *"]),
    ({"every": "", "cron": "* * *"}, "cron", ["5 fields"]),
    ({"every": "", "cron": "@fortnightly"}, "cron", ["nickname"]),
    ({"every": "", "cron": "@daily", "timezone": "Europe/Atlantis"}, "timezone",
     ["time zone", "Europe/Atlantis"]),
    ({"every": "0"}, "every", ["every"]),
    ({"every": "-5"}, "every", ["every"]),
    ({"every": "0.001"}, "every", ["every", "0.01"]),
    ({"every": "", "cron": ""}, "cron", ["cron expression or an interval"]),
    ({"every": "60", "cron": "@daily"}, "every", ["not both"]),
    ({"task": "shop.tasks.no_such_task"}, "task", ["shop.tasks.no_such_task", "registered"]),
    ({"args": '{"a": 1}'}, "args", ["args", "list"]),
    ({"kwargs": "[1]"}, "kwargs", ["kwargs", "object"]),
    ({"args": "[123456789012345678901234567890]"}, "args", ["args[0]"]),
    ({"args": "[1,"}, "args", ["args", "JSON"]),
    ({"queue": "bad queue"}, "queue", ["queue"]),
    ({"name": "two words"}, "name", ["whitespace"]),
    ({"name": tasks.count_orders.name}, "name", ["declared in code"]),
    ({"catch_up": "0"}, "catch_up", ["catch-up"]),
])
def test_the_form_refuses_bad_input_naming_the_schedule_and_field(
        blitzq_memory: Client, changes: dict[str, Any], field: str, words: list[str]) -> None:
    response = login(*EDIT).post(ADD, form(**changes))
    assert response.status_code == 200, response
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    text = " ".join(errors[field])
    assert "Schedule '" in text, text
    for word in words:
        assert word in text, text
    assert not PeriodicSchedule.objects.exists()


def test_a_duplicate_name_is_refused_naming_it(blitzq_memory: Client) -> None:
    row(name="nightly-report")
    response = login(*EDIT).post(ADD, form())
    errors = response.context["adminform"].form.errors
    assert "Schedule 'nightly-report': name is already taken" in " ".join(errors["name"])
    assert PeriodicSchedule.objects.count() == 1


def test_the_database_refuses_cron_and_every_together() -> None:
    from django.db import IntegrityError

    with pytest.raises(IntegrityError), transaction.atomic():
        row(cron="@daily", every=60.0)
    with pytest.raises(IntegrityError), transaction.atomic():
        row(name="neither", every=None)


def test_a_valid_form_saves_a_schedule_that_loads_as_the_engine_reads_it(
        blitzq_memory: Client) -> None:
    response = login(*EDIT).post(ADD, form(
        name="berlin-morning", every="", cron="0  7 * * mon-fri", timezone="Europe/Berlin",
        args='[1, "two"]', kwargs='{"days": 30}', queue="emails", priority="high",
        missed="run_all", catch_up="5"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    saved = PeriodicSchedule.objects.get(name="berlin-morning")
    (schedule,) = periodic_db.source.load()
    assert schedule.name == "berlin-morning" and schedule.source == "db"
    assert schedule.when == Cron("0 7 * * mon-fri", "Europe/Berlin")
    assert schedule.args == (1, "two") and schedule.kwargs == {"days": 30}
    assert schedule.queue == "emails" and schedule.priority == "high"
    assert schedule.missed == "run_all" and schedule.catch_up == 5
    saved.enabled = False
    saved.save()
    (paused,) = periodic_db.source.load()
    assert paused.enabled is False  # loaded, but not dispatched


def test_an_interval_without_a_zone_and_a_cron_in_the_default_zone(settings: Any) -> None:
    settings.TIME_ZONE = "America/New_York"
    row(name="a", every=1.5)
    row(name="b", every=None, cron="@hourly")
    loaded = {s.name: s for s in periodic_db.source.load()}
    assert loaded["a"].when == Every(1500)
    assert loaded["b"].when == Cron("@hourly", "America/New_York")


def test_a_row_that_no_longer_builds_is_left_out_of_the_load(caplog: Any) -> None:
    row(name="good")
    PeriodicSchedule.objects.filter(pk=row(name="bad").pk).update(timezone="Moon/Base",
                                                                 every=None, cron="@daily")
    assert [s.name for s in periodic_db.source.load()] == ["good"]
    assert "'bad' is invalid" in caplog.text and "Moon/Base" in caplog.text


# -- the list --------------------------------------------------------------------------------


def test_the_list_shows_timing_next_runs_and_the_code_schedules_read_only(
        blitzq_redis: Client) -> None:
    row(name="every-minute", every=60.0, description=XSS)
    row(name="paused-one", every=None, cron="30 2 * * *", timezone="Europe/Berlin",
        enabled=False)
    row(name=f"x{XSS}", every=5.0)
    html = login(*EDIT).get(LIST).content.decode()
    assert "every 60 s" in html and "cron 30 2 * * *" in html and "Europe/Berlin" in html
    assert html.count('class="blitzq-next"') >= 6  # 3 next runs of the two enabled rows
    assert "paused" in html
    assert XSS not in html and "x&lt;script&gt;" in html
    assert 'id="blitzq-code-schedules"' in html
    code_part = html.split('id="blitzq-code-schedules"', 1)[1]
    assert tasks.count_orders.name in code_part and "every 60s" in code_part
    assert "cron &#x27;30 2 * * *&#x27; Europe/Berlin" in code_part
    assert "never" in code_part


def test_the_list_still_renders_when_redis_is_down(settings: Any, blitzq_memory: Any) -> None:
    settings.BLITZQ = {"REDIS_URL": "redis://127.0.0.1:1/0", "QUEUES": ["default"]}
    row(name="every-minute")
    response = login(*EDIT).get(LIST)
    assert response.status_code == 200
    html = response.content.decode()
    assert "every-minute" in html and "could not be read" in html


# -- permissions ---------------------------------------------------------------------------


def test_staff_without_permissions_get_403(blitzq_memory: Client) -> None:
    target = row()
    browser = login()
    for url in (LIST, ADD, f"{LIST}{target.pk}/change/", f"{LIST}{target.pk}/run/"):
        assert browser.get(url).status_code == 403, url
    assert browser.post(f"{LIST}{target.pk}/run/").status_code == 403


def test_view_only_staff_see_the_list_without_actions_or_run_button(
        blitzq_memory: Client) -> None:
    target = row()
    browser = login("view_periodicschedule")
    html = browser.get(LIST).content.decode()
    assert "row" in html
    for action in ("pause_selected", "resume_selected", "run_now_selected"):
        assert action not in html
    assert 'id="blitzq-run-now"' not in browser.get(f"{LIST}{target.pk}/change/").content.decode()
    assert browser.post(f"{LIST}{target.pk}/run/").status_code == 403
    response = browser.post(LIST, {"action": "pause_selected", "_selected_action": [target.pk],
                                   "post": "yes"})
    assert PeriodicSchedule.objects.get().enabled is True, response


def test_run_now_needs_its_own_permission(blitzq_memory: Client) -> None:
    target = row()
    editor = login(*EDIT)
    html = editor.get(LIST).content.decode()
    assert "pause_selected" in html and "run_now_selected" not in html
    assert 'id="blitzq-run-now"' not in editor.get(f"{LIST}{target.pk}/change/").content.decode()
    assert editor.post(f"{LIST}{target.pk}/run/").status_code == 403


# -- actions ---------------------------------------------------------------------------------


def test_pause_and_resume_ask_first_then_tell_the_schedulers(
        blitzq_redis: Client, published: Published) -> None:
    a, b = row(name="a"), row(name="b")
    browser = login(*EDIT, csrf=True)
    page = browser.get(LIST)
    token = page.cookies["csrftoken"].value
    selected = {"_selected_action": [a.pk, b.pk], "csrfmiddlewaretoken": token}
    published.drain()
    before = published.count

    confirm = browser.post(LIST, {**selected, "action": "pause_selected"})
    text = confirm.content.decode()
    assert confirm.status_code == 200 and "Are you sure you want to pause 2 schedules" in text
    assert PeriodicSchedule.objects.filter(enabled=True).count() == 2

    done = browser.post(LIST, {**selected, "action": "pause_selected", "post": "yes"},
                        follow=True)
    assert "Paused 2 schedules: a, b" in done.content.decode()
    assert not PeriodicSchedule.objects.filter(enabled=True).exists()
    wait_until(lambda: published.drain() > before, timeout=2, message="the publish")
    assert all(not s.enabled for s in periodic_db.source.load())

    paused = published.count
    browser.post(LIST, {**selected, "action": "resume_selected", "post": "yes"})
    assert PeriodicSchedule.objects.filter(enabled=True).count() == 2
    wait_until(lambda: published.drain() > paused, timeout=2, message="the publish")

    # Without the CSRF token, nothing happens.
    refused = browser.post(LIST, {"_selected_action": [a.pk], "action": "pause_selected",
                                  "post": "yes"})
    assert refused.status_code == 403
    assert PeriodicSchedule.objects.filter(enabled=True).count() == 2


def test_run_now_enqueues_one_message_with_the_schedules_arguments(
        blitzq_redis: Client) -> None:
    target = row(name="now", args=[7], kwargs={"colour": "blue"}, enabled=False)
    browser = login(*EDIT, "run_periodicschedule")
    change = browser.get(f"{LIST}{target.pk}/change/").content.decode()
    assert 'id="blitzq-run-now"' in change
    confirm = browser.get(f"{LIST}{target.pk}/run/").content.decode()
    assert "Are you sure you want to run now 1 schedule" in confirm
    assert blitzq_redis.queue_stats("default").ready == 0
    done = browser.post(f"{LIST}{target.pk}/run/", follow=True).content.decode()
    assert "Schedule &#x27;now&#x27;: tests.schedules.tick enqueued now as" in done
    assert blitzq_redis.queue_stats("default").ready == 1
    with running_worker(blitzq_redis):
        wait_until(lambda: _runs, timeout=20, message="the run")
    ((message_id, args, kwargs),) = _runs
    assert args == (7,) and kwargs == {"colour": "blue"}
    assert not message_id.startswith("periodic:")  # a run of its own, not an occurrence

    # The bulk action does the same through its confirmation page.
    browser.post(LIST, {"_selected_action": [target.pk], "action": "run_now_selected",
                        "post": "yes"})
    assert blitzq_redis.queue_stats("default").ready == 1


# -- telling the schedulers --------------------------------------------------------------------


def test_a_save_publishes_after_the_commit_only(blitzq_redis: Client,
                                                published: Published) -> None:
    published.drain()
    with transaction.atomic():
        target = row()
        assert published.drain() == 0  # nothing before the commit
    wait_until(lambda: published.drain() == 1, timeout=2, message="the publish on commit")
    with transaction.atomic():
        PeriodicSchedule.objects.get(pk=target.pk).delete()
        transaction.set_rollback(True)
    assert published.drain() == 1  # rolled back: nothing to tell
    target.delete()
    wait_until(lambda: published.drain() == 2, timeout=2, message="the publish on delete")


def test_a_new_row_reaches_every_running_scheduler_within_2s_and_runs_once_per_occurrence(
        blitzq_redis: Client) -> None:
    with running_worker(blitzq_redis), running_schedulers(2) as schedulers:
        saved = time.monotonic()
        row(name="fast", every=0.2, args=["x"])
        wait_until(lambda: all("fast" in s.schedules for s in schedulers), timeout=2,
                   message="both schedulers loading the new row")
        assert time.monotonic() - saved < 2
        wait_until(lambda: len(runs_of("periodic:fast:")) >= 5, timeout=20,
                   message="five runs")

        # Pause it (a bulk update sends no signal: tell them by hand, as the admin does):
        # both schedulers know within 2 s, and no occurrence is handled after that.
        PeriodicSchedule.objects.filter(name="fast").update(enabled=False)
        periodic_db.notify()
        wait_until(lambda: all(not s.schedules["fast"].enabled for s in schedulers),
                   timeout=2, message="both schedulers seeing the pause")
        schedule = periodic_db.to_schedule(PeriodicSchedule.objects.get(name="fast"))
        (paused,) = blitzq_redis.schedule_infos([schedule])
        witness = row(name="witness", every=0.2)
        wait_until(lambda: len(runs_of("periodic:witness:")) >= 3, timeout=20,
                   message="three runs of another schedule")
        (later,) = blitzq_redis.schedule_infos([schedule])
        assert later.last_run_ms == paused.last_run_ms, "dispatched while paused"
        wait_until(lambda: paused.last_message_id in runs_of("periodic:fast:"), timeout=20,
                   message="the last dispatched occurrence run")
        witness.delete()
    fast = runs_of("periodic:fast:")
    assert len(fast) == len(set(fast)), "an occurrence ran twice"
    assert all(args == ("x",) for _id, args, _kw in _runs if _id.startswith("periodic:fast:"))


def test_a_database_that_cannot_be_read_keeps_its_schedules_and_is_read_again(
        blitzq_redis: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from django.db import OperationalError

    from blitzq_django.engine.scheduler import Scheduler

    row(name="kept")
    failing = {"on": False}
    real_rows = periodic_db.DatabaseSource._rows

    def rows(self: Any) -> Any:
        if failing["on"]:
            raise OperationalError("the database is down")
        return real_rows(self)

    monkeypatch.setattr(periodic_db.DatabaseSource, "_rows", rows)

    def added() -> None:
        try:
            row(name="added")
        finally:
            connection.close()  # this executor thread's own connection

    async def scenario() -> None:
        scheduler = Scheduler(blitzq_redis, sources=[blitzq_redis.schedule_registry,
                                                     periodic_db.DatabaseSource()],
                              promote=False)
        scheduler.source_retry_s = 0.0  # read a failed source again at the next pass
        code = {s.name for s in blitzq_redis.schedule_registry}
        try:
            await scheduler.load()
            assert set(scheduler.schedules) == code | {"kept"}
            failing["on"] = True
            scheduler.reload()
            await scheduler._pass()  # noqa: SLF001 - one pass
            assert set(scheduler.schedules) == code | {"kept"}  # kept meanwhile
            assert scheduler._source_retry is not None  # noqa: SLF001
            failing["on"] = False
            await asyncio.to_thread(added)
            await scheduler._pass()  # noqa: SLF001 - the failed source is read again
            assert set(scheduler.schedules) == code | {"kept", "added"}
            assert scheduler._source_retry is None  # noqa: SLF001
        finally:
            await scheduler.broker.aclose()  # type: ignore[attr-defined]

    asyncio.run(scenario())


def test_without_the_table_a_scheduler_runs_without_database_schedules(
        monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    from django.db import ProgrammingError

    def rows(self: Any) -> Any:
        raise ProgrammingError("no such table")

    monkeypatch.setattr(periodic_db.DatabaseSource, "_rows", rows)
    monkeypatch.setattr(periodic_db.DatabaseSource, "_table_exists", lambda self: False)
    source = periodic_db.DatabaseSource()
    assert source.load() == [] and source.load() == []
    assert caplog.text.count("run manage.py migrate blitzq_django") == 1


def test_a_scheduler_whose_database_is_down_at_start_runs_the_code_schedules(
        blitzq_redis: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from django.db import OperationalError

    from blitzq_django.engine.scheduler import Scheduler

    def rows(self: Any) -> Any:
        raise OperationalError("the database is down")

    monkeypatch.setattr(periodic_db.DatabaseSource, "_rows", rows)
    monkeypatch.setattr(periodic_db.DatabaseSource, "_table_exists", lambda self: True)

    async def scenario() -> None:
        scheduler = Scheduler(blitzq_redis, sources=[blitzq_redis.schedule_registry,
                                                     periodic_db.DatabaseSource()],
                              promote=False)
        try:
            await scheduler.load()
            assert tasks.count_orders.name in scheduler.schedules
            assert scheduler._source_retry is not None  # noqa: SLF001
        finally:
            await scheduler.broker.aclose()  # type: ignore[attr-defined]

    asyncio.run(scenario())
