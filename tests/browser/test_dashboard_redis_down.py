"""The live dashboard with Redis down (a redis-server of this module's own, stopped):
over the WebSocket (daphne) and when polling (the WSGI live server), the page says Redis
cannot be read, is not green "live", and shows no made-up figure (no "No queues.", no
0 totals); once Redis is back, the numbers come and the socket is "live" again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from blitzq_django.engine import Client
from tests.support.redis_server import RedisServer

from .conftest import screenshots_dir, skip_without_browser

skip_without_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402 - after the skip check

from . import test_admin_shop_asgi as _asgi  # noqa: E402 - the daphne fixtures
from .test_dashboard import DASHBOARD, console_errors, log_in, make_user  # noqa: E402

asgi_page, blitzq, daphne = _asgi.asgi_page, _asgi.blitzq, _asgi.daphne

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = screenshots_dir(docs=False)


@pytest.fixture
def stopped_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    server.kill()  # its port refuses every connection from now on
    yield server
    server.kill()


@pytest.fixture
def redis_url(stopped_redis: RedisServer) -> str:
    """The fixtures of this module (settings, daphne's environment) use the stopped one."""
    return stopped_redis.url


def says_redis_is_down(page: Page) -> None:
    status = page.locator("#bq-status")
    expect(status).to_have_attribute("data-mode", "error")
    expect(status).to_have_text("Redis unreachable")
    expect(page.locator("#bq-error")).to_contain_text("cannot reach Redis")
    expect(page.locator("#bq-dashboard")).to_have_attribute("data-redis", "down")
    for table in ("#bq-queues", "#bq-workers", "#bq-failures"):
        expect(page.locator(f"{table} tbody")).to_have_text("Unknown: Redis cannot be read.")
    for total in ("enqueued", "started", "succeeded", "retried", "failed", "dead-lettered"):
        expect(page.locator(f"#bq-{total}")).to_have_text("–")


def test_over_the_socket_the_dashboard_says_redis_is_down_until_it_is_back(
        asgi_page: Page, blitzq: Client, stopped_redis: RedisServer) -> None:
    page = asgi_page
    make_user("ops", "view_queueoverview")
    log_in(page, "ops", DASHBOARD)
    page.wait_for_url(f"**{DASHBOARD}")
    says_redis_is_down(page)
    page.screenshot(path=str(SHOTS / "dashboard-redis-down.png"), full_page=True)
    # Several updates later it still says so: never green, never "No queues."
    shown = int(page.locator("#bq-dashboard").get_attribute("data-messages") or 0)
    expect(page.locator("#bq-dashboard")).not_to_have_attribute(
        "data-messages", str(shown), timeout=5_000)
    says_redis_is_down(page)

    back = RedisServer(port=stopped_redis.port).start()
    try:
        expect(page.locator("#bq-status")).to_have_attribute("data-mode", "live",
                                                             timeout=15_000)
        expect(page.locator("#bq-queues tr[data-queue=default]")).to_be_visible()
        expect(page.locator("#bq-enqueued")).to_have_text("0")
        expect(page.locator("#bq-error")).to_be_hidden()
    finally:
        back.kill()


def test_when_polling_the_dashboard_says_redis_is_down(
        browser: Browser, live_server: Any, blitzq: Client) -> None:
    make_user("ops", "view_queueoverview")
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        errors = console_errors(page)
        log_in(page, "ops", DASHBOARD)
        page.wait_for_url(f"**{DASHBOARD}")
        says_redis_is_down(page)
        # the data view answers 503 (and says why), which the browser reports; nothing
        # else failed
        assert errors and all("/dashboard/data/" in e or "status of 503" in e
                              for e in errors), errors
    finally:
        context.close()
