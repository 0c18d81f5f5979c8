"""/metrics and the JSON stats (docs/metrics.md): counters folded from the events streams
into Redis, right with two workers and two scrapers; token and staff auth; the text
format parsed by prometheus_client's own parser."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client as DjangoClient
from prometheus_client.parser import text_string_to_metric_families

from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.engine import metrics as engine_metrics
from testproject.shop.tasks import noop, validate_card
from tests.support.migrated import migrated_sqlite, sqlite_env
from tests.support.waiting import wait_until

from .conftest import running_worker

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "s3cret-token"


@pytest.fixture
def blitzq(settings: Any, blitzq_redis: Client) -> Client:
    settings.BLITZQ = {**settings.BLITZQ, "METRICS_TOKEN": TOKEN}
    return blitzq_redis


def scrape(path: str = "/metrics", **headers: Any) -> Any:
    return DjangoClient().get(path, HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **headers)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def test_counters_with_two_workers_and_scrapes_in_between(blitzq: Client) -> None:
    ok, bad = 40, 3
    handles = []
    with ExitStack() as stack:
        workers = [stack.enter_context(running_worker(blitzq, concurrency=4))
                   for _ in range(2)]
        wait_until(lambda: len(blitzq.workers()) == 2, timeout=10, message="two workers")
        gauges = samples(scrape().content.decode())
        assert value(gauges, "blitzq_workers") == 2
        for i in range(ok):
            handles.append(noop.enqueue())
            if i == ok // 2:
                scrape()  # a fold part-way: nothing is counted twice
        failing = [validate_card.options(retries=1).enqueue("4242424242424242")
                   for _ in range(bad)]
        for handle in handles:
            handle.record(timeout=20)
        for handle in failing:
            # One read per look: the record can change (or be absent) between two.
            wait_until(lambda h=handle: getattr(blitzq.inspect(h.id), "state", None)
                       == "dead_lettered", timeout=20, message="dead-lettered")
        by_worker = {h.record().worker for h in handles}
        assert len(by_worker) == 2, "both workers ran tasks"
        assert all(w.stats.succeeded for w in workers)  # type: ignore[attr-defined]
    response = scrape()
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    found = samples(response.content.decode())
    counter = {kind: value(found, f"blitzq_tasks_{kind}_total", queue="default")
               for kind in engine_metrics.COUNTED}
    assert counter["enqueued"] == ok + bad
    assert counter["succeeded"] == ok
    assert counter["retried"] == bad
    assert counter["dead_lettered"] == bad
    assert counter["started"] == ok + 2 * bad
    assert counter["failed"] == counter["cancelled"] == counter["expired"] == 0
    duration = value(found, "blitzq_task_duration_seconds_count", queue="default")
    assert duration >= ok + bad  # every success and retry; dead letters after a run
    assert value(found, "blitzq_task_duration_seconds_bucket", queue="default",
                 le="+Inf") == duration
    latency = value(found, "blitzq_queue_latency_seconds_count", queue="default")
    assert latency == ok + bad  # the first start of every message enqueued
    for name in ("ready", "in_flight", "scheduled"):
        assert value(found, f"blitzq_queue_{name}", queue="default") == 0
    assert value(found, "blitzq_queue_dead_letters", queue="default") == bad
    # A second scrape counts nothing again.
    again = samples(scrape().content.decode())
    assert value(again, "blitzq_tasks_succeeded_total", queue="default") == ok


def test_counters_with_worker_processes(blitzq: Client, tmp_path: Any, redis_url: str,
                                       namespace: str) -> None:
    """manage.py runworker --processes 2, children recycled every 40 messages: the
    counters are the sum over every process that ran, scraped before and after."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    handles = noop.enqueue_many([() for _ in range(200)])
    assert value(samples(scrape().content.decode()), "blitzq_tasks_enqueued_total",
                 queue="default") == 200
    env = sqlite_env({**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
                      "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                      "BLITZQ_SQLITE": str(migrated_sqlite(tmp_path / "db.sqlite3")),
                      "PYTHONPATH": str(root)})
    done = subprocess.run(
        [sys.executable, str(root / "manage.py"), "runworker", "--burst", "--processes", "2",
         "--max-tasks-per-child", "40", "--queues", "default", "--concurrency", "10"],
        cwd=root, env=env, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    assert len({h.record(timeout=1).worker for h in handles}) >= 2  # several processes
    found = samples(scrape().content.decode())
    for kind, expected in (("enqueued", 200), ("started", 200), ("succeeded", 200),
                           ("failed", 0), ("recovered", 0)):
        assert value(found, f"blitzq_tasks_{kind}_total", queue="default") == expected, kind
    assert value(found, "blitzq_task_duration_seconds_count", queue="default") == 200
    assert value(found, "blitzq_queue_latency_seconds_count", queue="default") == 200


def test_scrapers_in_parallel_count_each_event_once(blitzq: Client) -> None:
    n = 300
    noop.enqueue_many([((), {}) for _ in range(n)])
    errors: list[BaseException] = []

    def fold() -> None:
        try:
            for _ in range(5):
                engine_metrics.fold(blitzq, "default")
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=fold) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    # A folder may have skipped while another held the lease: one more fold finishes.
    folded = engine_metrics.collect(blitzq, "default")
    assert folded.counters["enqueued"] == n


