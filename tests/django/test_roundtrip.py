"""Enqueue -> worker -> result, through the testproject's tasks, on both brokers."""

from __future__ import annotations

from typing import Any

import pytest

from blitzq_django.engine import TaskFailed
from testproject.shop import tasks
from testproject.shop.models import Order

from .conftest import running_worker


def test_noop_async_and_flaky_tasks(blitzq_client: Any) -> None:
    noop = tasks.noop.enqueue()
    rate = tasks.fetch_exchange_rate.enqueue("USD")
    charge = tasks.charge_card.enqueue("order-1", fail_times=2)
    doomed = tasks.validate_card.enqueue("4000-0000-0000-0002")
    with running_worker():
        assert noop.result(timeout=10) is None
        assert rate.result(timeout=10) == 1.08
        # Attempts 1 and 2 fail (GatewayTimeout), the third succeeds.
        assert charge.result(timeout=15) == "charged order-1 on attempt 3"
        with pytest.raises(TaskFailed) as info:
            doomed.result(timeout=15)
    record = info.value.record
    assert (record.state, record.attempt, record.error_type) == ("dead_lettered", 2, "ValueError")
    assert "declined" in record.error_message


@pytest.mark.django_db(transaction=True)
def test_db_writing_task_really_writes(blitzq_client: Any) -> None:
    handles = tasks.create_order.enqueue_many([(f"ref-{i}", 100 + i) for i in range(20)])
    with running_worker(concurrency=8):
        pks = [h.result(timeout=20) for h in handles]
    assert Order.objects.count() == 20
    assert sorted(pks) == sorted(Order.objects.values_list("pk", flat=True))
    assert Order.objects.get(reference="ref-7").amount_cents == 107


@pytest.mark.django_db(transaction=True)
def test_db_task_is_idempotent_when_run_twice(blitzq_memory: Any) -> None:
    # At-least-once: a recovered message runs again; get_or_create keeps one row.
    first = tasks.create_order.enqueue("dup", 5)
    second = tasks.create_order.enqueue("dup", 5)
    with running_worker():
        assert first.result(timeout=10) == second.result(timeout=10)
    assert Order.objects.filter(reference="dup").count() == 1
