"""The queue overview: per-queue counts and live workers from the engine's stats."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client as DjangoClient

from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from tests.support.waiting import wait_until

from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/admin/blitzq_django/queueoverview/"


@blitzq_task(name="tests.admin.queues.fail", queue="reports")
def fail() -> None:
    raise RuntimeError("no")


@blitzq_task(name="tests.admin.queues.ok")
def ok() -> None: ...


def login(*codenames: str) -> DjangoClient:
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="blitzq_django", codename__in=codenames))
    browser = DjangoClient()
    browser.force_login(user)
    return browser


def row(html: str, queue: str) -> list[str]:
    found = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert found, queue
    return re.findall(r"<t[dh]>(?:<a [^>]*>)?([^<]*)", found[1])


def test_counts_per_queue_and_the_workers(blitzq_redis: Client) -> None:
    ok.enqueue()
    ok.enqueue()
    ok.options(delay=600).enqueue()
    fail.enqueue()
    with running_worker(blitzq_redis, queues=("reports",), name="w-reports"):
        wait_until(lambda: blitzq_redis.queue_stats("reports").dead_letters == 1,
                   message="a dead letter")
        browser = login("view_queueoverview", "view_deadletter")
        html = browser.get(PAGE).content.decode()
        assert "w-reports" in html and "No live workers" not in html
    # queue, ready, in flight, scheduled, dead letters, consumers, oldest ready
    default = row(html, "default")
    assert default[:5] == ["default", "2", "0", "1", "0"]
    reports = row(html, "reports")
    assert reports[:5] == ["reports", "0", "0", "0", "1"]
    assert "/admin/blitzq_django/deadletter/?queue=reports" in html


def test_dead_letter_links_need_the_dead_letter_permission(blitzq_redis: Client) -> None:
    html = login("view_queueoverview").get(PAGE).content.decode()
    assert "deadletter/?queue" not in html and "No live workers" in html


def test_needs_the_view_permission(blitzq_redis: Client) -> None:
    browser = login("view_deadletter")
    assert browser.get(PAGE).status_code == 403
    index = browser.get("/admin/").content.decode()
    assert "/admin/blitzq_django/deadletter/" in index and PAGE not in index


def test_the_admin_index_lists_the_pages(blitzq_redis: Client, settings: Any) -> None:
    User.objects.create_superuser("root", "root@example.com", "pw")
    browser = DjangoClient()
    browser.login(username="root", password="pw")
    html = browser.get("/admin/blitzq_django/").content.decode()
    for url in (PAGE, "/admin/blitzq_django/deadletter/", "/admin/blitzq_django/taskrecord/"):
        assert url in html
    assert "/admin/blitzq_django/deadletter/add/" not in html
