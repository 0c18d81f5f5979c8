"""@blitzq_task(effectively_once=True): the body's database writes commit once per key."""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import uuid
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.utils import timezone

from blitzq_django import effects
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import current_task
from blitzq_django.models import OutboxMessage, TaskEffect
from testproject.shop import tasks
from testproject.shop.models import Delivery

from ..support.waiting import wait_until
from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)


@blitzq_task(effectively_once=True, retries=2, initial_delay=0.01, jitter=False)
def fails_once_after_writing(reference: str) -> int:
    Delivery.objects.create(reference=reference)
    ctx = current_task()
    assert ctx is not None
    if ctx.attempt == 1:
        raise RuntimeError("rolled back with its writes")
    return ctx.attempt


@blitzq_task(effectively_once=True)
def rich_result(reference: str) -> Any:
    Delivery.objects.create(reference=reference)
    return {"when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
            "amount": decimal.Decimal("1.10"), "pair": (1, 2)}


@blitzq_task(effectively_once=True)
def with_follow_up(reference: str) -> str:
    Delivery.objects.create(reference=reference)
    tasks.noop.options(durable=True).enqueue()  # an outbox row in the same transaction
    return reference


def deliveries(reference: str) -> int:
    return Delivery.objects.filter(reference=reference).count()


def test_a_second_message_of_the_same_idempotency_key_does_not_run_the_body(
        blitzq_client: Any, settings: Any) -> None:
    # Two messages holding one idempotency key (on two queues, so Redis keeps both):
    # the effect row keyed by it lets the body run once; the second returns its result.
    settings.BLITZQ = {**settings.BLITZQ, "QUEUES": ["default", "other"]}
    first = tasks.record_delivery.options(idempotency_key="order-7").enqueue("d-1")
    second = tasks.record_delivery.options(idempotency_key="order-7",
                                           queue="other").enqueue("d-1")
    assert first.id != second.id
    with running_worker(queues=("default", "other")):
        value = first.result(timeout=10)
        assert second.result(timeout=10) == value
    assert deliveries("d-1") == 1
    effect = TaskEffect.objects.get()
    assert effect.key == f"{tasks.record_delivery.name}:key:order-7"
    assert effect.task_id in (first.id, second.id)  # whichever ran first
    assert effects.load_result(effect.result) == value


def test_without_a_key_the_effect_is_keyed_by_task_id(blitzq_memory: Any) -> None:
    handle = tasks.record_delivery.enqueue("d-2")
    with running_worker():
        pk = handle.result(timeout=10)
    effect = TaskEffect.objects.get()
    assert effect.key == f"{tasks.record_delivery.name}:id:{handle.id}"
    assert effects.load_result(effect.result) == pk


def test_a_redelivery_returns_the_stored_result_without_running_the_body() -> None:
    calls = []

    def body() -> dict[str, int]:
        calls.append(1)
        Delivery.objects.create(reference="d-3")
        return {"n": len(calls)}

    options = {"key": "k-3", "task_name": "t", "task_id": "id-3", "using": "default"}
    assert effects.run_once(body, (), {}, **options) == {"n": 1}
    assert effects.run_once(body, (), {}, **options) == {"n": 1}
    assert len(calls) == 1 and deliveries("d-3") == 1


def test_a_body_that_raises_rolls_back_its_row_and_the_retry_runs_it(
        blitzq_memory: Any) -> None:
    handle = fails_once_after_writing.enqueue("d-4")
    with running_worker():
        assert handle.result(timeout=10) == 2
    assert deliveries("d-4") == 1  # the first attempt's row was rolled back with it
    assert TaskEffect.objects.filter(task_id=handle.id).count() == 1


def test_results_json_cannot_hold_are_stored_exactly(blitzq_redis: Any) -> None:
    handle = rich_result.enqueue("d-5")
    with running_worker():
        first = handle.result(timeout=10)
    stored = effects.load_result(TaskEffect.objects.get().result)
    assert stored == {"when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
                      "amount": decimal.Decimal("1.10"), "pair": [1, 2]}
    assert first == stored


def test_called_directly_it_just_runs() -> None:
    assert tasks.record_delivery("d-6") == Delivery.objects.get(reference="d-6").pk
    assert not TaskEffect.objects.exists()


def test_a_concurrent_duplicate_waits_for_the_first_and_does_not_run_the_body() -> None:
    """The lease expired while the first run is still going: the duplicate blocks on the
    unique index (PostgreSQL) or the write lock (SQLite) until the first commits."""
    inside, release = threading.Event(), threading.Event()
    calls: list[str] = []
    results: dict[str, Any] = {}
    options = {"key": f"k-{uuid.uuid4().hex}", "task_name": "t", "task_id": "id-7",
               "using": "default"}

    def body(who: str) -> str:
        calls.append(who)
        Delivery.objects.create(reference="d-7")
        inside.set()
        assert release.wait(20)
        return who

    def run(who: str) -> None:
        try:
            results[who] = effects.run_once(body, (who,), {}, **options)
        except BaseException as exc:  # surfaced by the asserts below
            results[who] = exc
        finally:
            from django.db import connections

            connections.close_all()

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert inside.wait(20)
    second = threading.Thread(target=run, args=("second",))
    second.start()
    if connection.vendor == "postgresql":
        # The duplicate's insert is waiting on the first's uncommitted unique row.
        wait_until(lambda: _lock_waiters() > 0, 10, message="the duplicate to wait on a lock")
    release.set()
    first.join(20)
    second.join(20)
    assert results == {"first": "first", "second": "first"}
    assert calls == ["first"] and deliveries("d-7") == 1


def _lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                       "AND datname = current_database()")
        return cursor.fetchone()[0]


def test_async_tasks_are_refused_at_decoration() -> None:
    with pytest.raises(ImproperlyConfigured, match="effectively_once needs a `def` task"):
        @blitzq_task(effectively_once=True)
        async def nope() -> None: ...


def test_an_unknown_database_is_refused_at_decoration() -> None:
    with pytest.raises(ImproperlyConfigured, match="names no database"):
        @blitzq_task(effectively_once="elsewhere")
        def nope() -> None: ...


def test_prune_drops_rows_older_than_the_retention(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "EFFECTS_RETENTION": 2}
    old = TaskEffect.objects.create(key="old", task_name="t", task_id="1", result=None)
    TaskEffect.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - dt.timedelta(days=3))
    TaskEffect.objects.create(key="new", task_name="t", task_id="2", result=None)
    assert effects.prune() == 1
    assert list(TaskEffect.objects.values_list("key", flat=True)) == ["new"]


def test_effect_keys_fit_the_column() -> None:
    key = effects.effect_key("t" * 255, "x", "k" * 512)
    assert len(key) <= effects.KEY_MAX and key.startswith("t" * 255 + ":key#")


def test_a_durable_follow_up_is_written_once_with_the_effect(blitzq_memory: Any) -> None:
    handle = with_follow_up.enqueue("d-8")
    with running_worker():
        assert handle.result(timeout=10) == "d-8"
    key = effects.effect_key(with_follow_up.name, handle.id, None)
    options = {"key": key, "task_name": with_follow_up.name, "task_id": handle.id,
               "using": "default"}
    # The redelivery: the stored result, no second row, no second follow-up.
    assert effects.run_once(with_follow_up.spec.func.__wrapped__, ("d-8",), {},
                            **options) == "d-8"
    assert deliveries("d-8") == 1 and OutboxMessage.objects.count() == 1
