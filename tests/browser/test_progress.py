"""A user's page follows its task's progress bar (docs/progress.md): /shop/export/ under
daphne (WebSockets), a worker running the slow export, headless Chromium watching the
bar move to 100 %. Another (non-staff) user's page is refused. Also the polling
fallback (progress.js with transport "poll").

The screenshot docs/img/progress-export.png is taken here (overwritten on each run).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client as DjangoClient

from blitzq_django.engine import Client
from tests.django.conftest import running_worker

from .conftest import screenshots_dir, skip_without_browser

skip_without_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402 - after the skip check

from .test_admin_shop_asgi import blitzq, daphne  # noqa: E402, F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

IMG = screenshots_dir()
MOVING = """() => {
  const v = Number(document.getElementById("bar").getAttribute("aria-valuenow"));
  return v > 0 && v < 100;
}"""


def logged_in(browser: Browser, base_url: str, user: Any) -> Page:
    client = DjangoClient()
    client.force_login(user)
    context = browser.new_context(base_url=base_url, viewport={"width": 760, "height": 420})
    context.set_default_timeout(15_000)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                          "url": base_url}])
    return context.new_page()


@pytest.fixture
def users() -> dict[str, Any]:
    model = get_user_model()
    return {"alice": model.objects.create_user("alice", password="pw"),
            "bob": model.objects.create_user("bob", password="pw")}


def test_the_export_page_follows_its_progress_bar(browser: Browser, daphne: str,  # noqa: F811
                                                  blitzq: Client,  # noqa: F811
                                                  users: dict[str, Any]) -> None:
    page = logged_in(browser, daphne, users["alice"])
    sockets: list[str] = []
    polls: list[str] = []
    page.on("websocket", lambda socket: sockets.append(socket.url))
    page.on("request", lambda r: polls.append(r.url) if "/progress/" in r.url else None)
    try:
        response = page.goto("/shop/export/")
        assert response is not None and response.status == 200
        page.fill("input[name=rows]", "25")
        with running_worker(blitzq):
            page.click("#start-export")
            page.wait_for_url("**/shop/export/?task=*")
            task_id = page.locator("#task-id").inner_text()
            page.wait_for_function(MOVING, timeout=15_000)  # pushed while it runs
            expect(page.locator("#task-state")).to_have_text("running")
            expect(page.locator("#note")).to_contain_text("of 25")
            page.wait_for_function(MOVING.replace("v > 0", "v >= 40"), timeout=15_000)
            page.screenshot(path=str(IMG / "progress-export.png"))
            expect(page.locator("#outcome")).to_have_text("Done: 25 rows exported.",
                                                          timeout=20_000)
        expect(page.locator("#bar")).to_have_attribute("aria-valuenow", "100")
        expect(page.locator("#task-state")).to_have_text("succeeded")
        assert blitzq.get_result(task_id).result == {"rows": 25}
        assert [u for u in sockets if f"/ws/blitzq/tasks/{task_id}/" in u], sockets
        assert not polls, polls  # pushed over the socket, never polled

        # Another user, not staff, cannot follow it (WebSocket refused with 4403).
        other = logged_in(browser, daphne, users["bob"])
        try:
            other.goto(f"/shop/export/?task={task_id}&queue=default")
            expect(other.locator("#outcome")).to_have_text("Failed: forbidden")
            expect(other.locator("#bar")).to_have_attribute("aria-valuenow", "0")
        finally:
            other.context.close()
    finally:
        page.context.close()


def test_the_polling_fallback(browser: Browser, daphne: str, blitzq: Client,  # noqa: F811
                              users: dict[str, Any]) -> None:
    from blitzq_django.progress import for_user
    from testproject.shop.tasks import export_orders

    handle = for_user(export_orders, users["alice"]).enqueue(10, 0.1)
    page = logged_in(browser, daphne, users["alice"])
    try:
        page.goto("/shop/export/")
        page.evaluate("""(id) => {
          window.seen = [];
          BlitzQ.follow(id, {transport: "poll", pollMs: 100,
            onProgress: (p) => window.seen.push(p.done),
            onDone: (r) => { window.result = r; }});
        }""", handle.id)
        with running_worker(blitzq):
            page.wait_for_function("() => window.result !== undefined", timeout=20_000)
        assert page.evaluate("window.result") == {"rows": 10}
        seen = page.evaluate("window.seen")
        assert seen and seen == sorted(seen) and seen[-1] == 10
    finally:
        page.context.close()
