"""The dead-letter admin pages, through Django's test client against a real Redis:
list, filters, inspect, replay and purge (selected and all matching) with their
confirmation pages, permissions (403 and hidden buttons), CSRF and escaping.

No history table is involved: the pages read the engine's dead-letter API.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client as DjangoClient

from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.models import TaskRecord
from tests.support.waiting import wait_until

from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/blitzq_django/deadletter/"
REPLAY = LIST + "replay/"
PURGE = LIST + "purge/"
XSS = "<script>alert(1)</script>"


@blitzq_task(name="tests.admin.explode")
def explode(note: str, password: str = "") -> None:
    raise ValueError(f"boom {note}")


@blitzq_task(name="tests.admin.crash")
def crash(note: str) -> None:
    raise KeyError(note)


@pytest.fixture
def redis_two_queues(settings: Any, blitzq_redis: Client) -> Client:
    settings.BLITZQ = {**settings.BLITZQ, "QUEUES": ["default", "other"]}
    from blitzq_django import conf

    return conf.get_client()


def kill(client: Client, *calls: tuple[Any, tuple[Any, ...], str]) -> list[str]:
    """Enqueue (task, args, queue) calls that fail, and wait until all are dead letters."""
    ids = [task.options(queue=queue).enqueue(*args).id for task, args, queue in calls]
    queues = sorted({queue for _t, _a, queue in calls})
    with running_worker(client, queues=tuple(queues)):
        wait_until(lambda: sum(client.dead_letters.count(q) for q in queues) >= len(ids),
                   timeout=20, message="dead letters")
    return ids


def login(*perms: str, csrf: bool = False) -> DjangoClient:
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(
            content_type__app_label="blitzq_django", codename=codename))
    browser = DjangoClient(enforce_csrf_checks=csrf)
    browser.force_login(user)
    return browser


ALL = ("view_deadletter", "replay_deadletter", "purge_deadletter")


def test_list_shows_dead_letters_with_reason_attempts_and_age(redis_two_queues: Client) -> None:
    (first, second) = kill(redis_two_queues, (explode, ("a",), "default"),
                           (crash, ("b",), "other"))
    TaskRecord.objects.all().delete()  # no history needed: the page reads Redis
    html = login(*ALL).get(LIST).content.decode()
    for text in (first, second, "tests.admin.explode", "tests.admin.crash", "other",
                 "retries exhausted", "ValueError", "boom a", "KeyError"):
        assert text in html, text
    assert re.search(r"<td[^>]*>\d+ s</td>", html)  # the age column


def test_filters_by_queue_task_and_reason(redis_two_queues: Client) -> None:
    (first, second) = kill(redis_two_queues, (explode, ("a",), "default"),
                           (crash, ("b",), "other"))
    browser = login(*ALL)
    html = browser.get(LIST, {"queue": "other"}).content.decode()
    assert second in html and first not in html
    html = browser.get(LIST, {"task": "tests.admin.expl*"}).content.decode()
    assert first in html and second not in html
    html = browser.get(LIST, {"reason": "unknown task"}).content.decode()
    assert first not in html and second not in html and "No dead letters match" in html
    html = browser.get(LIST, {"queue": "bad queue!"}).content.decode()
    assert first not in html and second not in html


def test_inspect_shows_the_letter_redacted_and_escaped(blitzq_redis: Client) -> None:
    (letter,) = kill(blitzq_redis, (explode, (XSS, "hunter2"), "default"))
    browser = login(*ALL)
    html = browser.get(LIST).content.decode()
    assert XSS not in html and "&lt;script&gt;" in html
    response = browser.get(LIST + "inspect/", {"queue": "default", "id": letter})
    html = response.content.decode()
    assert response.status_code == 200
    assert "tests.admin.explode" in html and "retries exhausted" in html
    assert "Traceback" in html and "ValueError" in html
    assert "hunter2" not in html and "***" in html  # BLITZQ["REDACT"] names "password"
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'id="blitzq-replay"' in html and 'id="blitzq-purge"' in html
    assert "blitzq-history-link" not in html  # no history row for it


def test_inspect_links_the_history_row_when_there_is_one(blitzq_redis: Client) -> None:
    from django.utils import timezone

    (letter,) = kill(blitzq_redis, (explode, ("a",), "default"))
    TaskRecord.objects.filter(task_id=letter).delete()
    row = TaskRecord.objects.create(task_id=letter, task_name="tests.admin.explode",
                                    queue="default", state="dead_lettered",
                                    created_at=timezone.now())
    query = {"queue": "default", "id": letter}
    html = login(*ALL).get(LIST + "inspect/", query).content.decode()
    assert "blitzq-history-link" not in html  # without view_taskrecord
    User.objects.all().delete()
    html = login(*ALL, "view_taskrecord").get(LIST + "inspect/", query).content.decode()
    assert f"/admin/blitzq_django/taskrecord/{row.pk}/change/" in html


def test_replay_selected_goes_through_a_confirmation_page(blitzq_redis: Client) -> None:
    first, second = kill(blitzq_redis, (explode, ("a",), "default"),
                         (explode, ("b",), "default"))
    browser = login(*ALL)
    page = browser.post(REPLAY, {"ids": [f"default:{first}"], "next": LIST})
    assert page.status_code == 200
    html = page.content.decode()
    assert "Are you sure you want to replay" in html and first in html and second not in html
    assert blitzq_redis.dead_letters.count("default") == 2  # nothing done yet

    done = browser.post(REPLAY, {"ids": [f"default:{first}"], "confirm": "yes", "next": LIST})
    assert done.status_code == 302 and done["Location"] == LIST
    assert [x.id for x in blitzq_redis.dead_letters.list("default")] == [second]
    assert blitzq_redis.queue_stats("default").ready == 1
    assert "Replayed 1 dead letter" in browser.get(LIST).content.decode()


def test_replay_all_matching_a_filter(redis_two_queues: Client) -> None:
    kill(redis_two_queues, (explode, ("a",), "default"), (explode, ("b",), "other"),
         (crash, ("c",), "other"))
    browser = login(*ALL)
    page = browser.get(REPLAY, {"all": "1", "task": "tests.admin.explode"})
    html = page.content.decode()
    assert "all 2 dead letters matching" in html and "tests.admin.crash" not in html
    browser.post(REPLAY, {"all": "1", "task": "tests.admin.explode", "confirm": "yes"})
    assert redis_two_queues.dead_letters.count("default") == 0
    assert [x.task for x in redis_two_queues.dead_letters.list("other")] == ["tests.admin.crash"]


def test_purge_selected_and_all_matching(redis_two_queues: Client) -> None:
    first, _second, _third = kill(redis_two_queues, (explode, ("a",), "default"),
                                  (explode, ("b",), "default"), (crash, ("c",), "other"))
    browser = login(*ALL)
    html = browser.post(PURGE, {"ids": [f"default:{first}"]}).content.decode()
    assert "Are you sure you want to purge" in html
    assert redis_two_queues.dead_letters.count("default") == 2
    browser.post(PURGE, {"ids": [f"default:{first}"], "confirm": "yes"})
    assert redis_two_queues.dead_letters.count("default") == 1

    html = browser.get(PURGE, {"all": "1", "queue": "other"}).content.decode()
    assert "all 1 dead letter matching" in html
    browser.post(PURGE, {"all": "1", "queue": "other", "confirm": "yes"})
    assert redis_two_queues.dead_letters.count("other") == 0
    assert redis_two_queues.dead_letters.count("default") == 1


def test_view_permission_alone_shows_no_buttons_and_refuses_the_actions(
        blitzq_redis: Client) -> None:
    (letter,) = kill(blitzq_redis, (explode, ("a",), "default"))
    browser = login("view_deadletter")
    html = browser.get(LIST).content.decode()
    assert letter in html
    for button in ("blitzq-replay-selected", "blitzq-purge-selected", "blitzq-replay-all",
                   "blitzq-purge-all", 'name="ids"'):
        assert button not in html
    html = browser.get(LIST + "inspect/", {"queue": "default", "id": letter}).content.decode()
    assert "blitzq-replay" not in html and "blitzq-purge" not in html
    selected = {"ids": [f"default:{letter}"], "confirm": "yes"}
    for url in (REPLAY, PURGE):
        assert browser.get(url, {"all": "1"}).status_code == 403
        assert browser.post(url, selected).status_code == 403
    assert blitzq_redis.dead_letters.count("default") == 1


def test_each_action_needs_its_own_permission(blitzq_redis: Client) -> None:
    (letter,) = kill(blitzq_redis, (explode, ("a",), "default"))
    replayer = login("view_deadletter", "replay_deadletter")
    html = replayer.get(LIST).content.decode()
    assert "blitzq-replay-selected" in html and "blitzq-purge-selected" not in html
    assert replayer.post(PURGE, {"ids": [f"default:{letter}"], "confirm": "yes"}
                         ).status_code == 403
    assert blitzq_redis.dead_letters.count("default") == 1
    # Replay without view is refused too, and no page at all without view.
    User.objects.all().delete()
    blind = login("replay_deadletter", "purge_deadletter")
    assert blind.get(LIST).status_code == 403
    assert blind.post(REPLAY, {"ids": [f"default:{letter}"], "confirm": "yes"}
                      ).status_code == 403


def test_non_staff_are_sent_to_the_login_page(blitzq_redis: Client) -> None:
    user = User.objects.create_user("customer", password="pw", is_staff=False)
    user.user_permissions.add(*Permission.objects.filter(codename__in=ALL))
    browser = DjangoClient()
    browser.force_login(user)
    for url in (LIST, REPLAY, PURGE):
        response = browser.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_actions_need_the_csrf_token(blitzq_redis: Client) -> None:
    (letter,) = kill(blitzq_redis, (explode, ("a",), "default"))
    browser = login(*ALL, csrf=True)
    for url in (REPLAY, PURGE):
        assert browser.post(url, {"ids": [f"default:{letter}"], "confirm": "yes"}
                            ).status_code == 403
    assert blitzq_redis.dead_letters.count("default") == 1
    html = browser.get(LIST + "inspect/", {"queue": "default", "id": letter}).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)[1]  # type: ignore[index]
    browser.post(REPLAY, {"ids": [f"default:{letter}"], "confirm": "yes",
                          "csrfmiddlewaretoken": token})
    assert blitzq_redis.dead_letters.count("default") == 0


def test_a_replayed_letter_page_shows_its_state_now(blitzq_redis: Client) -> None:
    (letter,) = kill(blitzq_redis, (explode, ("a",), "default"))
    browser = login(*ALL)
    response = browser.post(REPLAY, {"ids": [f"default:{letter}"], "confirm": "yes",
                                     "from": "inspect"})
    assert response.status_code == 302 and "inspect/" in response["Location"]
    html = browser.get(response["Location"]).content.decode()
    assert "is not a dead letter" in html and "Replayed 1 dead letter" in html


def test_redis_down_is_an_error_message_not_a_500(settings: Any) -> None:
    settings.BLITZQ = {"REDIS_URL": "redis://127.0.0.1:1/0", "QUEUES": ["default"],
                       "REDIS_OPTIONS": {"socket_connect_timeout": 0.5}}
    response = login(*ALL).get(LIST)
    assert response.status_code == 200
    assert "could not be read" in response.content.decode()
