"""Enqueue from real views served by an ASGI server: the example shop's sync and async
"confirm order" views under daphne (a subprocess on a free port, on the test database
and the test Redis), driven by headless Chromium, with a worker running the task.

(The same views under Django's test clients: tests/django/test_views.py.)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from blitzq_django import conf
from blitzq_django.engine import Client
from testproject.shop.models import Order
from tests.django.conftest import running_worker
from tests.support.waiting import wait_until

from .conftest import skip_without_browser

skip_without_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402 - after the skip check

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_env() -> dict[str, str]:
    """The test database (created by pytest-django) for a process of its own."""
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        return {"DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/"
                                f"{db['NAME']}"}
    return {"BLITZQ_SQLITE": str(db["NAME"]), "DATABASE_URL": ""}


@pytest.fixture
def blitzq(settings: Any, redis_url: str, namespace: str) -> Iterator[Client]:
    conf.reset()
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "QUEUES": ["default"]}
    yield conf.get_client()
    conf.reset()


@pytest.fixture
def daphne(blitzq: Client, redis_url: str, namespace: str) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, **database_env(), "DJANGO_SETTINGS_MODULE": "testproject.settings",
           "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "testproject.asgi:application"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def listening() -> bool:
        assert process.poll() is None, process.stderr.read().decode()  # type: ignore[union-attr]
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, timeout=30, interval=0.1, message="daphne listening")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()  # type: ignore[union-attr]


@pytest.fixture
def asgi_page(browser: Browser, daphne: str) -> Iterator[Page]:
    context = browser.new_context(base_url=daphne)
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.mark.parametrize("button", ["#confirm-sync", "#confirm-async"])
def test_confirm_order_under_daphne(asgi_page: Page, blitzq: Client, button: str) -> None:
    page = asgi_page
    order = Order.objects.create(reference="ORD-ASGI", amount_cents=1999)
    response = page.goto(f"/shop/orders/{order.pk}/")
    assert response is not None and response.status == 200
    assert response.headers.get("server", "").startswith("daphne"), response.headers

    page.click(button)  # a form post with its CSRF token, redirected to the order page
    page.wait_for_url("**/shop/orders/*/?task=*")
    task_id = page.locator("#task-id").inner_text()
    expect(page.locator("#status")).to_have_text("confirmed")
    assert blitzq.queue_stats("default").ready == 1

    def state() -> str:
        page.reload()
        return page.locator("#task-state").inner_text()

    with running_worker(blitzq):
        wait_until(lambda: state() == "succeeded", timeout=20, interval=0.2,
                   message="the payment task to succeed")
    assert blitzq.get_result(task_id).result == "charged ORD-ASGI on attempt 1"
    order.refresh_from_db()
    assert order.status == "confirmed"


def test_csrf_is_enforced_under_daphne(asgi_page: Page, blitzq: Client) -> None:
    order = Order.objects.create(reference="ORD-CSRF", amount_cents=1)
    for path in ("confirm", "confirm-async"):
        response = asgi_page.request.post(f"/shop/orders/{order.pk}/{path}/")
        assert response.status == 403
    assert blitzq.queue_stats("default").ready == 0
