"""With Redis down (a redis-server of this test's own, stopped), every admin page, the
dashboard's data and /metrics say that Redis could not be read and show no made-up
figure: no "0 dead letters", no "No live workers", no "not a dead letter", no "Nothing
to replay", no "never ran" for a schedule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client as DjangoClient
from django.utils import timezone

from blitzq_django import conf
from blitzq_django.models import PeriodicSchedule, TaskRecord, WorkflowRecord
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = "/admin/blitzq_django/"
SAYS_SO = "could not be read"


@pytest.fixture
def redis_down(settings: Any) -> Iterator[str]:
    server = RedisServer().start()
    server.kill()  # nothing listens on its port any more: every call is refused
    conf.reset()
    settings.BLITZQ = {"REDIS_URL": server.url, "NAMESPACE": "down", "QUEUES": ["default"],
                       "METRICS_TOKEN": "t0ken"}
    yield server.url
    conf.reset()


@pytest.fixture
def web(redis_down: str) -> DjangoClient:
    browser = DjangoClient()
    browser.force_login(User.objects.create_superuser("root", password="pw"))
    return browser


def page(web: DjangoClient, url: str) -> str:
    response = web.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def test_the_dead_letters_list_says_so_and_counts_nothing(web: DjangoClient) -> None:
    html = page(web, f"{ADMIN}deadletter/")
    assert "The dead letters could not be read" in html  # the error message
    assert "Redis could not be read: the dead letters are unknown." in html
    assert "0 dead letters" not in html and "No dead letters" not in html
    assert 'id="blitzq-replay-all"' not in html  # nothing to act on


def test_a_dead_letter_and_the_confirmation_say_so(web: DjangoClient) -> None:
    html = page(web, f"{ADMIN}deadletter/inspect/?queue=default&id=abc123")
    assert "Redis could not be read: nothing is known of abc123" in html
    assert "is not a dead letter" not in html
    for verb in ("replay", "purge"):
        html = page(web, f"{ADMIN}deadletter/{verb}/?all=1")
        assert f"no {verb} is possible until it can be" in html
        assert "Nothing to" not in html and "Are you sure" not in html
        assert 'id="blitzq-confirm"' not in html


def test_the_queues_page_says_so(web: DjangoClient) -> None:
    html = page(web, f"{ADMIN}queueoverview/")
    assert "The queues could not be read" in html
    assert html.count("Unknown: Redis could not be read.") == 2  # queues, workers
    assert "No live workers" not in html and "No queues could be read" not in html


def test_the_dashboard_data_says_so(web: DjangoClient) -> None:
    html = page(web, f"{ADMIN}queueoverview/dashboard/")
    assert 'id="bq-enqueued">–<' in html  # nothing shown as known before it is read
    response = web.get(f"{ADMIN}queueoverview/dashboard/data/")
    assert response.status_code == 503
    data = response.json()
    assert data["t"] == "error" and "cannot reach Redis" in data["error"]
    assert "totals" not in data and "queues" not in data


def test_the_schedules_say_their_runs_are_unknown(web: DjangoClient) -> None:
    PeriodicSchedule.objects.create(name="nightly", task="testproject.shop.tasks.noop",
                                    cron="0 3 * * *")
    html = page(web, f"{ADMIN}periodicschedule/")
    assert "The last runs could not be read from Redis" in html
    assert "unknown (Redis could not be read)" in html


def test_a_task_record_says_its_live_state_is_unavailable(web: DjangoClient) -> None:
    record = TaskRecord.objects.create(task_id="t-1", task_name="x", queue="default",
                                       created_at=timezone.now())
    html = page(web, f"{ADMIN}taskrecord/{record.pk}/change/")
    assert "Redis could not be asked for the live state" in html


def test_metrics_answer_503_saying_so(redis_down: str) -> None:
    for url in ("/metrics", "/blitzq/stats.json"):
        response = DjangoClient().get(url, HTTP_AUTHORIZATION="Bearer t0ken")
        assert response.status_code == 503, url
        assert b"Redis could not be read" in response.content


def test_a_workflow_page_says_so_and_draws_from_the_history(web: DjangoClient) -> None:
    now = timezone.now()
    WorkflowRecord.objects.create(workflow_id="wf-9", kind="chain", state="running",
                                  queue="default", created_at=now)
    TaskRecord.objects.create(task_id="wf-9.1", task_name="shop.price", queue="default",
                              state="succeeded", created_at=now, result=500,
                              workflow_id="wf-9", workflow_node="1", workflow_path="0")
    html = page(web, f"{ADMIN}workflowrecord/tree/?id=wf-9")
    assert "Redis could not be read" in html and 'data-id="wf-9.1"' in html
    assert "Redis no longer holds" not in html  # it may: it could not be asked
    assert "blitzq-workflow-cancel" in html  # running as far as the history knows
    unknown = web.get(f"{ADMIN}workflowrecord/tree/?id=wf-nothing")
    assert unknown.status_code == 404
    assert "Redis could not be read" in unknown.content.decode()
    assert "Nothing is known" not in unknown.content.decode()
    cancelled = web.post(f"{ADMIN}workflowrecord/cancel/", {"id": "wf-9"}, follow=True)
    assert "Workflow wf-9: not cancelled: BrokerUnavailable" in cancelled.content.decode()