def test_token_and_staff_auth(blitzq: Client) -> None:
    model = get_user_model()
    assert DjangoClient().get("/metrics").status_code == 401
    assert DjangoClient().get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert DjangoClient().get("/blitzq/stats.json").status_code == 401
    someone = DjangoClient()
    someone.force_login(model.objects.create_user("someone", password="pw"))
    assert someone.get("/metrics").status_code == 401
    boss = model.objects.create_user("boss", password="pw", is_staff=True)
    staff = DjangoClient()
    staff.force_login(boss)
    # staff without the admin's permission to see the queues: refused
    assert staff.get("/metrics").status_code == 401
    assert staff.get("/blitzq/stats.json").status_code == 401
    boss.user_permissions.add(Permission.objects.get(
        content_type__app_label="blitzq_django", codename="view_queueoverview"))
    staff.force_login(model.objects.get(pk=boss.pk))  # no cached permissions
    assert staff.get("/metrics").status_code == 200
    assert staff.get("/blitzq/stats.json").status_code == 200
    root = DjangoClient()
    root.force_login(model.objects.create_superuser("root", password="pw"))
    assert root.get("/metrics").status_code == 200
    assert scrape().status_code == 200


def test_without_a_token_only_staff_who_may_see_the_queues(
        settings: Any, blitzq_redis: Client) -> None:
    assert settings.BLITZQ.get("METRICS_TOKEN") is None
    assert DjangoClient().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403
    staff = DjangoClient()
    staff.force_login(get_user_model().objects.create_user("boss", password="pw",
                                                           is_staff=True))
    refused = staff.get("/metrics")
    assert refused.status_code == 403
    assert b"view_queueoverview" in refused.content


def test_json_stats(blitzq: Client) -> None:
    for _ in range(3):
        noop.enqueue()
    numbers = scrape("/blitzq/stats.json").json()
    default = numbers["queues"]["default"]
    assert default["counters"]["enqueued"] == 3
    assert default["gauges"]["ready"] == 3
    assert numbers["workers"] == 0
    assert set(default["duration"]) == {"count", "sum_ms", "buckets_ms"}


@blitzq_task(name="tests.metrics.give_up", dead_letter=False)
def give_up() -> None:
    """Fails for good at once, and is not kept as a dead letter."""
    raise RuntimeError("no")


def test_failed_means_one_thing_on_the_dashboard_and_in_prometheus(blitzq: Client) -> None:
    """validate_card: retried once, then dead-lettered; give_up: failed. Each figure of
    the dashboard is the Prometheus counter of the same name, and "failed" counts the
    message that failed for good only."""
    viewer = get_user_model().objects.create_user("ops", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(
        content_type__app_label="blitzq_django", codename="view_queueoverview"))
    web = DjangoClient()
    web.force_login(viewer)
    web.get("/admin/blitzq_django/queueoverview/dashboard/data/")  # follows the queue now
    validate_card.enqueue("4000-0000-0000-0002")
    give_up.enqueue()
    with running_worker(blitzq):
        wait_until(lambda: blitzq.queue_stats("default").dead_letters == 1
                   and blitzq.queue_stats("default").in_flight == 0
                   and blitzq.queue_stats("default").ready == 0
                   and blitzq.queue_stats("default").scheduled == 0,
                   timeout=20, message="both settled")
    wanted = {"retried": 1, "failed": 1, "dead_lettered": 1}

    def dashboard() -> dict[str, int]:
        totals = web.get("/admin/blitzq_django/queueoverview/dashboard/data/").json()["totals"]
        return {kind: totals[kind] for kind in wanted}

    wait_until(lambda: dashboard() == wanted, timeout=5, message=f"the dashboard: {wanted}")
    text = scrape().content.decode()
    found = samples(text)
    for kind, count in wanted.items():
        assert value(found, f"blitzq_tasks_{kind}_total", queue="default") == count, kind
    assert ("# HELP blitzq_tasks_failed_total Messages that failed for good and were not "
            "kept as dead letters") in text
