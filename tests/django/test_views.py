"""Enqueue from real views: the example shop's sync and async "confirm order" views,
served by Django's test clients, with a worker running the task they enqueue.

(The browser tests serve the same views from an ASGI server: tests/browser/test_admin_views.py.)
"""

from __future__ import annotations

import re

import pytest
from django.test import AsyncClient
from django.test import Client as DjangoClient

from blitzq_django.engine import Client
from testproject.shop.models import Order

from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)

JSON = {"HTTP_ACCEPT": "application/json"}
CONFIRM = {"sync": "/shop/orders/{}/confirm/", "async": "/shop/orders/{}/confirm-async/"}


@pytest.fixture
def order() -> Order:
    return Order.objects.create(reference="ORD-1", amount_cents=1250)


def outcome(client: Client, answer: dict[str, str]) -> object:
    return client.get_result(answer["task_id"], timeout=15, queue=answer["queue"]).result


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_view_enqueues_and_a_worker_runs_the_task(blitzq_redis: Client, order: Order,
                                                  kind: str) -> None:
    response = DjangoClient().post(CONFIRM[kind].format(order.pk), **JSON)
    assert response.status_code == 202, response.content
    answer = response.json()
    assert answer["order"] == order.pk and answer["queue"] == "default"
    assert blitzq_redis.queue_stats("default").ready == 1
    order.refresh_from_db()
    assert order.status == "confirmed"
    with running_worker(blitzq_redis):
        assert outcome(blitzq_redis, answer) == "charged ORD-1 on attempt 1"


@pytest.mark.asyncio
async def test_async_view_under_the_async_test_client(blitzq_redis: Client,
                                                      order: Order) -> None:
    client = AsyncClient()
    first = await client.post(CONFIRM["async"].format(order.pk), headers={"accept":
                                                                           "application/json"})
    second = await client.post(CONFIRM["async"].format(order.pk), headers={"accept":
                                                                            "application/json"})
    assert first.status_code == second.status_code == 202
    ids = {first.json()["task_id"], second.json()["task_id"]}
    assert len(ids) == 2  # two requests on two event loops, one client: two messages
    stats = await blitzq_redis.aqueue_stats("default")
    assert stats.ready == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_form_post_redirects_to_the_order_page_with_the_task(blitzq_redis: Client,
                                                             order: Order, kind: str) -> None:
    browser = DjangoClient()
    response = browser.post(CONFIRM[kind].format(order.pk))
    assert response.status_code == 302
    assert response["Location"].startswith(f"/shop/orders/{order.pk}/?task=")
    task_id = re.search(r"task=(\w+)", response["Location"])[1]  # type: ignore[index]
    with running_worker(blitzq_redis):
        blitzq_redis.get_result(task_id, timeout=15)
    page = browser.get(response["Location"]).content.decode()
    assert task_id in page and "succeeded" in page and "confirmed" in page


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_only_post_and_only_existing_orders(blitzq_redis: Client, kind: str) -> None:
    browser = DjangoClient()
    assert browser.get(CONFIRM[kind].format(1)).status_code == 405
    assert browser.post(CONFIRM[kind].format(999), **JSON).status_code == 404
    assert blitzq_redis.queue_stats("default").ready == 0


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_csrf_is_enforced(blitzq_redis: Client, order: Order, kind: str) -> None:
    browser = DjangoClient(enforce_csrf_checks=True)
    assert browser.post(CONFIRM[kind].format(order.pk)).status_code == 403
    assert blitzq_redis.queue_stats("default").ready == 0

    page = browser.get(f"/shop/orders/{order.pk}/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]  # type: ignore[index]
    response = browser.post(CONFIRM[kind].format(order.pk), {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert blitzq_redis.queue_stats("default").ready == 1
