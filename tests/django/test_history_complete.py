"""Task history is complete, or says it is not (docs/django.md, "Complete, or it says
so"): a writer that falls behind finds every event it has not read (the stream keeps
them beyond EVENTS_MAXLEN) and trims what it has read; events the hard cap trimmed
before it read them are counted exactly, logged at ERROR, shown in the admin and in
/metrics; a batch the database refuses is split and the refused event recorded as
unwritable while every other row is written. A real Redis and the test database
(SQLite, or PostgreSQL with BLITZQ_TEST_DB=postgres)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client as DjangoClient
from prometheus_client.parser import text_string_to_metric_families

from blitzq_django import conf, history
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.engine.core import events as ev
from blitzq_django.history import health
from blitzq_django.history.writer import GROUP, HistoryWriter, wait_caught_up
from blitzq_django.models import TaskRecord
from testproject.shop import tasks

from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "history-token"


@blitzq_task(name="tests.history.refused")
def refused_by_the_database(n: int = 0) -> None:
    pass


class Odd(Exception):
    pass


Odd.__qualname__ = "Odd\x00Error"  # PostgreSQL refuses NUL in text and in JSON


@blitzq_task(name="tests.history.odd", retries=0)
def raises_odd() -> None:
    raise Odd("a NUL in its class name")


@pytest.fixture
def small_streams(settings: Any, redis_url: str, namespace: str) -> Iterator[Client]:
    """EVENTS_MAXLEN 100: a writer that reads less often than every 100 events fell
    behind what used to be kept."""
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "QUEUES": ["default"],
                       "EVENTS_MAXLEN": 100, "METRICS_TOKEN": TOKEN}
    client = conf.get_client()
    yield client
    plain = redis.Redis.from_url(redis_url)
    keys = list(plain.scan_iter(match=client.broker.keys.all_keys_pattern(), count=1000))  # type: ignore[attr-defined]
    if keys:
        plain.delete(*keys)
    plain.close()


def writer(**options: Any) -> HistoryWriter:
    found = history.writer_for(conf.get_settings(), ["default"], **options)
    assert found is not None
    return found


def drain(w: HistoryWriter) -> None:
    assert wait_caught_up(w, 60), "the writer did not catch up"


def stream_length(client: Client, redis_url: str) -> int:
    plain = redis.Redis.from_url(redis_url)
    try:
        return int(plain.xlen(client.broker.keys.queue("default").events))  # type: ignore[attr-defined]
    finally:
        plain.close()


def redis7(client: Client) -> bool:
    """Whether the Redis keeps the stream counters that count lost events exactly."""
    version = client.broker.sync.client.info("server")["redis_version"]  # type: ignore[attr-defined]
    return int(version.split(".")[0]) >= 7


def history_page() -> str:
    user = User.objects.create_user(f"ops{User.objects.count()}", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_taskrecord"))
    web = DjangoClient()
    web.force_login(user)
    response = web.get("/admin/blitzq_django/taskrecord/")
    assert response.status_code == 200
    return response.content.decode()


def metrics() -> dict[tuple[str, str], float]:
    text = DjangoClient().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert text.status_code == 200, text
    return {(s.name, s.labels.get("queue", "")): s.value
            for family in text_string_to_metric_families(text.content.decode())
            for s in family.samples}


def test_a_writer_behind_finds_every_event_and_trims_what_it_has_read(
        small_streams: Client, redis_url: str) -> None:
    handles = tasks.noop.enqueue_many([() for _ in range(1500)])  # no writer reads yet
    assert stream_length(small_streams, redis_url) >= 1500  # kept beyond EVENTS_MAXLEN
    w = writer()
    drain(w)
    assert TaskRecord.objects.count() == 1500
    assert set(TaskRecord.objects.values_list("task_id", flat=True)) == {h.id for h in handles}
    # What the writer read is trimmed down to about EVENTS_MAXLEN (whole stream nodes).
    assert 100 <= stream_length(small_streams, redis_url) <= 300
    (found,) = health.read(small_streams, ["default"])
    assert found.complete and w.stats.lost == 0 and w.stats.gaps == 0
    assert found.unread == (0 if redis7(small_streams) else None)  # 6.2 cannot tell
    assert "is incomplete" not in history_page()
    numbers = metrics()
    assert numbers[("blitzq_history_events_lost_total", "default")] == 0
    assert numbers[("blitzq_history_event_gaps_total", "default")] == 0
    if redis7(small_streams):
        assert numbers[("blitzq_history_unread", "default")] == 0


def test_events_trimmed_before_the_writer_read_them_are_counted_logged_and_shown(
        small_streams: Client, settings: Any, redis_url: str, caplog: Any) -> None:
    settings.BLITZQ = {**settings.BLITZQ, "EVENTS_HARD_MAXLEN": 300}
    conf.reset()
    client = conf.get_client()
    first = tasks.noop.enqueue_many([() for _ in range(10)])
    w = writer()
    drain(w)  # the writer's group has read these: it is behind from here on
    later = tasks.noop.enqueue_many([() for _ in range(1000)])  # 1,000 events, cap 300
    with caplog.at_level(logging.ERROR, logger="blitzq.history"):
        drain(w)
    written = TaskRecord.objects.count()
    lost = 1010 - written  # one event per task: each task lost is one event lost
    assert 600 <= lost <= 710, lost  # the cap trims whole stream nodes (about 100 each)
    assert {h.id for h in first} <= set(TaskRecord.objects.values_list("task_id", flat=True))
    assert TaskRecord.objects.filter(task_id__in=[h.id for h in later]).count() == written - 10
    # Counted exactly (Redis 7), or found as one gap of a size Redis 6.2 cannot tell.
    counted, gaps, said = ((lost, 0, f"{lost} events were trimmed") if redis7(client) else
                           (0, 1, "1 run(s) of events Redis before 7 cannot count"))
    assert (w.stats.lost, w.stats.gaps) == (counted, gaps)
    (found,) = health.read(client, ["default"])
    assert (found.lost, found.gaps) == (counted, gaps) and not found.complete
    assert any(r.levelno == logging.ERROR and "trimmed from its events stream" in r.getMessage()
               for r in caplog.records)
    # Counted once: more rounds (and another writer) do not count them again.
    drain(writer())
    assert (health.read(client, ["default"])[0].lost, found.gaps) == (counted, gaps)
    page = history_page()
    assert "The task history of queue &#x27;default&#x27; is incomplete" in page
    assert said in page
    numbers = metrics()
    assert numbers[("blitzq_history_events_lost_total", "default")] == counted
    assert numbers[("blitzq_history_event_gaps_total", "default")] == gaps


@pytest.fixture
def refusing_database() -> Iterator[None]:
    """The database refuses every row of task tests.history.refused (a trigger)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE OR REPLACE FUNCTION blitzq_test_refuse() RETURNS trigger AS $$ "
                "BEGIN IF NEW.task_name = 'tests.history.refused' THEN "
                "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$ "
                "LANGUAGE plpgsql")
            cursor.execute("CREATE TRIGGER blitzq_test_refuse BEFORE INSERT OR UPDATE ON "
                           "blitzq_django_taskrecord FOR EACH ROW EXECUTE FUNCTION "
                           "blitzq_test_refuse()")
        else:
            cursor.execute("CREATE TRIGGER blitzq_test_refuse BEFORE INSERT ON "
                           "blitzq_django_taskrecord WHEN NEW.task_name = "
                           "'tests.history.refused' BEGIN SELECT RAISE(ABORT, "
                           "'refused by the test'); END")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS blitzq_test_refuse"
                           + (" ON blitzq_django_taskrecord"
                              if connection.vendor == "postgresql" else ""))


