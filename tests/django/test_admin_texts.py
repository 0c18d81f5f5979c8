"""The admin shows blitzq's help texts as text (Django's admin renders help texts as
HTML: "periodic:<name>:<ms>" lost "<name>" and "<ms>" as tags), and the schedule form's
task field offers the registered tasks while still refusing an unknown name clearly."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client as DjangoClient
from django.utils import timezone
from django.utils.html import strip_tags

from blitzq_django import conf
from blitzq_django.admin.schedules import PeriodicScheduleForm
from blitzq_django.models import PeriodicSchedule, TaskRecord

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = "/admin/blitzq_django/"
HELP = re.compile(r'<div class="help"[^>]*id="id_(\w+)_helptext">\s*<div>(.*?)</div>', re.S)


@pytest.fixture
def web(blitzq_redis: Any) -> DjangoClient:
    browser = DjangoClient()
    browser.force_login(User.objects.create_superuser("root", password="pw"))
    return browser


def shown_help(page: str) -> dict[str, str]:
    """Each field's help text as a reader sees it: tags dropped, entities decoded."""
    return {field: html.unescape(strip_tags(inner)).strip() for field, inner in HELP.findall(page)}


def intended_help() -> dict[str, str]:
    """The help texts the schedule form means to show, as plain text."""
    meta = PeriodicScheduleForm.Meta
    texts = {f.name: str(f.help_text) for f in PeriodicSchedule._meta.get_fields()
             if getattr(f, "help_text", "") and f.name in meta.fields}
    texts.update({name: str(text) for name, text in getattr(meta, "help_texts", {}).items()})
    return texts


def test_the_schedule_form_shows_every_help_text_as_text(web: DjangoClient) -> None:
    wanted = intended_help()
    assert "periodic:<name>:<ms>" in wanted["name"]  # the text that lost its words
    row = PeriodicSchedule.objects.create(name="nightly", task="testproject.shop.tasks.noop",
                                          cron="0 3 * * *")
    for url in (f"{ADMIN}periodicschedule/add/", f"{ADMIN}periodicschedule/{row.pk}/change/"):
        page = web.get(url).content.decode()
        shown = shown_help(page)
        assert shown == wanted, url
        assert "periodic:&lt;name&gt;:&lt;ms&gt;" in page


def test_no_blitzq_admin_page_shows_help_or_descriptions_as_html(web: DjangoClient) -> None:
    """Every help text and fieldset description of the blitzq admins that holds a "<",
    ">" or "&" is shown as the text it is."""
    record = TaskRecord.objects.create(task_id="t-1", task_name="x", queue="default",
                                       created_at=timezone.now())
    row = PeriodicSchedule.objects.create(name="n", task="testproject.shop.tasks.noop",
                                          every=60)
    pages = {TaskRecord: f"{ADMIN}taskrecord/{record.pk}/change/",
             PeriodicSchedule: f"{ADMIN}periodicschedule/{row.pk}/change/"}
    for model, url in pages.items():
        page = web.get(url).content.decode()
        model_admin = admin.site._registry[model]
        texts = [str(f.help_text) for f in model._meta.get_fields()
                 if getattr(f, "help_text", "")]
        texts += [str(options.get("description", ""))
                  for _name, options in model_admin.get_fieldsets(web.get(url).wsgi_request)]
        for text in texts:
            if any(c in text for c in "<>&"):
                assert html.escape(text, quote=False) in page, (url, text)


def test_the_task_field_offers_the_registered_tasks(web: DjangoClient) -> None:
    page = web.get(f"{ADMIN}periodicschedule/add/").content.decode()
    field = re.search(r'<input[^>]*name="task"[^>]*>', page)
    assert field is not None
    listed = re.search(r'list="([^"]+)"', field[0])
    assert listed is not None
    options = re.search(rf'<datalist id="{listed[1]}">(.*?)</datalist>', page, re.S)
    assert options is not None
    names = re.findall(r'<option value="([^"]*)">', options[1])
    assert names == sorted(spec.name for spec in conf.registry)
    assert "testproject.shop.tasks.noop" in names


def test_an_unknown_task_is_refused_with_a_clear_error(web: DjangoClient) -> None:
    data = {"name": "typo", "task": "testproject.shop.tasks.nope", "cron": "", "every": "60",
            "timezone": "", "args": "[]", "kwargs": "{}", "queue": "", "priority": "",
            "missed": "run_once", "catch_up": "100", "enabled": "on", "description": "",
            "_save": "Save"}
    response = web.post(f"{ADMIN}periodicschedule/add/", data)
    assert response.status_code == 200  # the form again, with the error
    page = html.unescape(response.content.decode())
    assert ("Schedule 'typo': task 'testproject.shop.tasks.nope' is not a registered task"
            in page)
    assert not PeriodicSchedule.objects.filter(name="typo").exists()
