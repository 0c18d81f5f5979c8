"""Every blitzq admin page keeps the admin's bar and its layout, on Django 5.2 and 6.x
(scripts/test.py runs the browser tests on both): the breadcrumbs are a styled bar
across the page under the header, each crumb inside it on one line, left to right (6.1
draws them as an ``<ol class="breadcrumbs">``, 5.2 as a ``<div>``: the pages must use
the markup of the Django they run on); the dead letters' filter panel stands beside the
list; tables are not collapsed; the task history shows every column, State first, at
1280 px; times to the second.

Screenshots of each page go to blitzq-screenshots/django-X.Y/ in the temp directory
(overwritten on each run), to be looked at for each version.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from blitzq_django.engine import Client
from blitzq_django.models import PeriodicSchedule, TaskRecord, TaskState
from tests.django.conftest import running_worker

from .conftest import screenshots_dir, skip_without_browser

skip_without_browser()

from playwright.sync_api import Page, expect  # noqa: E402 - after the skip check

from .test_admin_blitzq import (  # noqa: E402 - after the skip check
    EVERY_PERMISSION,
    blitzq,
    charge_with_gateway,
    dead_letter,
    log_in,
    make_staff,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["blitzq"]  # the fixture, shared with test_admin_blitzq

ADMIN = "/admin/blitzq_django/"
APP = "BlitzQ"
SHOTS = screenshots_dir(docs=False)

#: The bar's box, and each crumb's text box (found in the text nodes: 5.2 leaves the
#: last crumb and the separators as bare text).
CRUMB_BOXES = """(bar, crumbs) => {
  const box = (r) => ({x: r.left, y: r.top, right: r.right, bottom: r.bottom,
                       width: r.width, height: r.height});
  const texts = [];
  const walker = document.createTreeWalker(bar, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) { texts.push(n); }
  const found = [];
  let from = 0;
  for (const crumb of crumbs) {
    let hit = null;
    for (let i = from; i < texts.length && !hit; i++) {
      const at = texts[i].data.indexOf(crumb);
      if (at >= 0) {
        const range = document.createRange();
        range.setStart(texts[i], at);
        range.setEnd(texts[i], at + crumb.length);
        hit = box(range.getBoundingClientRect());
        from = i;
      }
    }
    found.push(hit);
  }
  const style = getComputedStyle(bar);
  return {bar: box(bar.getBoundingClientRect()), crumbs: found,
          background: style.backgroundColor, display: style.display,
          header: box(document.getElementById("header").getBoundingClientRect()),
          content: box(document.getElementById("content").getBoundingClientRect()),
          page: document.documentElement.clientWidth};
}"""


def check_bar(page: Page, *crumbs: str) -> None:
    """The breadcrumbs: one styled bar across the page, between the header and the
    content, holding ``crumbs`` on one line, left to right."""
    bar = page.locator(".breadcrumbs")
    expect(bar).to_have_count(1)
    expect(bar).to_be_visible()
    found = bar.evaluate(CRUMB_BOXES, list(crumbs))
    box = found["bar"]
    where = f"{page.url}: {found}"
    assert found["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), where
    assert box["width"] >= found["page"] - 2, where  # across the page
    assert 25 <= box["height"] <= 70, where
    assert box["y"] >= found["header"]["bottom"] - 1, where
    assert found["content"]["y"] >= box["bottom"] - 1, where
    previous = None
    for crumb, text in zip(crumbs, found["crumbs"], strict=True):
        assert text is not None, f"{crumb!r} not in the bar: {where}"
        assert box["y"] <= text["y"] and text["bottom"] <= box["bottom"], (crumb, where)
        assert text["x"] >= box["x"] + 10, (crumb, where)  # padded, not at the page's edge
        if previous is not None:
            assert text["x"] > previous["right"], (crumb, where)  # left to right
            assert abs(text["y"] - previous["y"]) < 4, (crumb, where)  # one line
        previous = text


def box_of(page: Page, selector: str) -> dict[str, float]:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, selector
    return found


def wide(page: Page, selector: str, at_least: float = 600) -> None:
    """Not collapsed: ``selector`` spans most of the content."""
    width = box_of(page, selector)["width"]
    assert width >= at_least, (page.url, selector, width)


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def make_history(now: dt.datetime) -> TaskRecord:
    ms = int(now.timestamp() * 1000)
    record = None
    for n, state in enumerate((TaskState.SUCCEEDED, TaskState.DEAD_LETTERED,
                               TaskState.SCHEDULED)):
        started = now - dt.timedelta(minutes=3, seconds=n) if n < 2 else None
        record = TaskRecord.objects.create(
            task_id=f"{n}a4c9e07d51b84f6ea2c0f3b9d8e71c5", task_name="shop.charge_with_gateway",
            queue="default", state=state, args=[f"ORD-{n}", 100], attempt=1 + n % 2,
            created_at=now - dt.timedelta(minutes=3, seconds=n + 7), started_at=started,
            finished_at=started + dt.timedelta(milliseconds=1250) if started else None,
            timeline=[["enqueued", ms - 9000, 1, "", None, ""]])
    assert record is not None
    return record


def test_every_page_keeps_the_bar_and_its_layout(page: Page, blitzq: Client) -> None:
    make_staff("operator", *EVERY_PERMISSION, "view_periodicschedule",
               "change_periodicschedule", "run_periodicschedule")
    with running_worker(blitzq, queues=("default", "emails")):
        # a reference of its own: the task fails on the first run of each reference
        task_id = dead_letter(blitzq, charge_with_gateway, "ORD-LAYOUT-1", 4999)
    now = timezone.now()
    scheduled = make_history(now)
    schedule = PeriodicSchedule.objects.create(name="nightly-report", task="shop.send_reminder",
                                               cron="0 3 * * *", args=["ops@example.com"])
    log_in(page, "operator")

    page.goto(f"{ADMIN}deadletter/")
    check_bar(page, "Home", APP, "Dead letters")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    table, panel = box_of(page, "#result_list"), box_of(page, "#changelist-filter")
    assert panel["x"] >= table["x"] + table["width"] - 1, (table, panel)  # beside, not below
    assert panel["y"] < table["y"] + table["height"], (table, panel)
    wide(page, "#result_list", 450)
    expect(page.locator("#blitzq-replay-selected")).to_be_visible()
    shot(page, "dead-letters")

    page.get_by_role("link", name=task_id).click()
    page.wait_for_url("**/inspect/?**")
    check_bar(page, "Home", APP, "Dead letters", task_id)
    expect(page.locator("#blitzq-replay")).to_be_visible()
    expect(page.locator("#blitzq-purge")).to_be_visible()
    assert box_of(page, "#blitzq-replay")["y"] < box_of(page, "#blitzq-letter")["y"]
    wide(page, "#blitzq-letter")
    shot(page, "dead-letter")

    page.goto(f"{ADMIN}deadletter/")
    page.click("#blitzq-replay-all")
    page.wait_for_url("**/deadletter/replay/?**")
    check_bar(page, "Home", APP, "Dead letters", "Replay")
    expect(page.locator("#blitzq-confirm")).to_be_visible()
    shot(page, "dead-letters-confirm")

    page.goto(f"{ADMIN}queueoverview/")
    check_bar(page, "Home", APP, "Queues")
    expect(page.locator("#blitzq-dashboard-link")).to_be_visible()
    expect(page.locator("#blitzq-queues tr[data-queue=default]")).to_be_visible()
    wide(page, "#blitzq-queues")
    wide(page, "#blitzq-workers")
    shot(page, "queues")

    page.click("#blitzq-dashboard-link")
    page.wait_for_url("**/queueoverview/dashboard/")
    check_bar(page, "Home", APP, "Queues", "Dashboard")
    expect(page.locator("#bq-queues tr[data-queue=default]")).to_be_visible()
    for part in ("#bq-dashboard .bq-status-bar", "#bq-chart", "#bq-queues", "#bq-workers"):
        wide(page, part)
    shot(page, "dashboard")

    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{ADMIN}taskrecord/")
    check_bar(page, "Home", APP, "Task records")
    expect(page.locator("#result_list tbody tr")).to_have_count(3)
    heads = [h.strip().upper() for h in
             page.locator("#result_list thead th").all_inner_texts()]
    assert heads[1:] == ["TASK ID", "STATE", "TASK", "ENQUEUED", "DURATION", "ATTEMPT",
                         "QUEUE"], heads
    # At 1280 px, the side bar and the filter panel open: id, state, task and enqueued
    # time show without scrolling sideways; with the side bar closed, every column.
    visible = page.locator("#changelist .results").bounding_box()
    assert visible is not None
    for column in ("task_id", "state", "task_name", "enqueued_display"):
        cell = box_of(page, f"#result_list thead th.column-{column}")
        assert cell["x"] + cell["width"] <= visible["x"] + visible["width"] + 1, (column, cell)
    shot(page, "task-history")
    page.click("#toggle-nav-sidebar")
    sizes = page.locator("#changelist .results").evaluate(
        "e => [e.scrollWidth, e.clientWidth]")
    assert sizes[0] <= sizes[1], sizes
    page.click("#toggle-nav-sidebar")
    first = page.locator("#result_list tbody tr", has_text="0a4c9e07d51b84f6ea2c0f3b9d8e71c5")
    enqueued = timezone.localtime(now - dt.timedelta(minutes=3, seconds=7))
    expect(first.locator("td.field-enqueued_display")).to_contain_text(
        enqueued.strftime("%Y-%m-%d %H:%M:%S"))
    expect(first.locator("td.field-duration_display")).to_have_text("1.2 s")

    page.goto(f"{ADMIN}taskrecord/{scheduled.pk}/retry/")
    check_bar(page, "Home", APP, "Task records", "Retry tasks")
    expect(page.locator("#blitzq-confirm")).to_be_visible()
    shot(page, "task-retry-confirm")

    page.goto(f"{ADMIN}periodicschedule/")
    check_bar(page, "Home", APP, "Periodic schedules")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    shot(page, "schedules")

    page.goto(f"{ADMIN}periodicschedule/{schedule.pk}/run/")
    check_bar(page, "Home", APP, "Periodic schedules", "Run now")
    expect(page.locator("#blitzq-confirm")).to_be_visible()
    shot(page, "schedule-run-confirm")


def test_the_dark_theme_keeps_the_bar(page: Page, blitzq: Client, settings: Any) -> None:
    make_staff("operator", *EVERY_PERMISSION)
    log_in(page, "operator")
    page.emulate_media(color_scheme="dark")
    page.goto(f"{ADMIN}queueoverview/dashboard/")
    check_bar(page, "Home", APP, "Queues", "Dashboard")
    expect(page.locator("#bq-queues tr[data-queue=default]")).to_be_visible()
    shot(page, "dashboard-dark")
