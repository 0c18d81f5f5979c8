"""Live state without TRACK_STATE, in headless Chromium (issue 19, items 5 and 9): a task
that is running shows as running on its history page, with its worker and its progress
bar, and in the dashboard's "Running now" list; a scheduled task's page shows when it is
due and offers no Retry. Screenshots: docs/img/admin-task-running.png and
docs/img/dashboard-running.png."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from blitzq_django import conf
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client, current_task
from blitzq_django.models import TaskRecord, TaskState
from tests.django.conftest import running_worker
from tests.support.waiting import wait_until

from .conftest import skip_without_browser

skip_without_browser()

from playwright.sync_api import Page, expect  # noqa: E402 - after the skip check

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
HISTORY = "/admin/blitzq_django/taskrecord/"
DASHBOARD = "/admin/blitzq_django/queueoverview/dashboard/"
GATE = threading.Event()


@blitzq_task(name="shop.export_catalogue")
def export_catalogue(rows: int) -> int:
    """Reports 4 of ``rows`` rows, then waits for the test to let it finish."""
    current_task().progress(4, rows, note=f"row 4 of {rows}")
    GATE.wait(30)
    return rows


@blitzq_task(name="shop.remind_later")
def remind_later(email: str) -> None:
    """Scheduled for later: never due within the test."""


@pytest.fixture
def blitzq(settings: Any, redis_url: str, namespace: str) -> Iterator[Client]:
    """settings.BLITZQ on the test Redis, TRACK_STATE at its default (off)."""
    conf.reset()
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "QUEUES": ["default"]}
    client = conf.get_client()
    assert client.track_state is False
    yield client
    GATE.set()
    conf.reset()


def log_in(page: Page, *codenames: str) -> None:
    user = User.objects.create_user("operator", password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="blitzq_django", codename__in=codenames))
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


def history_row(task_id: str, task: str, state: str, args: list[Any]) -> TaskRecord:
    return TaskRecord.objects.create(task_id=task_id, task_name=task, queue="default",
                                     state=state, args=args, created_at=timezone.now())


def test_a_running_task_on_its_page_and_in_the_dashboard(page: Page, blitzq: Client) -> None:
    log_in(page, "view_taskrecord", "view_queueoverview")
    GATE.clear()
    handle = export_catalogue.enqueue(10)
    # The history writer is not running here: its row still says queued.
    row = history_row(handle.id, "shop.export_catalogue", TaskState.QUEUED, [10])
    with running_worker(blitzq) as worker:
        wait_until(lambda: (r := blitzq.inspect(handle.id)) is not None
                   and r.state == "running" and blitzq.progress(handle.id) is not None, 15,
                   message="the task to be listed as running, with its progress")

        page.goto(f"{HISTORY}{row.pk}/change/")
        live = page.locator("#blitzq-live")
        expect(live.locator(".blitzq-state")).to_have_text("running")
        expect(page.locator("#blitzq-live-worker")).to_contain_text(worker.name)
        bar = page.locator("#blitzq-live-progress progress")
        expect(bar).to_have_attribute("value", "0.400000")
        expect(page.locator("#blitzq-live-progress")).to_contain_text("4 of 10 (40 %)")
        expect(page.locator("#blitzq-live-progress")).to_contain_text("row 4 of 10")
        expect(live).not_to_contain_text("nothing kept in Redis")
        IMG.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMG / "admin-task-running.png"), full_page=True)

        page.goto(DASHBOARD)  # the live server is WSGI: the page polls its data
        listed = page.locator(f"#bq-running tr[data-id='{handle.id}']")
        expect(listed).to_be_visible(timeout=15_000)
        expect(listed.locator(".bq-task")).to_have_text("shop.export_catalogue")
        expect(listed.locator(".bq-worker")).to_have_text(worker.name)
        expect(listed.locator(".bq-queue")).to_have_text("default")
        expect(listed.locator(".bq-progress")).to_contain_text("40 %")
        expect(listed.locator(".bq-progress")).to_contain_text("row 4 of 10")
        expect(listed.locator(".bq-since")).to_have_text(re.compile(r"^\d+ s$"))
        expect(listed.locator(".bq-task-id a")).to_have_attribute(
            "href", f"{HISTORY}?q={handle.id}")
        page.screenshot(path=str(IMG / "dashboard-running.png"), full_page=True)

        GATE.set()
        expect(page.locator("#bq-running tbody tr")).to_have_text("Nothing running.",
                                                                  timeout=15_000)
    page.goto(f"{HISTORY}{row.pk}/change/")
    expect(page.locator("#blitzq-live .blitzq-state")).to_have_text("succeeded")
    expect(page.locator("#blitzq-live-progress")).to_contain_text("4 of 10")


def test_a_scheduled_tasks_page_shows_when_it_is_due_and_no_retry(page: Page,
                                                                 blitzq: Client) -> None:
    log_in(page, "view_taskrecord", "retry_taskrecord", "cancel_taskrecord")
    handle = remind_later.options(delay=600).enqueue("ann@example.com")
    row = history_row(handle.id, "shop.remind_later", TaskState.SCHEDULED,
                      ["ann@example.com"])
    page.goto(f"{HISTORY}{row.pk}/change/")
    expect(page.locator("#blitzq-live .blitzq-state")).to_have_text("scheduled")
    expect(page.locator("#blitzq-live-due")).to_contain_text("(in 10 min)")
    expect(page.locator("#blitzq-retry")).to_have_count(0)
    expect(page.locator("#blitzq-cancel")).to_be_visible()
