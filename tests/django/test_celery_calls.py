"""Celery's call style: ``delay()``, ``apply_async()`` (each keyword mapped to a call
option, or refused naming what to use), and handles looked up by id (``task.handle(id)``,
``get_handle(id)``), on the memory broker and on a real Redis."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from blitzq_django import blitzq_task, get_client, get_handle
from blitzq_django.engine import ConfigurationError, TaskFailed
from blitzq_django.tasks.celery_calls import NO_EQUIVALENT
from blitzq_django.testing import Blitzq


@blitzq_task(queue="emails")
def send_mail(to: str, subject: str = "hello") -> str:
    return f"{to}: {subject}"


@blitzq_task
def add(x: int, y: int) -> int:
    return x + y


@pytest.fixture
def queues(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "QUEUES": ["default", "emails", "reports"]}


def test_delay_is_enqueue(queues: None, blitzq: Blitzq) -> None:
    handle = send_mail.delay("ann@example.com", subject="hi")
    sent = blitzq.assert_enqueued(send_mail, "ann@example.com", subject="hi")
    assert (handle.id, handle.queue) == (sent.id, "emails")
    blitzq.drain()
    assert handle.result() == "ann@example.com: hi"


def test_apply_async_args_and_kwargs(queues: None, blitzq: Blitzq) -> None:
    handle = send_mail.apply_async(("bob@example.com",), {"subject": "yo"})
    blitzq.assert_enqueued(send_mail, "bob@example.com", subject="yo")
    add.apply_async([1, 2])
    add.apply_async(args=None, kwargs={"x": 3, "y": 4})
    assert [m.kwargs or list(m.args) for m in blitzq.enqueued(add)] == [[1, 2],
                                                                         {"x": 3, "y": 4}]
    blitzq.drain()
    assert handle.result() == "bob@example.com: yo"


def test_each_celery_keyword_sets_its_call_option(queues: None, blitzq: Blitzq) -> None:
    eta = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    before = dt.datetime.now(dt.UTC)
    add.apply_async((1, 2), countdown=60)
    add.apply_async((1, 2), eta=eta)
    add.apply_async((1, 2), expires=300, queue="reports", priority="high",
                    task_id="order-7", time_limit=12, headers={"tenant": "a"})
    add.apply_async((1, 2), idempotency_key="k1", retries=5)  # blitzq's own options too
    countdown, at_eta, rest, own = blitzq.enqueued(add)
    assert countdown.eta is not None
    assert dt.timedelta(seconds=59) < countdown.eta - before < dt.timedelta(seconds=61)
    assert abs(at_eta.eta - eta) < dt.timedelta(milliseconds=2)  # type: ignore[operator]
    assert (rest.queue, rest.id, rest.message.priority, rest.message.timeout,
            rest.message.headers["tenant"]) == ("reports", "order-7", "high", 12, "a")
    assert rest.message.expires_ms is not None
    assert (own.message.idempotency_key, own.options["retries"]) == ("k1", 5)


@pytest.mark.parametrize("keyword", sorted(NO_EQUIVALENT))
def test_a_celery_keyword_without_equivalent_says_what_to_use(queues: None, blitzq: Blitzq,
                                                              keyword: str) -> None:
    with pytest.raises(TypeError, match=f"{keyword}= has no equivalent in blitzq; use "):
        add.apply_async((1, 2), **{keyword: True})
    blitzq.assert_not_enqueued()


def test_refusals_name_the_replacement(queues: None, blitzq: Blitzq) -> None:
    with pytest.raises(TypeError, match=r"ignore_result=.*store_result=False on @blitzq_task"):
        add.apply_async((1, 2), ignore_result=True)
    with pytest.raises(TypeError, match=r"priority=5: .*'high', 'normal' or 'low'"):
        add.apply_async((1, 2), priority=5)
    with pytest.raises(TypeError, match="countdown= and delay= are the same option"):
        add.apply_async((1, 2), countdown=5, delay=5)
    with pytest.raises(TypeError, match="args must be a list or tuple, got int"):
        add.apply_async(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        add.apply_async((), [1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"countdwn.*Did you mean"):
        add.apply_async((1, 2), countdwn=5)
    with pytest.raises(ConfigurationError, match="eta must be a timezone-aware datetime"):
        add.apply_async((1, 2), eta=dt.datetime(2030, 1, 1))  # noqa: DTZ001
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'y'"):
        add.apply_async((1,))
    blitzq.assert_not_enqueued()


def test_task_handle_by_id_knows_its_queue(queues: None, blitzq: Blitzq) -> None:
    message_id = send_mail.delay("cy@example.com").id
    handle = send_mail.handle(message_id)
    assert (handle.id, handle.queue) == (message_id, "emails")
    blitzq.drain()
    assert handle.result() == "cy@example.com: hello"
    with pytest.raises(ConfigurationError, match="message id: task_id must be"):
        send_mail.handle("")


def test_task_handle_follows_options_queue(queues: None, blitzq: Blitzq) -> None:
    message_id = add.apply_async((2, 3), queue="reports").id
    assert add.handle(message_id).queue == "default"
    handle = add.options(queue="reports").handle(message_id)
    blitzq.drain()
    assert handle.result() == 5


def test_get_handle_finds_the_queue_of_a_finished_message(queues: None,
                                                          blitzq: Blitzq) -> None:
    message_id = send_mail.delay("dee@example.com").id
    blitzq.drain()
    handle = get_handle(message_id)
    assert handle.queue == "emails"
    assert handle.result() == "dee@example.com: hello"


def test_get_handle_finds_a_scheduled_message(queues: None, blitzq: Blitzq) -> None:
    message_id = add.apply_async((1, 1), countdown=600, queue="reports").id
    assert get_handle(message_id).queue == "reports"
    assert get_handle(message_id).inspect().state == "scheduled"  # type: ignore[union-attr]


def test_get_handle_of_a_message_found_nowhere(queues: None, blitzq: Blitzq) -> None:
    # Only the default queue seen: the message is there.
    assert get_handle("a" * 32).queue == "default"
    send_mail.delay("eve@example.com")  # a second queue is seen: the lookup cannot tell
    with pytest.raises(LookupError, match=r"no record or schedule of it on any of the 2 "
                                          r"queues .*Pass queue="):
        get_handle("a" * 32)
    assert get_handle("a" * 32, queue="emails").queue == "emails"


def test_a_failure_through_a_looked_up_handle(queues: None, blitzq: Blitzq) -> None:
    message_id = add.delay(1, "x").id  # type: ignore[arg-type]
    blitzq.drain()
    with pytest.raises(TaskFailed):
        get_handle(message_id).result()


@pytest.mark.django_db
def test_on_redis_a_handle_by_id_reads_the_result(blitzq_redis: Any, settings: Any) -> None:
    from tests.django.conftest import running_worker

    settings.BLITZQ = {**settings.BLITZQ, "QUEUES": ["default", "emails"]}
    handle = send_mail.apply_async(("fay@example.com",), countdown=0.2)
    found = get_handle(handle.id)  # scheduled: found in the schedule of "emails"
    assert found.queue == "emails"
    with running_worker(queues=["default", "emails"]):
        assert found.result(timeout=10) == "fay@example.com: hello"
    assert get_handle(handle.id).record().state == "succeeded"  # found by its record


@pytest.mark.asyncio
async def test_async_lookup_on_redis(blitzq_redis: Any, settings: Any) -> None:
    settings.BLITZQ = {**settings.BLITZQ, "QUEUES": ["default", "emails"]}
    handle = await send_mail.options(delay=600).aenqueue("gus@example.com")
    found = await get_client().ahandle(handle.id)
    assert found.queue == "emails"
    assert (await found.acancel()).outcome == "cancelled"
