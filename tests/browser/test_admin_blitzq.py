"""The blitzq admin pages in headless Chromium, against pytest-django's live server, a
real Redis and a real worker (a thread of this process):

- staff with every blitzq permission finds a dead-lettered task, replays it, and sees it
  succeed;
- cancels a scheduled task from its history page;
- staff without the replay permission sees no replay button and gets 403 on the URL.

The screenshots in docs/img/admin-*.png are taken here (overwritten on each run).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from blitzq_django import conf
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.models import TaskRecord, TaskState
from tests.django.conftest import running_worker
from tests.support.waiting import wait_until

from .conftest import screenshots_dir, skip_without_browser

skip_without_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402 - after the skip check

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
IMG = screenshots_dir()
DEAD = "/admin/blitzq_django/deadletter/"
HISTORY = "/admin/blitzq_django/taskrecord/"
QUEUES = "/admin/blitzq_django/queueoverview/"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
EVERY_PERMISSION = ("view_taskrecord", "retry_taskrecord", "cancel_taskrecord",
                    "view_deadletter", "replay_deadletter", "purge_deadletter",
                    "view_queueoverview")

_runs: dict[str, int] = {}
_runs_lock = threading.Lock()


@blitzq_task(name="shop.charge_with_gateway")
def charge_with_gateway(reference: str, amount_cents: int) -> str:
    """Fails on its first run (the gateway is down), succeeds on every later one."""
    with _runs_lock:
        _runs[reference] = run = _runs.get(reference, 0) + 1
    if run == 1:
        raise ConnectionError(f"payment gateway unreachable while charging {reference}")
    return f"charged {amount_cents} cents for {reference}"


@blitzq_task(name="shop.send_reminder")
def send_reminder(email: str, note: str = "") -> None:
    """Scheduled for later: the tests cancel it before it is due."""


@pytest.fixture
def blitzq(settings: Any, redis_url: str, namespace: str) -> Iterator[Client]:
    """settings.BLITZQ on the test Redis, a fresh namespace; the live server shares it."""
    conf.reset()
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace,
                       "QUEUES": ["default", "emails"]}
    client = conf.get_client()
    yield client
    conf.reset()


def make_staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="blitzq_django", codename__in=codenames))
    return user


def log_in(page: Page, username: str) -> None:
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


def shot(page: Page, name: str) -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMG / f"admin-{name}.png"), full_page=True)


def dead_letter(client: Client, task: Any, *args: Any, queue: str = "default") -> str:
    """Enqueue a call that fails and wait (a worker running) until it is a dead letter."""
    handle = task.options(queue=queue).enqueue(*args)
    wait_until(lambda: client.dead_letters.get(handle.id, queue) is not None, timeout=20,
               message="the dead letter")
    return handle.id


def test_replay_a_dead_lettered_task_and_see_it_succeed(page: Page, blitzq: Client) -> None:
    make_staff("operator", *EVERY_PERMISSION)
    with running_worker(blitzq, queues=("default", "emails")):
        task_id = dead_letter(blitzq, charge_with_gateway, "ORD-1042", 4999)
        dead_letter(blitzq, charge_with_gateway, "ORD-1043", 1250)
        send_reminder.options(queue="emails", delay=3600).enqueue("bob@example.com")

        log_in(page, "operator")
        page.get_by_role("link", name="Dead letters").first.click()
        page.wait_for_url(f"**{DEAD}")
        row = page.locator("#result_list tbody tr", has_text=task_id)
        expect(row).to_contain_text("shop.charge_with_gateway")
        expect(row).to_contain_text("retries exhausted")
        expect(row).to_contain_text("ConnectionError")
        title = row.locator(".blitzq-error").get_attribute("title") or ""
        assert "gateway unreachable" in title
        expect(page.locator("#result_list tbody tr")).to_have_count(2)
        shot(page, "dead-letters")

        # "Replay all matching" asks first; going back changes nothing.
        page.click("#blitzq-replay-all")
        expect(page.locator("#blitzq-question")).to_contain_text("all 2 dead letters")
        shot(page, "dead-letters-confirm")
        page.get_by_role("link", name="No, take me back").click()
        page.wait_for_url(f"**{DEAD}")
        assert blitzq.dead_letters.count("default") == 2

        row.get_by_role("link", name=task_id).click()
        page.wait_for_url("**/inspect/?**")
        expect(page.locator("#blitzq-letter")).to_contain_text("ORD-1042")
        expect(page.locator("#blitzq-letter")).to_contain_text("payment gateway unreachable")
        shot(page, "dead-letter")

        page.click("#blitzq-replay")
        expect(page.locator(".messagelist")).to_contain_text("Replayed 1 dead letter")

        def succeeded() -> bool:
            page.reload()
            state = page.locator("#blitzq-live-state")
            return state.count() == 1 and state.inner_text() == "succeeded"

        wait_until(succeeded, timeout=20, interval=0.2, message="the replayed task's success")
        expect(page.locator("#blitzq-live")).to_contain_text("charged 4999 cents for ORD-1042")
        shot(page, "dead-letter-replayed")
        assert blitzq.get_result(task_id).result == "charged 4999 cents for ORD-1042"
        assert blitzq.dead_letters.count("default") == 1

        page.goto(QUEUES)
        expect(page.locator("#blitzq-workers tbody tr")).to_have_count(1)
        expect(page.locator("#blitzq-queues tr[data-queue=emails]")).to_contain_text("1")
        shot(page, "queues")


def test_cancel_a_scheduled_task_from_its_page(page: Page, blitzq: Client) -> None:
    make_staff("operator", *EVERY_PERMISSION)
    handle = send_reminder.options(delay=3600).enqueue("ann@example.com", note="renewal")
    now = timezone.now()
    ms = int(now.timestamp() * 1000)
    record = TaskRecord.objects.create(
        task_id=handle.id, task_name="shop.send_reminder", queue="default",
        state=TaskState.SCHEDULED, args=["ann@example.com"], kwargs={"note": "renewal"},
        created_at=now, timeline=[["enqueued", ms, 1, "", None, ""],
                                  ["scheduled", ms, 1, "", None, ""]])
    ok = [["enqueued", ms - 9000, 1, "", None, ""],
          ["started", ms - 8900, 1, "worker-1", None, ""]]
    failed = ["failed", ms - 7900, 1, "worker-1", 1000, "ConnectionError"]
    history = [  # (id, state, attempt, timeline)
        ("07c1e0b2a9d84f6e3", TaskState.SUCCEEDED, 1,
         [*ok, ["succeeded", ms - 8850, 1, "worker-1", 50, ""]]),
        ("17c1e0b2a9d84f6e3", TaskState.SUCCEEDED, 2,
         [*ok, failed, ["retried", ms - 7900, 1, "worker-1", None, "ConnectionError"],
          ["started", ms - 6900, 2, "worker-2", None, ""],
          ["succeeded", ms - 6780, 2, "worker-2", 120, ""]]),
        ("27c1e0b2a9d84f6e3", TaskState.DEAD_LETTERED, 1,
         [*ok, failed, ["dead_lettered", ms - 7900, 1, "worker-1", None, "ConnectionError"]]),
    ]
    for n, (task_id, state, attempt, timeline) in enumerate(history):
        final = state != TaskState.SUCCEEDED
        TaskRecord.objects.create(
            task_id=task_id, task_name="shop.charge_with_gateway", queue="default",
            state=state, args=[f"ORD-10{n}", 100 * (n + 1)], attempt=attempt,
            created_at=now - dt.timedelta(minutes=5 + n), timeline=timeline,
            started_at=now - dt.timedelta(minutes=5 + n), finished_at=now,
            worker=timeline[-1][3],
            result=None if final else f"charged {100 * (n + 1)} cents for ORD-10{n}",
            error_type="ConnectionError" if final else "",
            error_message="payment gateway unreachable" if final else "",
            traceback="Traceback (most recent call last):\n  ...\nConnectionError: payment "
                      "gateway unreachable" if final else "")

    log_in(page, "operator")
    page.goto(HISTORY)
    expect(page.locator("#result_list tbody tr")).to_have_count(4)
    shot(page, "task-history")
    page.get_by_role("link", name=handle.id).click()
    page.wait_for_url(f"**{HISTORY}{record.pk}/change/")
    expect(page.locator("#blitzq-live")).to_contain_text("scheduled")
    expect(page.locator(".blitzq-timeline")).to_contain_text("scheduled")
    expect(page.locator("#blitzq-live-due")).to_contain_text("(in ")  # its due time
    expect(page.locator("#blitzq-retry")).to_have_count(0)  # it runs anyway: no Retry
    expect(page.locator("#blitzq-no-retry")).to_contain_text("scheduled")
    shot(page, "task-scheduled")

    page.click("#blitzq-cancel")
    expect(page.locator(".messagelist")).to_contain_text("cancelled (it was scheduled")
    expect(page.locator("#blitzq-live")).to_contain_text("cancelled")
    expect(page.locator("#blitzq-cancel")).to_have_count(0)  # nothing left to cancel
    shot(page, "task-cancelled")
    assert blitzq.inspect(handle.id).state == "cancelled"  # type: ignore[union-attr]
    assert blitzq.queue_stats("default").scheduled == 0

    page.goto(HISTORY)
    page.get_by_role("link", name="17c1e0b2a9d84f6e3").click()  # the retried one
    expect(page.locator(".blitzq-timeline tbody tr")).to_have_count(6)
    shot(page, "task-detail")


def test_staff_without_replay_permission_sees_no_button_and_gets_403(
        page: Page, blitzq: Client) -> None:
    make_staff("auditor", "view_deadletter", "view_taskrecord")
    with running_worker(blitzq):
        task_id = dead_letter(blitzq, charge_with_gateway, "ORD-7", 700)

    log_in(page, "auditor")
    page.goto(DEAD)
    expect(page.locator("#result_list")).to_contain_text(task_id)
    for button in ("#blitzq-replay-selected", "#blitzq-replay-all", "#blitzq-purge-selected",
                   "#blitzq-purge-all", "input[name=ids]"):
        expect(page.locator(button)).to_have_count(0)
    page.get_by_role("link", name=task_id).click()
    page.wait_for_url("**/inspect/?**")
    expect(page.locator("#blitzq-letter")).to_contain_text("ORD-7")
    expect(page.locator("#blitzq-replay")).to_have_count(0)
    expect(page.locator("#blitzq-purge")).to_have_count(0)

    for url in (f"{DEAD}replay/?all=1", f"{DEAD}replay/?ids=default:{task_id}",
                f"{DEAD}purge/?all=1", QUEUES):
        response = page.goto(url)
        assert response is not None and response.status == 403, url
    assert blitzq.dead_letters.count("default") == 1


def test_task_data_is_shown_as_text(page: Page, blitzq: Client) -> None:
    make_staff("operator", *EVERY_PERMISSION)
    with running_worker(blitzq):
        task_id = dead_letter(blitzq, charge_with_gateway, XSS, 1)
    log_in(page, "operator")
    page.goto(DEAD)
    error = page.locator("#result_list .blitzq-error")
    expect(error).to_have_text("ConnectionError")
    assert "<script>window.__xss=1</script>" in (error.get_attribute("title") or "")
    assert page.evaluate("window.__xss") is None
    page.goto(f"{DEAD}inspect/?queue=default&id={task_id}")
    expect(page.locator("#blitzq-letter")).to_contain_text("<script>window.__xss=1</script>")
    assert page.evaluate("window.__xss") is None and page.locator("img[src=x]").count() == 0


def test_dark_theme(browser: Browser, live_server: Any, blitzq: Client) -> None:
    make_staff("operator", *EVERY_PERMISSION)
    with running_worker(blitzq):
        dead_letter(blitzq, charge_with_gateway, "ORD-9", 900)
    context = browser.new_context(base_url=live_server.url, color_scheme="dark")
    context.set_default_timeout(10_000)
    try:
        page = context.new_page()
        log_in(page, "operator")
        page.goto(DEAD)
        expect(page.locator("#result_list")).to_contain_text("shop.charge_with_gateway")
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background != "rgb(255, 255, 255)", background
        shot(page, "dead-letters-dark")
    finally:
        context.close()
