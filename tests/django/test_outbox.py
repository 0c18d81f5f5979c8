"""The transactional outbox: durable enqueues written in the caller's transaction and
published by the relay; the fallback of enqueue_on_commit when Redis is down."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.db import transaction

from blitzq_django import conf, outbox
from blitzq_django.engine import ConfigurationError
from blitzq_django.models import OutboxMessage
from testproject.shop import tasks
from testproject.shop.models import Order

from ..support.redis_server import RedisServer
from ..support.waiting import wait_until
from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)


def ready(client: Any, queue: str = "default") -> int:
    return client.broker.queue_stats(queue)["ready"]


def relay(**options: Any) -> outbox.Relay:
    return outbox.relay_from_settings(conf.get_settings(), **options)


def test_a_durable_message_is_written_in_the_transaction_and_published_by_the_relay(
        blitzq_client: Any) -> None:
    with transaction.atomic():
        Order.objects.create(reference="o-1", amount_cents=1)
        handle = tasks.create_order.options(durable=True).enqueue("o-2", 2)
        assert OutboxMessage.objects.filter(message_id=handle.id).exists()
    assert ready(blitzq_client) == 0  # nothing reaches Redis before the relay runs
    assert relay().run_once() == 1
    assert ready(blitzq_client) == 1 and not OutboxMessage.objects.exists()
    with running_worker():
        assert handle.result(timeout=10) == Order.objects.get(reference="o-2").pk


def test_a_rolled_back_durable_message_is_never_published(blitzq_memory: Any) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.noop.options(durable=True).enqueue_on_commit()
        raise RuntimeError("rolled back")
    assert not OutboxMessage.objects.exists()
    assert relay().run_once() == 0 and ready(blitzq_memory) == 0


def test_outside_a_transaction_a_durable_enqueue_writes_its_row_at_once(
        blitzq_memory: Any) -> None:
    handle = tasks.noop.options(durable=True).enqueue()
    row = OutboxMessage.objects.get()
    assert row.message_id == handle.id and row.queue == "default" and row.outbox == "default"
    assert row.task_name == tasks.noop.name
    item = outbox.decode_item(row.payload)  # msgpack, never pickle
    assert item.message_id == handle.id and item.task == tasks.noop.name


def test_a_row_published_twice_is_one_message(blitzq_client: Any) -> None:
    """The relay died after Redis accepted the batch and before its delete committed."""
    handle = tasks.noop.options(durable=True).enqueue()
    row = OutboxMessage.objects.get()
    saved = (row.message_id, row.queue, row.task_name, bytes(row.payload))
    assert relay().run_once() == 1
    OutboxMessage.objects.create(message_id=saved[0], queue=saved[1], task_name=saved[2],
                                 payload=saved[3])
    assert relay().run_once() == 1
    assert ready(blitzq_client) == 1 and not OutboxMessage.objects.exists()
    with running_worker():
        assert handle.record(timeout=10).id == handle.id


def test_every_option_travels_through_the_outbox(blitzq_memory: Any) -> None:
    delayed = tasks.noop.options(durable=True, delay=60, priority="high",
                                 headers={"h": 1}).enqueue()
    keyed = tasks.noop.options(durable=True, idempotency_key="once").enqueue()
    assert relay().run_once() == 2
    assert blitzq_memory.broker.scheduled_due_ms("default", delayed.id) is not None
    again = tasks.noop.options(idempotency_key="once").enqueue()
    assert again.id == keyed.id  # the relay published it under the caller's key


def test_a_held_key_resolves_to_the_existing_message(blitzq_client: Any) -> None:
    first = tasks.noop.options(idempotency_key="held").enqueue()
    with transaction.atomic():
        durable = tasks.noop.options(durable=True, idempotency_key="held").enqueue()
    assert durable.id == first.id
    relay().run_once()
    assert ready(blitzq_client) == 1


def test_named_outboxes_are_published_by_the_relays_serving_them(blitzq_memory: Any) -> None:
    tasks.noop.options(durable="mails").enqueue()
    assert OutboxMessage.objects.get().outbox == "mails"
    assert relay(outboxes=["other"]).run_once() == 0
    assert relay(outboxes=["mails"]).run_once() == 1


def test_many_and_async_durable_enqueues(blitzq_memory: Any) -> None:
    handles = tasks.noop.options(durable=True).enqueue_many([(), (), ()])
    # async_to_sync: the write runs on this thread (and its connection), as in a view.
    handle = async_to_sync(tasks.noop.options(durable=True).aenqueue)()
    ids = set(OutboxMessage.objects.values_list("message_id", flat=True))
    assert ids == {h.id for h in [*handles, handle]}
    assert relay(batch=2).run_once() == 4 and ready(blitzq_memory) == 4


def test_a_database_no_relay_serves_is_refused(blitzq_memory: Any) -> None:
    with pytest.raises(ConfigurationError, match="OUTBOX_DATABASES"):
        tasks.noop.options(durable=True, using="elsewhere").enqueue()


def test_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="durable must be"):
        tasks.noop.options(durable="no spaces")
    with pytest.raises(ConfigurationError, match="using must be"):
        tasks.noop.options(using=3)


def test_the_relay_thread_publishes_a_commit_at_once(blitzq_memory: Any) -> None:
    stop = threading.Event()
    run = outbox.companion(conf.get_settings())
    assert run is not None
    thread = threading.Thread(target=run, args=(stop,), daemon=True)
    thread.start()
    try:
        with transaction.atomic():
            tasks.noop.options(durable=True).enqueue()
        # Published, then its row deleted in the relay's own transaction: both, in turn.
        wait_until(lambda: ready(blitzq_memory) == 1 and not OutboxMessage.objects.exists(),
                   5, message="the relay to publish and delete the row")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_the_relay_companion_can_be_turned_off(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "OUTBOX_RELAY": False}
    assert outbox.companion(conf.get_settings()) is None


def test_runoutbox_once(blitzq_memory: Any, capsys: pytest.CaptureFixture[str]) -> None:
    tasks.noop.options(durable=True).enqueue()
    call_command("runoutbox", "--once")
    assert "published 1 outbox messages" in capsys.readouterr().out
    assert ready(blitzq_memory) == 1


def test_settings_checks() -> None:
    found = conf.problems({"OUTBOX_DATABASES": [], "EFFECTS_RETENTION": 0,
                           "OUTBOX_BATCH": 0, "OUTBOX_INTERVAL": 0})
    ids = {(p.id, p.key) for p in found}
    assert ("blitzq.E013", "OUTBOX_DATABASES") in ids
    assert ("blitzq.E013", "EFFECTS_RETENTION") in ids
    assert ("blitzq.E004", "OUTBOX_BATCH") in ids and ("blitzq.E004", "OUTBOX_INTERVAL") in ids
    assert conf.problems({"OUTBOX_RELAY": "yes"})[0].id == "blitzq.E003"


@pytest.fixture
def own_redis(settings: Any, namespace: str) -> Iterator[RedisServer]:
    server = RedisServer().start()
    settings.BLITZQ = {"REDIS_URL": server.url, "NAMESPACE": namespace,
                       "REDIS_OPTIONS": {"socket_connect_timeout": 0.5}}
    try:
        yield server
    finally:
        server.stop()


def test_redis_down_at_commit_keeps_the_message_in_the_outbox_until_it_is_back(
        own_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    client = conf.get_client()
    own_redis.kill()
    with transaction.atomic():
        Order.objects.create(reference="kept", amount_cents=1)
        handle = tasks.noop.options(priority="high").enqueue_on_commit()
    assert Order.objects.filter(reference="kept").exists()  # the commit stands
    row = OutboxMessage.objects.get()
    assert row.message_id == handle.id and row.last_error
    assert "kept in the outbox" in caplog.text and handle.id in caplog.text
    with pytest.raises(Exception):  # noqa: B017 - Redis is still down: the row stays
        relay().publish_batch("default")
    assert OutboxMessage.objects.get().attempts == 1
    own_redis.start()
    assert relay().run_once() == 1 and not OutboxMessage.objects.exists()
    with running_worker(client):
        assert handle.record(timeout=10).id == handle.id
