"""The task page's "Now, in Redis" block with TRACK_STATE at its default (off): a running
task shows as running, with its worker and its progress bar; a scheduled one shows when
it is due and offers no Retry; a record that is gone says why (issue 19, items 5 and 9).
Against a real Redis and a real worker (on a thread), history rows created directly."""

from __future__ import annotations

import datetime as dt
import re
import threading

import pytest
from django.test import Client as DjangoClient
from django.utils import timezone

from blitzq_django import conf
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client, current_task
from blitzq_django.models import TaskState

from ..support.waiting import wait_until
from .conftest import running_worker
from .test_admin_history import LIST, XSS, add, login, record

pytestmark = pytest.mark.django_db(transaction=True)

GATE = threading.Event()


@blitzq_task(name="tests.live.export")
def export(rows: int) -> int:
    task = current_task()
    task.progress(3, rows, note=f"row 3 {XSS}")
    GATE.wait(20)
    return rows


@blitzq_task(name="tests.live.fire", store_result=False)
def fire() -> int:
    return 1


def page(browser: DjangoClient, row_pk: int) -> str:
    return browser.get(f"{LIST}{row_pk}/change/").content.decode()


def live_block(html: str) -> str:
    found = re.search(r'<fieldset class="module aligned" id="blitzq-live">(.*?)</fieldset>',
                      html, re.S)
    assert found, "the live state block"
    return found[1]


def test_a_running_task_shows_running_with_its_worker_and_progress(
        blitzq_redis: Client) -> None:
    assert conf.get_settings()["TRACK_STATE"] is False
    GATE.clear()
    handle = export.enqueue(10)
    row = record(handle.id, TaskState.QUEUED, task_name="tests.live.export", args=[10])
    browser = login()
    try:
        with running_worker(blitzq_redis) as worker:
            wait_until(lambda: (r := blitzq_redis.inspect(handle.id)) is not None
                       and r.state == "running" and blitzq_redis.progress(handle.id), 10,
                       message="the task to be listed as running, with its progress")
            html = live_block(page(browser, row.pk))
            assert 'class="blitzq-state blitzq-state-running">running<' in html
            assert worker.name in html and "since" in html
            assert re.search(r'<progress [^>]*max="1" value="0\.3', html)
            assert "3 of 10 (30 %)" in html and "row 3" in html
            assert XSS not in html and "&lt;script&gt;" in html  # the note is escaped
            assert "nothing kept in Redis" not in html
            GATE.set()
            blitzq_redis.get_result(handle.id, timeout=10)
    finally:
        GATE.set()
    html = live_block(page(browser, row.pk))
    assert ">succeeded<" in html and "last progress" in html


def test_a_scheduled_task_shows_when_it_is_due_and_offers_no_retry(
        blitzq_redis: Client) -> None:
    handle = add.options(delay=600).enqueue(1, 2)
    row = record(handle.id, TaskState.SCHEDULED, args=[1, 2])
    browser = login("retry_taskrecord", "cancel_taskrecord")
    html = page(browser, row.pk)
    live = live_block(html)
    assert ">scheduled<" in live and 'id="blitzq-live-due"' in live
    assert re.search(r"\(in (9|10) min\)", live), live
    due = blitzq_redis.inspect(handle.id).due_ms  # type: ignore[union-attr]
    shown = dt.datetime.fromtimestamp(due / 1000, tz=dt.UTC).astimezone(
        timezone.get_current_timezone()).strftime("%Y-%m-%d %H:%M:%S")
    assert shown in live
    assert 'id="blitzq-retry"' not in html and 'id="blitzq-cancel"' in html
    # A finished task whose message the history kept: the permission offers Retry there.
    message = blitzq_redis.build(add.spec, (1, 2), {}).payload
    finished = record("r-done", TaskState.SUCCEEDED, args=[1, 2], message=message)
    assert 'id="blitzq-retry"' in page(browser, finished.pk)


def test_a_record_that_is_gone_says_why(blitzq_redis: Client) -> None:
    long_ago = timezone.now() - dt.timedelta(days=3)
    expired = record("r-expired", TaskState.FAILED, finished_at=long_ago)
    browser = login()
    html = live_block(page(browser, expired.pk))
    when = (long_ago + dt.timedelta(days=1)).astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")
    assert f"its record expired at {when}" in html
    assert "(records are kept 86400 s after the task ends)" in html

    handle = fire.enqueue()
    with running_worker(blitzq_redis):
        wait_until(lambda: blitzq_redis.queue_stats().ready == 0
                   and blitzq_redis.queue_stats().in_flight == 0, 10, message="it to run")
    never = record(handle.id, TaskState.SUCCEEDED, task_name="tests.live.fire",
                   finished_at=timezone.now())
    html = live_block(page(browser, never.pk))
    assert "no record of that is kept" in html and "STORE_RESULTS off" in html

    finished = timezone.now()
    evicted = record("r-evicted", TaskState.SUCCEEDED, finished_at=finished)
    until = (finished + dt.timedelta(days=1)).astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")
    assert f"should be kept until {until}" in live_block(page(browser, evicted.pk))

    waiting = add.enqueue(1, 2)
    queued = record(waiting.id, TaskState.QUEUED, args=[1, 2])
    html = live_block(page(browser, queued.pk))
    assert "It is in queue &#x27;default&#x27;: waiting" in html
    assert "without TRACK_STATE" in html