def test_a_batch_the_database_refuses_is_split_and_the_refused_events_recorded(
        blitzq_redis: Client, refusing_database: None, redis_url: str, caplog: Any) -> None:
    before = tasks.noop.enqueue_many([() for _ in range(300)])
    bad = refused_by_the_database.enqueue(1)
    key = blitzq_redis.broker.keys.queue("default").events  # type: ignore[attr-defined]
    plain = redis.Redis.from_url(redis_url)
    # A forged event whose time no datetime holds (year 146,140,482).
    plain.xadd(key, {"e": msgpack.packb([ev.ENQUEUED, "forged", "t.x", 2**62, None, None,
                                         None, None])})
    plain.close()
    after = tasks.noop.enqueue_many([() for _ in range(300)])
    w = writer()
    with caplog.at_level(logging.ERROR, logger="blitzq.history"):
        drain(w)
    ids = set(TaskRecord.objects.values_list("task_id", flat=True))
    assert ids == {h.id for h in before + after}  # every other row, none of the refused
    assert w.stats.unwritable == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(bad.id in text and "could not be written" in text for text in errors)
    assert any("forged" in text and "could not be written" in text for text in errors)
    (found,) = health.read(blitzq_redis, ["default"])
    assert found.unwritable == 2 and "forged" in found.unwritable_last
    assert blitzq_redis.read_events("default", GROUP, "writer", 10, pending=True) == []
    page = history_page()
    assert "2 events could not be written" in page


