"""Database schedules in headless Chromium, against pytest-django's live server, a real
Redis, a real worker and two real schedulers (threads of this process, reading the
database as ``runscheduler`` does):

staff creates a schedule running every second in the admin; both schedulers pick it up
within 2 s (the save publishes; nothing polls the table); its runs appear on the list;
staff pauses it (bulk action, confirmation page); both schedulers know within 2 s and
its runs stop while another schedule keeps running.

The screenshot docs/img/admin-schedules.png is taken here (overwritten on each run).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from blitzq_django import conf, periodic_db
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.engine.client.context import current_task
from blitzq_django.models import PeriodicSchedule
from testproject.shop import tasks
from tests.django.conftest import running_worker
from tests.django.scheduler_threads import running_schedulers
from tests.support.waiting import wait_until

from .conftest import screenshots_dir, skip_without_browser

skip_without_browser()

from playwright.sync_api import Page, expect  # noqa: E402 - after the skip check

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
IMG = screenshots_dir()
SCHEDULES = "/admin/blitzq_django/periodicschedule/"

_beats: list[str] = []
_beats_lock = threading.Lock()


@blitzq_task(name="shop.heartbeat")
def heartbeat(service: str) -> str:
    context = current_task()
    with _beats_lock:
        _beats.append(context.id if context else "")
    return f"{service} is alive"


def beats(name: str) -> list[str]:
    with _beats_lock:
        return [b for b in _beats if b.startswith(f"periodic:{name}:")]


@pytest.fixture
def blitzq(settings: Any, redis_url: str, namespace: str) -> Iterator[Client]:
    conf.reset()
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "QUEUES": ["default"]}
    with _beats_lock:
        _beats.clear()
    yield conf.get_client()
    conf.reset()


def log_in(page: Page, username: str, *codenames: str) -> None:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="blitzq_django", codename__in=codenames))
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


def test_create_a_schedule_see_it_run_pause_it_and_see_it_stop(page: Page,
                                                               blitzq: Client) -> None:
    log_in(page, "scheduler-admin", "view_periodicschedule", "add_periodicschedule",
           "change_periodicschedule", "run_periodicschedule")
    with running_worker(blitzq), running_schedulers(2) as schedulers:
        page.get_by_role("link", name="Periodic schedules").first.click()
        page.wait_for_url(f"**{SCHEDULES}")
        # The code schedules are listed read-only under the table.
        code = page.locator("#blitzq-code-schedules")
        expect(code).to_contain_text(tasks.count_orders.name)
        expect(code).to_contain_text("cron '30 2 * * *' Europe/Berlin")

        page.get_by_role("link", name="Add periodic schedule").click()
        page.fill("#id_name", "ping-every-second")
        page.fill("#id_task", "shop.heartbeat")
        page.fill("#id_every", "1")
        page.fill("#id_args", '["checkout"]')
        page.fill("#id_description", "Checks the checkout service each second.")
        page.click("input[name=_save]")
        page.wait_for_url(f"**{SCHEDULES}")
        saved = time.monotonic()
        wait_until(lambda: all("ping-every-second" in s.schedules for s in schedulers),
                   timeout=2, message="both schedulers loading the new schedule")
        assert time.monotonic() - saved < 2.5

        row = page.locator("#result_list tbody tr", has_text="ping-every-second")
        expect(row).to_contain_text("every 1 s")
        expect(row.locator(".blitzq-next")).to_have_count(3)

        def ran_twice() -> bool:
            page.reload()
            return (len(beats("ping-every-second")) >= 2
                    and "succeeded" in row.locator(".blitzq-state").inner_text())

        wait_until(ran_twice, timeout=20, interval=0.3, message="its runs on the list")
        expect(row.locator(".blitzq-message")).to_contain_text("periodic:ping-every-second:")
        page.set_viewport_size({"width": 1680, "height": 900})
        page.click("#toggle-nav-sidebar")  # room for the tables in the screenshot
        page.screenshot(path=str(IMG / "admin-schedules.png"), full_page=True)

        # Pause it: a bulk action, through its confirmation page.
        row.locator("input.action-select").check()
        page.select_option("select[name=action]", "pause_selected")
        page.click("button[name=index]")
        expect(page.locator("#blitzq-question")).to_contain_text("pause 1 schedule")
        page.click("#blitzq-confirm")
        expect(page.locator(".messagelist")).to_contain_text("Paused 1 schedule")
        paused_at = time.monotonic()
        wait_until(lambda: all(not s.schedules["ping-every-second"].enabled
                               for s in schedulers),
                   timeout=2, message="both schedulers seeing the pause")
        assert time.monotonic() - paused_at < 2.5
        expect(row).to_contain_text("paused")

        # See the runs stop: another schedule runs three times, this one not once more.
        schedule = periodic_db.to_schedule(PeriodicSchedule.objects.get(name="ping-every-second"))
        (before,) = blitzq.schedule_infos([schedule])
        PeriodicSchedule.objects.create(name="witness", task="shop.heartbeat", every=0.3,
                                        args=["witness"])
        wait_until(lambda: len(beats("witness")) >= 3, timeout=20,
                   message="three runs of another schedule")
        (after,) = blitzq.schedule_infos([schedule])
        assert after.last_run_ms == before.last_run_ms, "dispatched while paused"
        wait_until(lambda: before.last_message_id in beats("ping-every-second"), timeout=20,
                   message="the last occurrence dispatched before the pause run")
        count = len(beats("ping-every-second"))
        page.reload()
        expect(row.locator(".blitzq-message")).to_have_text(before.last_message_id or "")
        assert len(beats("ping-every-second")) == count
    ran = beats("ping-every-second")
    assert len(ran) == len(set(ran)), "an occurrence ran twice"
