"""The task-history admin: filters, search, the detail page (timeline, live state),
retry and cancel (bulk through a confirmation page, per object as POST buttons),
their permissions, CSRF and escaping. Against a real Redis, rows created directly."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client as DjangoClient
from django.utils import timezone

from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.models import TaskRecord, TaskState

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/blitzq_django/taskrecord/"
XSS = "<script>alert(1)</script>"


@blitzq_task(name="tests.admin.add")
def add(x: int, y: int) -> int:
    return x + y


@blitzq_task(name="tests.admin.login")
def log_in(user: str, password: str) -> None: ...


def login(*perms: str, csrf: bool = False) -> DjangoClient:
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    for codename in ("view_taskrecord", *perms):
        user.user_permissions.add(Permission.objects.get(
            content_type__app_label="blitzq_django", codename=codename))
    browser = DjangoClient(enforce_csrf_checks=csrf)
    browser.force_login(user)
    return browser


def record(task_id: str, state: str = TaskState.SUCCEEDED, minutes_ago: int = 1,
           **fields: Any) -> TaskRecord:
    fields.setdefault("task_name", "tests.admin.add")
    fields.setdefault("queue", "default")
    return TaskRecord.objects.create(
        task_id=task_id, state=state,
        created_at=timezone.now() - dt.timedelta(minutes=minutes_ago), **fields)


def ids_in(html: str) -> set[str]:
    return set(re.findall(r">(r-\d+)</a>", html))


def test_filters_by_state_queue_task_and_date(blitzq_redis: Client) -> None:
    record("r-1", TaskState.SUCCEEDED)
    record("r-2", TaskState.FAILED, queue="emails")
    record("r-3", TaskState.FAILED, task_name="tests.admin.login")
    record("r-4", TaskState.SUCCEEDED, minutes_ago=3 * 24 * 60)
    browser = login()
    assert ids_in(browser.get(LIST).content.decode()) == {"r-1", "r-2", "r-3", "r-4"}
    assert ids_in(browser.get(LIST, {"state__exact": "failed"}).content.decode()) == {
        "r-2", "r-3"}
    assert ids_in(browser.get(LIST, {"queue__exact": "emails"}).content.decode()) == {"r-2"}
    assert ids_in(browser.get(LIST, {"task_name__exact": "tests.admin.login"}
                              ).content.decode()) == {"r-3"}
    since = {"created_at__gte": (timezone.now() - dt.timedelta(days=1)).isoformat()}
    assert "r-4" not in ids_in(browser.get(LIST, since).content.decode())


def test_search_by_id_idempotency_key_and_name(blitzq_redis: Client) -> None:
    record("r-1", idempotency_key="order-77")
    record("r-2", task_name="tests.admin.login")
    record("r-3")
    browser = login()
    assert ids_in(browser.get(LIST, {"q": "r-3"}).content.decode()) == {"r-3"}
    assert ids_in(browser.get(LIST, {"q": "order-77"}).content.decode()) == {"r-1"}
    assert ids_in(browser.get(LIST, {"q": "admin.log"}).content.decode()) == {"r-2"}
    assert ids_in(browser.get(LIST, {"q": "r-"}).content.decode()) == set()  # ids: exact


def test_detail_shows_call_outcome_timeline_and_live_state(blitzq_redis: Client) -> None:
    now = int(timezone.now().timestamp() * 1000)
    row = record("r-1", TaskState.FAILED, args=[2, 3], result=None, error_type="ValueError",
                 error_message=f"bad {XSS}", traceback=f"Traceback ...\n{XSS}",
                 timeline=[["enqueued", now - 900, 1, None, None, None],
                           ["started", now - 800, 1, "w-1", None, None],
                           ["failed", now - 500, 1, f"w-1{XSS}", 300, f"ValueError{XSS}"],
                           ["odd"]])
    html = login().get(f"{LIST}{row.pk}/change/").content.decode()
    assert "blitzq-timeline" in html
    for text in ("enqueued", "started", "300 ms", "w-1", "ValueError", "odd"):
        assert text in html, text
    assert XSS not in html and html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4
    assert "live state" in html and "nothing kept in Redis" in html


def message_of(task_id: str, args: list[Any]) -> bytes:
    """The encoded message the history keeps for Retry (TaskRecord.message)."""
    from blitzq_django.engine.core.message import Message, encode

    return encode(Message(id=task_id, task="tests.admin.add", queue="default", args=args))


def test_retry_confirms_then_enqueues_the_same_arguments(blitzq_redis: Client) -> None:
    row = record("r-1", TaskState.FAILED, args=[2, 3], message=message_of("r-1", [2, 3]))
    browser = login("retry_taskrecord")
    form = {"action": "retry_selected", "_selected_action": [str(row.pk)]}
    page = browser.post(LIST, form)
    assert page.status_code == 200 and "Are you sure you want to retry" in page.content.decode()
    assert blitzq_redis.queue_stats("default").ready == 0

    done = browser.post(LIST, {**form, "post": "yes"}, follow=True)
    assert "enqueued again as" in done.content.decode()
    new_id = re.search(r"enqueued again as (\w+)", done.content.decode())[1]  # type: ignore[index]
    assert new_id != "r-1"
    assert blitzq_redis.queue_stats("default").ready == 1
    from .conftest import running_worker

    with running_worker(blitzq_redis):
        assert blitzq_redis.get_result(new_id, timeout=15).result == 5


def test_retry_refuses_unknown_tasks_and_redacted_arguments(blitzq_redis: Client) -> None:
    gone = record("r-1", task_name="gone.task", args=[1])
    masked = record("r-2", task_name="tests.admin.login", args=["ann", "***"])
    browser = login("retry_taskrecord")
    html = browser.post(LIST, {"action": "retry_selected", "post": "yes",
                               "_selected_action": [str(gone.pk), str(masked.pk)]},
                        follow=True).content.decode()
    assert "is not registered" in html and "were redacted" in html
    assert blitzq_redis.queue_stats("default").ready == 0


def test_cancel_a_scheduled_task_from_its_page(blitzq_redis: Client) -> None:
    handle = add.options(delay=600).enqueue(1, 2)
    row = record(handle.id, TaskState.SCHEDULED, args=[1, 2])
    browser = login("cancel_taskrecord")
    html = browser.get(f"{LIST}{row.pk}/change/").content.decode()
    assert 'id="blitzq-cancel"' in html and 'id="blitzq-retry"' not in html
    assert ">scheduled<" in html  # the live state
    response = browser.post(f"{LIST}{row.pk}/cancel/", follow=True)
    assert response.redirect_chain[-1][0] == f"{LIST}{row.pk}/change/"
    html = response.content.decode()
    assert "cancelled (it was scheduled" in html
    assert blitzq_redis.inspect(handle.id).state == "cancelled"  # type: ignore[union-attr]
    assert blitzq_redis.queue_stats("default").scheduled == 0


def test_bulk_cancel_reports_each_outcome(blitzq_redis: Client) -> None:
    scheduled = record(add.options(delay=600).enqueue(1, 2).id, TaskState.SCHEDULED)
    done = record("r-9", TaskState.SUCCEEDED)
    browser = login("cancel_taskrecord")
    form = {"action": "cancel_selected", "_selected_action": [str(scheduled.pk), str(done.pk)]}
    assert "Are you sure you want to cancel 2 tasks" in browser.post(LIST, form).content.decode()
    html = browser.post(LIST, {**form, "post": "yes"}, follow=True).content.decode()
    assert "cancelled (it was scheduled" in html
    assert "Task r-9: not cancelled, it has already finished" in html


def test_without_permissions_no_buttons_no_actions_and_403(blitzq_redis: Client) -> None:
    row = record("r-1", TaskState.SCHEDULED, args=[1, 2])
    browser = login()
    html = browser.get(f"{LIST}{row.pk}/change/").content.decode()
    assert "blitzq-retry" not in html and "blitzq-cancel" not in html
    html = browser.get(LIST).content.decode()
    assert "retry_selected" not in html and "cancel_selected" not in html
    for action in ("retry", "cancel"):
        assert browser.post(f"{LIST}{row.pk}/{action}/").status_code == 403
        assert browser.get(f"{LIST}{row.pk}/{action}/").status_code == 403
        # A forged bulk action is dropped: Django offers only the permitted ones.
        browser.post(LIST, {"action": f"{action}_selected", "post": "yes",
                            "_selected_action": [str(row.pk)]})
    assert blitzq_redis.queue_stats("default").ready == 0


def test_retry_permission_is_not_cancel_permission(blitzq_redis: Client) -> None:
    row = record("r-1", TaskState.FAILED, args=[1, 2], message=message_of("r-1", [1, 2]))
    browser = login("retry_taskrecord")
    assert browser.post(f"{LIST}{row.pk}/cancel/").status_code == 403
    page = browser.get(f"{LIST}{row.pk}/retry/")  # a GET only asks for confirmation
    assert page.status_code == 200 and "Are you sure you want to retry" in page.content.decode()
    assert blitzq_redis.queue_stats("default").ready == 0
    assert browser.post(f"{LIST}{row.pk}/retry/").status_code == 302
    assert blitzq_redis.queue_stats("default").ready == 1


def test_object_buttons_need_the_csrf_token(blitzq_redis: Client) -> None:
    row = record("r-1", TaskState.FAILED, args=[1, 2], message=message_of("r-1", [1, 2]))
    browser = login("retry_taskrecord", csrf=True)
    assert browser.post(f"{LIST}{row.pk}/retry/").status_code == 403
    assert blitzq_redis.queue_stats("default").ready == 0
    html = browser.get(f"{LIST}{row.pk}/change/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)[1]  # type: ignore[index]
    assert browser.post(f"{LIST}{row.pk}/retry/", {"csrfmiddlewaretoken": token}
                        ).status_code == 302
    assert blitzq_redis.queue_stats("default").ready == 1


def test_no_view_permission_is_403_everywhere(blitzq_redis: Client) -> None:
    row = record("r-1")
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        codename__in=["retry_taskrecord", "cancel_taskrecord"]))
    browser = DjangoClient()
    browser.force_login(user)
    for url in (LIST, f"{LIST}{row.pk}/change/", f"{LIST}{row.pk}/retry/",
                f"{LIST}{row.pk}/cancel/"):
        assert browser.get(url).status_code == 403, url
    assert browser.post(f"{LIST}{row.pk}/retry/").status_code == 403