def test_an_exception_class_with_a_nul_in_its_name_is_written(blitzq_redis: Client) -> None:
    handle = raises_odd.enqueue()
    followers = tasks.noop.enqueue_many([() for _ in range(20)])
    with running_worker(), pytest.raises(Exception):  # noqa: B017 - the odd class itself
        handle.result(timeout=20)
    w = writer()
    drain(w)
    row = TaskRecord.objects.get(task_id=handle.id)
    assert row.state in ("failed", "dead_lettered")
    assert row.error_type == "Odd\ufffdError"
    assert row.timeline[-1][-1] == "Odd\ufffdError"
    assert TaskRecord.objects.filter(task_id__in=[h.id for h in followers]).count() == 20
    assert w.stats.unwritable == 0


def test_metrics_answer_after_a_forged_huge_duration(small_streams: Client,
                                                     redis_url: str) -> None:
    tasks.noop.enqueue()
    plain = redis.Redis.from_url(redis_url)
    key = small_streams.broker.keys.queue("default").events  # type: ignore[attr-defined]
    for _ in range(3):
        plain.xadd(key, {"e": msgpack.packb([ev.SUCCEEDED, "forged", "t.x", 1_700_000_000_000,
                                             1, "w", 2**63 - 1, None])})
    plain.close()
    numbers = metrics()
    assert numbers[("blitzq_tasks_succeeded_total", "default")] == 3
    assert numbers[("blitzq_task_duration_seconds_count", "default")] == 0
    assert metrics()[("blitzq_tasks_enqueued_total", "default")] == 1  # and again


def test_a_missing_table_is_not_a_refusal_of_the_events(blitzq_redis: Client) -> None:
    """The table renamed away (a project that has not migrated): the writer retries the
    batch whole, records nothing as unwritable, and writes it once the table is back."""
    handles = tasks.noop.enqueue_many([() for _ in range(50)])
    w = writer()
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {quote('blitzq_django_taskrecord')} RENAME TO "
                       f"{quote('blitzq_taskrecord_away')}")
    try:
        with pytest.raises(Exception, match=r"(?i)taskrecord"):
            w.step()
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {quote('blitzq_taskrecord_away')} RENAME TO "
                           f"{quote('blitzq_django_taskrecord')}")
    assert w.stats.unwritable == 0
    assert health.read(blitzq_redis, ["default"])[0].unwritable == 0
    w.held.clear()  # as the run loop does after an error: the batch is read again
    w._backlog.clear()
    drain(w)
    assert TaskRecord.objects.count() == len(handles)
