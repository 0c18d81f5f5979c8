"""enqueue_on_commit: only after commit, never after rollback, handle returned at once."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from blitzq_django import conf
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import MessageEncodeError
from blitzq_django.models import OutboxMessage
from blitzq_django.transactions import enqueue_on_commit
from testproject.shop import tasks
from testproject.shop.models import Order

from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)


def ready(client: Any, queue: str = "default") -> int:
    return client.broker.queue_stats(queue)["ready"]


def test_enqueued_only_after_commit(blitzq_client: Any) -> None:
    with transaction.atomic():
        Order.objects.create(reference="o-1", amount_cents=1)
        handle = tasks.create_order.enqueue_on_commit("o-2", 2)
        assert handle.id and handle.queue == "default"
        assert ready(blitzq_client) == 0
    assert ready(blitzq_client) == 1
    with running_worker():
        assert handle.result(timeout=10) == Order.objects.get(reference="o-2").pk


def test_not_enqueued_after_rollback(blitzq_client: Any) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.noop.enqueue_on_commit()
        raise RuntimeError("rolled back")
    assert ready(blitzq_client) == 0


def test_rolled_back_savepoint_discards_its_enqueue(blitzq_memory: Any) -> None:
    with transaction.atomic():
        tasks.noop.enqueue_on_commit()
        try:
            with transaction.atomic():
                tasks.noop.enqueue_on_commit()
                raise RuntimeError("inner rollback")
        except RuntimeError:
            pass
    assert ready(blitzq_memory) == 1


def test_outside_a_transaction_enqueues_at_once(blitzq_memory: Any) -> None:
    handle = enqueue_on_commit(tasks.noop, using="default")
    assert ready(blitzq_memory) == 1 and handle.id


def test_the_handle_id_is_the_message_id(blitzq_memory: Any) -> None:
    with transaction.atomic():
        handle = tasks.noop.options(task_id="chosen-id").enqueue_on_commit()
    assert handle.id == "chosen-id"
    with running_worker():
        assert handle.record(timeout=10).id == "chosen-id"


def test_unencodable_arguments_fail_at_the_call_not_after_commit(blitzq_memory: Any) -> None:
    with pytest.raises(MessageEncodeError), transaction.atomic():
        tasks.create_order.enqueue_on_commit(object(), 1)
    assert ready(blitzq_memory) == 0


def test_enqueue_failure_after_commit_is_logged_not_raised(
        settings: Any, caplog: pytest.LogCaptureFixture) -> None:
    from tests.support.redis_server import free_port

    settings.BLITZQ = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    with transaction.atomic():
        Order.objects.create(reference="kept", amount_cents=1)
        handle = tasks.noop.enqueue_on_commit()
    assert Order.objects.filter(reference="kept").exists()  # the commit stands
    assert handle.id in caplog.text and "enqueue after commit failed" in caplog.text
    assert OutboxMessage.objects.get().message_id == handle.id  # kept for the relay


@blitzq_task
def echo_using(using: str, *, durable: bool = False) -> list[Any]:
    return [using, durable]


def test_a_held_idempotency_key_resolves_to_the_existing_message(blitzq_client: Any) -> None:
    first = tasks.noop.options(idempotency_key="k-1").enqueue()
    with transaction.atomic():
        handle = tasks.noop.options(idempotency_key="k-1").enqueue_on_commit()
        assert handle.id == first.id  # looked up at the call
    assert ready(blitzq_client) == 1
    with running_worker():
        assert handle.record(timeout=10).id == first.id


def test_a_key_taken_before_the_commit_resolves_at_the_commit(blitzq_client: Any) -> None:
    with transaction.atomic():
        handle = tasks.noop.options(idempotency_key="k-2").enqueue_on_commit()
        other = tasks.noop.options(idempotency_key="k-2").enqueue()  # takes it first
        assert handle.id != other.id
    assert handle.id == other.id  # the commit-time enqueue answered with the holder
    with running_worker():
        handle.result(timeout=10)


def test_every_option_is_kept(blitzq_memory: Any, settings: Any) -> None:
    settings.BLITZQ = {**settings.BLITZQ, "QUEUES": ["default", "other"]}
    client = conf.get_client()  # of the settings above
    with transaction.atomic():
        delayed = tasks.noop.options(delay=60, priority="low", headers={"h": 1},
                                     using="default").enqueue_on_commit()
    assert client.broker.scheduled_due_ms("default", delayed.id) is not None
    with transaction.atomic():
        urgent = tasks.noop.options(priority="high", queue="other").enqueue_on_commit()
    assert urgent.queue == "other" and ready(client, "other") == 1


def test_keywords_named_like_options_go_to_the_task(blitzq_memory: Any) -> None:
    with transaction.atomic():
        handle = echo_using.enqueue_on_commit(using="replica", durable=True)
    assert not OutboxMessage.objects.exists()  # durable= was the task's argument
    with running_worker():
        assert handle.result(timeout=10) == ["replica", True]


def test_using_picks_the_connection_whose_commit_counts(blitzq_memory: Any) -> None:
    with transaction.atomic(using="default"):
        tasks.noop.options(using="default").enqueue_on_commit()
        assert ready(blitzq_memory) == 0
    assert ready(blitzq_memory) == 1
    handle = enqueue_on_commit(tasks.noop, using="default")  # the function form
    assert ready(blitzq_memory) == 2 and handle.id
