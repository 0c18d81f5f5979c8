"""enqueue_on_commit: only after commit, never after rollback, handle returned at once."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from blitzq_django.engine import MessageEncodeError
from blitzq_django.transactions import enqueue_on_commit
from testproject.shop import tasks
from testproject.shop.models import Order

from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)


def ready(client: Any) -> int:
    return client.broker.queue_stats("default")["ready"]


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
