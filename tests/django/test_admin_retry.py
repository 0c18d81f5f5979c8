"""Retry in the task history admin re-sends the arguments of the original message exactly
(bytes, datetimes, Decimals, UUIDs, int keys: what the JSON copy on the page loses), or is
not offered, saying why: a message over 8 KiB, arguments BLITZQ["REDACT"] masks, a task
that has not finished (scheduled, queued, running). History Retry and dead-letter Replay
say how they differ and link to each other. Real Redis, a real worker and writer."""

from __future__ import annotations

import datetime as dt
import decimal
import re
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client as DjangoClient

from blitzq_django import conf, history
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.history.writer import wait_caught_up
from blitzq_django.models import TaskRecord

from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/blitzq_django/taskrecord/"
ODD_ARGS = (b"\x00\xffraw", dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC),
            decimal.Decimal("1.10"), uuid.UUID(int=5), {1: "one", 2: [b"x", None]})
ODD_KWARGS = {"when": dt.date(2026, 1, 2), "nested": {"k": [1.5, -0.0]}}


@blitzq_task(name="tests.retry.echo")
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@blitzq_task(name="tests.retry.sign_in", retries=0)
def sign_in(user: str, password: str) -> None:
    raise PermissionError("no")


@blitzq_task(name="tests.retry.fails", retries=0)
def fails(blob: bytes) -> None:
    raise ValueError("always")


def staff(*codenames: str) -> DjangoClient:
    user = User.objects.create_user(f"staff{User.objects.count()}", password="pw",
                                    is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="blitzq_django",
        codename__in=("view_taskrecord", "retry_taskrecord", *codenames)))
    browser = DjangoClient()
    browser.force_login(user)
    return browser


def write_history() -> None:
    writer = history.writer_for(conf.get_settings(), ["default"])
    assert writer is not None and wait_caught_up(writer, 30)


def test_retry_resends_the_exact_arguments_of_the_message(blitzq_redis: Client) -> None:
    first = echo.enqueue(*ODD_ARGS, **ODD_KWARGS)
    with running_worker(blitzq_redis):
        original = first.result(timeout=20)
    write_history()
    row = TaskRecord.objects.get(task_id=first.id)
    assert row.state == "succeeded" and row.message is not None
    browser = staff()
    page = browser.get(f"{LIST}{row.pk}/change/").content.decode()
    assert 'id="blitzq-retry"' in page and "blitzq-no-retry" not in page
    done = browser.post(f"{LIST}{row.pk}/retry/", follow=True).content.decode()
    new_id = re.search(r"enqueued again as (\w+)", done)[1]  # type: ignore[index]
    with running_worker(blitzq_redis):
        again = blitzq_redis.get_result(new_id, timeout=20).result
    # The same values of the same types, as the first run got them (not base64 text, ISO
    # strings, "1.10" or {"1": ...}).
    assert repr(again) == repr(original)
    assert again["args"][0] == b"\x00\xffraw" and again["args"][4] == {1: "one", 2: [b"x", None]}
    assert isinstance(again["args"][2], decimal.Decimal)


def test_retry_is_not_offered_without_the_message(blitzq_redis: Client) -> None:
    big = fails.enqueue(b"x" * 10_000)  # over 8 KiB: the history keeps only its size
    secret = sign_in.enqueue("ann", "hunter2")  # masked by the default REDACT
    with running_worker(blitzq_redis):
        for handle in (big, secret):
            with pytest.raises(Exception):  # noqa: B017 - they fail, as they are meant to
                handle.result(timeout=20)
    write_history()
    browser = staff()
    for handle, why in ((big, "over 8 KiB"), (secret, "redacted")):
        row = TaskRecord.objects.get(task_id=handle.id)
        assert row.is_final and row.message is None  # and no secret in the table
        page = browser.get(f"{LIST}{row.pk}/change/").content.decode()
        assert 'id="blitzq-retry"' not in page, why
        assert "Retry is not offered" in page and why in page
        refused = browser.post(f"{LIST}{row.pk}/retry/", follow=True).content.decode()
        assert "not retried" in refused and why in refused
    assert b"hunter2" not in bytes(TaskRecord.objects.get(task_id=secret.id).message or b"")
    assert blitzq_redis.queue_stats("default").ready == 0


def test_retry_is_not_offered_for_a_task_that_has_not_finished(blitzq_redis: Client) -> None:
    scheduled = echo.options(delay=600).enqueue(1)
    queued = echo.enqueue(2)
    write_history()
    browser = staff()
    for handle, state in ((scheduled, "scheduled"), (queued, "queued")):
        row = TaskRecord.objects.get(task_id=handle.id)
        assert row.state == state and row.message is not None
        page = browser.get(f"{LIST}{row.pk}/change/").content.decode()
        assert 'id="blitzq-retry"' not in page and "Retry is not offered" in page
        assert state in page.split('id="blitzq-no-retry"')[1][:200]
        browser.post(f"{LIST}{row.pk}/retry/")
    stats = blitzq_redis.queue_stats("default")
    assert (stats.ready, stats.scheduled) == (1, 1)  # nothing enqueued a second time


def test_retry_and_replay_say_how_they_differ_and_link_each_other(
        blitzq_redis: Client) -> None:
    handle = fails.enqueue(b"\x01")
    with running_worker(blitzq_redis), pytest.raises(Exception):  # noqa: B017
        handle.result(timeout=20)
    write_history()
    row = TaskRecord.objects.get(task_id=handle.id)
    assert row.state == "dead_lettered"
    browser = staff("view_deadletter", "replay_deadletter")
    page = browser.get(f"{LIST}{row.pk}/change/").content.decode()
    assert "Retry enqueues a new message" in page and "Replay instead puts" in page
    link = re.search(r'href="([^"]+)" id="blitzq-dead-letter-link"', page)
    assert link is not None
    letter = browser.get(link[1].replace("&amp;", "&")).content.decode()
    assert "Replay puts this message itself back" in letter and "Retry, on a task" in letter
    assert f'href="{LIST}{row.pk}/change/" id="blitzq-history-link"' in letter
    # Without the permission to see dead letters, no link to them.
    page = staff().get(f"{LIST}{row.pk}/change/").content.decode()
    assert "blitzq-dead-letter-link" not in page
