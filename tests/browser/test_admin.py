"""The TaskRecord admin in a real browser: login, list, filter, detail, escaping, permissions."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client as DjangoClient
from django.utils import timezone

from blitzq_django.models import TaskRecord, TaskState

from .conftest import skip_without_browser

skip_without_browser()

from playwright.sync_api import Page  # noqa: E402 - only once the skip check has passed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
CHANGELIST = "/admin/blitzq_django/taskrecord/"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def make_user(username: str, *, staff: bool, can_view: bool) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=staff)
    if can_view:
        user.user_permissions.add(Permission.objects.get(
            content_type__app_label="blitzq_django", codename="view_taskrecord"))
    return user


def make_record(task_id: str, state: str, minutes_ago: int, **fields: Any) -> TaskRecord:
    created = timezone.now() - dt.timedelta(minutes=minutes_ago)
    fields.setdefault("task_name", "shop.tasks.send_receipt")
    return TaskRecord.objects.create(task_id=task_id, queue="default", state=state,
                                     created_at=created, **fields)


def log_in(page: Page, username: str) -> None:
    """Through the real login form, as a person would."""
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_load_state()


def body_text(page: Page) -> str:
    return page.inner_text("body")


def test_staff_with_view_permission_lists_filters_and_opens_records(
        page: Page, tmp_path: Path) -> None:
    make_user("viewer", staff=True, can_view=True)
    make_record("ok-0001", TaskState.SUCCEEDED, 2, args=[1, 2], result=3)
    failed = make_record("bad-0002", TaskState.FAILED, 1, args=["order-42"],
                         error_type="ValueError", error_message="card declined: code 51",
                         traceback="Traceback (most recent call last):\nValueError")

    log_in(page, "viewer")
    assert page.url.endswith("/admin/"), page.url
    page.click(f"a[href='{CHANGELIST}']")
    page.wait_for_url(f"**{CHANGELIST}")
    rows = page.locator("#result_list tbody tr")
    # Every row of the table is listed (one CI run found a third, unexplained row in
    # this first test of the session: compare with the table, and say what it was).
    assert rows.count() == TaskRecord.objects.count(), list(TaskRecord.objects.values())
    assert "ok-0001" in body_text(page) and "bad-0002" in body_text(page)

    page.locator("#changelist-filter details[data-filter-title='state'] a",
                 has_text="failed").first.click()
    page.wait_for_url("**state__exact=failed**")
    assert rows.count() == TaskRecord.objects.filter(state=TaskState.FAILED).count()
    assert "bad-0002" in rows.first.inner_text()
    assert "ok-0001" not in body_text(page)

    rows.first.locator("a", has_text="bad-0002").click()
    page.wait_for_url(f"**{CHANGELIST}{failed.pk}/change/**")
    text = body_text(page)
    assert "card declined: code 51" in text
    assert "ValueError" in text
    assert "order-42" in text
    # Read-only: no save buttons for a view-only user.
    assert page.locator("input[name=_save]").count() == 0

    shot = tmp_path / "taskrecord-detail.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 0


def test_task_args_and_errors_are_shown_as_text(page: Page) -> None:
    make_user("viewer", staff=True, can_view=True)
    # The payload everywhere a worker writes user-controlled text.
    record = make_record("xss-0001", TaskState.FAILED, 1, task_name=f"evil {XSS}",
                         args=[XSS], kwargs={"note": XSS}, result={"html": XSS},
                         error_type=f"Evil{XSS}", error_message=XSS, traceback=XSS,
                         worker=XSS)

    log_in(page, "viewer")
    page.goto(CHANGELIST)
    # The changelist shows task_name in a column and in the task_name filter.
    assert page.locator("#result_list tbody tr").count() == 1
    assert page.evaluate("window.__xss") is None
    assert "<script>" in body_text(page)

    page.goto(f"{CHANGELIST}{record.pk}/change/")
    assert page.evaluate("window.__xss") is None
    assert page.locator("img[src=x]").count() == 0
    text = body_text(page)
    assert "<script>window.__xss=1</script>" in text
    assert text.count("<script>") >= 6  # task, args, kwargs, result, error, traceback...


def test_staff_without_view_permission_is_refused(page: Page) -> None:
    make_user("nosy", staff=True, can_view=False)
    make_record("ok-0001", TaskState.SUCCEEDED, 1)

    log_in(page, "nosy")
    assert page.url.endswith("/admin/"), page.url
    assert page.locator(f"a[href='{CHANGELIST}']").count() == 0
    assert "Task records" not in body_text(page)

    response = page.goto(CHANGELIST)
    assert response is not None and response.status == 403
    response = page.goto(f"{CHANGELIST}{TaskRecord.objects.get().pk}/change/")
    assert response is not None and response.status == 403


def test_non_staff_user_is_sent_to_the_login_page(page: Page, live_server: Any) -> None:
    user = make_user("customer", staff=False, can_view=True)
    make_record("ok-0001", TaskState.SUCCEEDED, 1)

    # The login form refuses non-staff accounts outright...
    log_in(page, "customer")
    assert "/admin/login/" in page.url
    assert "staff account" in body_text(page)

    # ...and a session of theirs (logged in elsewhere on the site) is redirected.
    session = DjangoClient()
    session.force_login(user)
    cookie = session.cookies["sessionid"]
    page.context.add_cookies([{"name": "sessionid", "value": cookie.value,
                               "url": live_server.url}])
    response = page.goto(CHANGELIST)
    assert response is not None and response.status == 200
    assert "/admin/login/" in page.url and "next=" in page.url, page.url
    assert page.locator("#result_list").count() == 0
    assert "ok-0001" not in body_text(page)
