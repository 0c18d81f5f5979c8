"""A cron expression that never fires ("0 0 30 2 *": February 30th) is refused where a
schedule enters (the admin form, BLITZQ["PERIODIC"], the decorators); one already stored
(a row saved before this check, or edited by hand) leaves the schedules page rendering
and every scheduler running the other schedules."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client as DjangoClient

from blitzq_django import conf
from blitzq_django.checks import check_settings
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.models import PeriodicSchedule
from testproject.shop import tasks
from tests.support.waiting import wait_until

from .scheduler_threads import running_schedulers

pytestmark = pytest.mark.django_db(transaction=True)

FEB30 = "0 0 30 2 *"
LIST = "/admin/blitzq_django/periodicschedule/"


@blitzq_task(name="tests.never.tick")
def tick() -> None:
    pass


def staff() -> DjangoClient:
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="blitzq_django", codename__endswith="_periodicschedule"))
    browser = DjangoClient()
    browser.force_login(user)
    return browser


def test_the_admin_form_refuses_a_cron_that_never_fires(blitzq_memory: Client) -> None:
    response = staff().post(LIST + "add/", {
        "name": "feb30", "task": tick.name, "cron": FEB30, "every": "", "timezone": "",
        "args": "[]", "kwargs": "{}", "queue": "", "priority": "", "missed": "run_once",
        "catch_up": "100", "enabled": "on", "description": "", "_save": "Save"})
    assert response.status_code == 200
    errors = " ".join(response.context["adminform"].form.errors["cron"])
    assert "Schedule 'feb30'" in errors and "never fires" in errors, errors
    assert not PeriodicSchedule.objects.exists()


def test_a_periodic_setting_that_never_fires_is_a_check_error(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "PERIODIC": {
        "feb30": {"task": tasks.noop.name, "cron": FEB30}}}
    errors = [e for e in check_settings() if e.id == "blitzq.E015"]
    assert len(errors) == 1 and "'feb30'" in errors[0].msg
    assert "never fires" in errors[0].msg
    with pytest.raises(ImproperlyConfigured, match="never fires"):
        conf.get_client()


def test_a_task_declared_with_a_schedule_that_never_fires_fails_at_import() -> None:
    def feb30_job() -> None: ...

    with pytest.raises(ImproperlyConfigured, match="never fires"):
        blitzq_task(schedule=FEB30)(feb30_job)


def test_a_stored_row_that_never_fires_leaves_the_page_and_the_schedulers_working(
        blitzq_redis: Client, caplog: Any) -> None:
    # Saved through the ORM, as a row saved before the check (or edited by hand) is.
    PeriodicSchedule.objects.create(name="feb30", task=tick.name, cron=FEB30, every=None)
    PeriodicSchedule.objects.create(name="often", task=tick.name, every=0.2)
    page = staff().get(LIST)
    assert page.status_code == 200
    html = page.content.decode()
    assert "feb30" in html and "invalid" in html and "often" in html
    with caplog.at_level(logging.ERROR, logger="blitzq.scheduler"), \
            running_schedulers(1) as (scheduler,):
        wait_until(lambda: scheduler.dispatched >= 2, timeout=15,
                   message="the other schedule dispatched")
        assert set(scheduler.schedules) >= {"often"} and "feb30" not in scheduler.schedules
    assert any("'feb30'" in r.getMessage() and "never fires" in r.getMessage()
               for r in caplog.records if r.levelno == logging.ERROR)
