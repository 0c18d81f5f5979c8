"""No black holes (blitzq_django/queues.py): a default runworker serves every queue the
project names or Redis has seen written to, from any process; enqueue refuses a queue no
default worker serves; the listings show every queue that holds messages and flag those
no live worker serves; arguments are bound at enqueue on every Django path."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import transaction
from django.test import Client as DjangoClient

from blitzq_django import conf
from blitzq_django.engine import CallOptions, Client, RedisBroker
from blitzq_django.engine.errors import ConfigurationError
from testproject.shop import tasks
from tests.support.migrated import migrated_sqlite, sqlite_env
from tests.support.waiting import wait_until

from .conftest import running_worker

ROOT = Path(__file__).resolve().parents[2]


def another_process(client: Client, queue: str, count: int = 1) -> None:
    """Enqueue ``noop`` to ``queue`` as a process whose settings name it would: a bare
    engine client on the same namespace (no queue check), its own connections."""
    broker = client.broker
    other = Client(RedisBroker(broker.url, namespace=broker.keys.namespace))  # type: ignore[attr-defined]
    try:
        other.enqueue_many(tasks.noop.spec, [((), {})] * count, CallOptions(queue=queue))
    finally:
        other.broker.close()


# -- enqueue refuses a queue no default worker serves ---------------------------------------


def test_enqueue_refuses_a_queue_no_default_worker_serves(blitzq_memory: Client) -> None:
    with pytest.raises(ConfigurationError) as refused:
        tasks.noop.options(queue="defualt").enqueue()
    said = str(refused.value)
    assert said.startswith("queue 'defualt' is not served by a worker started without "
                           "--queues, which serves default")
    assert "Did you mean 'default'?" in said
    assert "add it to BLITZQ['QUEUES']" in said
    with pytest.raises(ConfigurationError, match="queue 'defualt' is not served"):
        tasks.noop.options(queue="defualt").enqueue_many([()] * 3)
    assert blitzq_memory.queue_stats("defualt").ready == 0
    assert "defualt" not in blitzq_memory.seen_queues()


@pytest.mark.django_db(transaction=True)
def test_on_commit_and_durable_enqueues_refuse_it_at_the_call(blitzq_memory: Client) -> None:
    from blitzq_django.models import OutboxMessage

    with transaction.atomic():
        with pytest.raises(ConfigurationError, match="queue 'defualt' is not served"):
            tasks.noop.options(queue="defualt").enqueue_on_commit()
        with pytest.raises(ConfigurationError, match="queue 'defualt' is not served"):
            tasks.noop.options(queue="defualt", durable=True).enqueue()
    assert OutboxMessage.objects.count() == 0
    assert blitzq_memory.queue_stats("defualt").ready == 0


def test_queues_the_project_names_are_accepted(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "QUEUES": ["default", "bulk"],
                       "ROUTES": {"nothing.*": "routed"},
                       "PERIODIC": {"nightly": {"task": tasks.noop.name, "every": 3600,
                                                "queue": "nightly"}}}
    for queue in ("bulk", "routed", "nightly"):
        assert tasks.noop.options(queue=queue).enqueue().queue == queue


def test_a_task_without_a_queue_names_none_of_its_own(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from blitzq_django import queues

    # Only this task (without queue=) is registered, and nothing declared a queue (other
    # tests' tasks and django.tasks functions leave theirs in the process-wide sets).
    registry = conf.DjangoRegistry()
    registry.add(tasks.noop.spec)
    monkeypatch.setattr(queues, "registry", registry)
    monkeypatch.setattr(queues, "declared_queues", set())
    settings.BLITZQ = {"BROKER": "memory", "QUEUES": ["bench"], "DEFAULT_QUEUE": "bench"}
    assert tasks.noop.enqueue().queue == "bench"
    assert "default" not in queues.named()  # runworker serves, and lists, no "default"
    with pytest.raises(ConfigurationError, match="queue 'default' is not served"):
        tasks.noop.options(queue="default").enqueue()


# -- django.tasks ----------------------------------------------------------------------------


def test_a_django_tasks_queue_any_name_allows_is_accepted_with_one_warning(
        settings: Any, blitzq_redis: Client, caplog: Any) -> None:
    pytest.importorskip("blitzq_django.backend", exc_type=ImportError)
    try:
        from testproject.shop import dtasks
    except ImportError:
        pytest.skip("needs django.tasks: Django 6, or the django-tasks backport")
    settings.TASKS = {"default": {"BACKEND": "blitzq_django.backend.BlitzQBackend",
                                  "QUEUES": []}}
    caplog.set_level(logging.WARNING, logger="blitzq.queues")
    first = dtasks.add.using(queue_name="adhoc-any").enqueue(1, 2)
    dtasks.add.using(queue_name="adhoc-any").enqueue(3, 4)
    warned = [r for r in caplog.records if r.name == "blitzq.queues"]
    assert len(warned) == 1 and "queue 'adhoc-any' is named by no setting" in \
        warned[0].getMessage()
    assert blitzq_redis.queue_stats("adhoc-any").ready == 2
    assert "adhoc-any" in blitzq_redis.seen_queues()  # a runworker started now serves it
    assert first.status.name == "READY"


def test_django_tasks_arguments_are_bound_at_enqueue(settings: Any,
                                                     blitzq_redis: Client) -> None:
    try:
        from testproject.shop import dtasks
    except ImportError:
        pytest.skip("needs django.tasks: Django 6, or the django-tasks backport")
    settings.TASKS = {"default": {"BACKEND": "blitzq_django.backend.BlitzQBackend"}}
    with pytest.raises(TypeError, match=r"add\(\) missing 1 required positional argument: "
                                        r"'b'.*task 'testproject.shop.dtasks.add'"):
        dtasks.add.enqueue(1)
    with pytest.raises(TypeError, match=r"add\(\) got an unexpected keyword argument 'c'"):
        dtasks.add.enqueue(1, 2, c=3)
    # takes_context: the context is the worker's to pass, the caller gives the rest.
    dtasks.describe_attempt.enqueue("sub")
    with pytest.raises(TypeError, match=r"describe_attempt\(\) takes 1 positional argument "
                                        r"but 2 were given"):
        dtasks.describe_attempt.enqueue("sub", "extra")
    assert blitzq_redis.queue_stats().ready == 1


# -- arguments bound at enqueue, on every Django path ---------------------------------------


@pytest.mark.django_db(transaction=True)
def test_arguments_are_bound_on_every_enqueue_path(blitzq_memory: Client) -> None:
    from blitzq_django.models import OutboxMessage

    bad = ("ref-1", 100, "extra")
    said = r"create_order\(\) takes 2 positional arguments but 3 were given"
    with pytest.raises(TypeError, match=said):
        tasks.create_order.enqueue(*bad)
    with pytest.raises(TypeError, match=said):
        tasks.create_order.enqueue_many([("ok", 1), bad])
    with pytest.raises(TypeError, match="unexpected keyword argument 'amount'"):
        tasks.create_order.enqueue("ref", amount=1)
    with transaction.atomic():
        with pytest.raises(TypeError, match=said):  # at the call, not at the commit
            tasks.create_order.enqueue_on_commit(*bad)
        with pytest.raises(TypeError, match=said):
            tasks.create_order.options(durable=True).enqueue(*bad)
    assert OutboxMessage.objects.count() == 0
    assert blitzq_memory.queue_stats().ready == 0
    tasks.create_order.enqueue("ref", amount_cents=1)
    assert blitzq_memory.queue_stats().ready == 1


# -- the listings ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_every_listing_shows_a_queue_only_redis_has_seen_and_flags_it(
        settings: Any, blitzq_redis: Client) -> None:
    pytest.importorskip("prometheus_client")
    settings.BLITZQ = {**settings.BLITZQ, "METRICS_TOKEN": "t0ken"}
    another_process(blitzq_redis, "reports-elsewhere", count=2)

    out = io.StringIO()
    call_command("blitzq", "stats", "--json", stdout=out, stderr=io.StringIO())
    stats = {q["queue"]: q for q in json.loads(out.getvalue())["queues"]}
    assert stats["reports-elsewhere"]["ready"] == 2
    assert stats["reports-elsewhere"]["workers"] == 0

    user = User.objects.create_user("ops", password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename="view_queueoverview"))
    web = DjangoClient()
    web.force_login(user)
    html = web.get("/admin/blitzq_django/queueoverview/").content.decode()
    row = html.split('<tr data-queue="reports-elsewhere">', 1)[1].split("</tr>", 1)[0]
    assert "no live worker: its messages wait" in row

    data = web.get("/admin/blitzq_django/queueoverview/dashboard/data/").json()
    assert data["queues"]["reports-elsewhere"]["ready"] == 2
    assert data["queues"]["reports-elsewhere"]["unserved"] is True
    assert data["queues"]["default"]["unserved"] is False  # nothing waits there

    metrics = DjangoClient().get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken")
    text = metrics.content.decode()
    assert 'blitzq_queue_ready{queue="reports-elsewhere"} 2.0' in text
    assert 'blitzq_queue_unserved{queue="reports-elsewhere"} 1.0' in text
    assert 'blitzq_queue_workers{queue="reports-elsewhere"} 0.0' in text

    from blitzq_django.checks import check_queues_served

    (warning,) = check_queues_served()
    assert warning.id == "blitzq.W009" and "'reports-elsewhere' holds 2 messages" in \
        warning.msg


def test_a_default_runworker_watch_reports_queues_written_after_it_started(
        blitzq_redis: Client, caplog: Any) -> None:
    from blitzq_django import queues

    watch = queues.Watch(blitzq_redis, queues.served_by_default())
    assert watch.look() == []
    caplog.set_level(logging.WARNING, logger="blitzq.queues")
    another_process(blitzq_redis, "late")
    assert watch.look() == ["late"]
    assert watch.look() == []  # said once
    (record,) = [r for r in caplog.records if r.name == "blitzq.queues"]
    assert "queue 'late' has messages written to it and this worker does not serve it" in \
        record.getMessage()


# -- processes: a producer, then a default runworker ----------------------------------------


@pytest.fixture
def sqlite(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    db = migrated_sqlite(tmp_path / "db.sqlite3")
    return sqlite_env({**os.environ, "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                       "BLITZQ_SQLITE": str(db), "PYTHONPATH": str(ROOT),
                       "DJANGO_DEBUG": "0"})


PRODUCER = r"""
import django
django.setup()
from testproject.shop import tasks
tasks.noop.options(queue="reports").enqueue()
try:
    from testproject.shop import dtasks
except ImportError:  # neither django.tasks nor the backport
    tasks.noop.options(queue="reports").enqueue()
else:
    dtasks.add.using(queue_name="adhoc").enqueue(20, 22)
"""


def test_a_default_runworker_serves_queues_another_process_enqueued_to(
        blitzq_redis: Client, sqlite: dict[str, str]) -> None:
    # The producer's settings name "reports" and its django.tasks backend takes any queue
    # name ("adhoc"); the worker's settings name neither, and it never imported the
    # module of the django.tasks function. Served all the same: Redis keeps the queues.
    producer = subprocess.run([sys.executable, "-c", PRODUCER], cwd=ROOT, text=True,
                              capture_output=True, timeout=120,
                              env={**sqlite, "DJANGO_SETTINGS_MODULE":
                                   "tests.django.producer_settings"})
    assert producer.returncode == 0, producer.stderr
    worker = subprocess.run([sys.executable, str(ROOT / "manage.py"), "runworker", "--burst",
                             "--concurrency", "4"], cwd=ROOT, text=True, capture_output=True,
                            timeout=120, env={**sqlite, "DJANGO_SETTINGS_MODULE":
                                              "tests.django.tasks_settings"})
    assert worker.returncode == 0, worker.stderr
    assert "succeeded 2" in worker.stdout, (worker.stdout, worker.stderr)
    for queue in ("reports", "adhoc"):
        stats = blitzq_redis.queue_stats(queue)
        assert (stats.ready, stats.dead_letters) == (0, 0), queue


def test_runworker_queues_warns_about_a_name_nothing_uses(blitzq_redis: Client,
                                                          sqlite: dict[str, str]) -> None:
    another_process(blitzq_redis, "seen-elsewhere")
    worker = subprocess.run([sys.executable, str(ROOT / "manage.py"), "runworker", "--burst",
                             "--queues", "default,seen-elsewhere,reprots"], cwd=ROOT,
                            text=True, capture_output=True, timeout=120,
                            env={**sqlite, "DJANGO_SETTINGS_MODULE": "testproject.settings"})
    assert worker.returncode == 0, worker.stderr
    assert ("queue 'reprots' is named by no setting and no task, and no message was ever "
            "written to it: a typo?") in worker.stderr
    for known in ("seen-elsewhere", "default"):  # seen, named: no warning
        assert f"queue {known!r} is named by no setting" not in worker.stderr
    assert "succeeded 1" in worker.stdout


# -- first run: tables, Redis ------------------------------------------------------------------


COMMANDS = [("runworker", "--burst"), ("runscheduler",), ("runhistory",),
            ("runoutbox", "--once")]


def test_without_migrate_check_says_so_and_the_commands_refuse_to_start(
        tmp_path: Path, redis_url: str, namespace: str) -> None:
    env = sqlite_env({**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
                      "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
                      "BLITZQ_SQLITE": str(tmp_path / "never-migrated.sqlite3"),
                      "PYTHONPATH": str(ROOT), "DJANGO_DEBUG": "0"})
    manage = [sys.executable, str(ROOT / "manage.py")]
    check = subprocess.run([*manage, "check"], cwd=ROOT, env=env, text=True,
                           capture_output=True, timeout=120)
    said = check.stdout + check.stderr
    assert "blitzq.W011" in said and "run manage.py migrate" in said
    assert "blitzq_django_taskrecord" in said
    for command in COMMANDS:
        ran = subprocess.run([*manage, *command], cwd=ROOT, env=env, text=True,
                             capture_output=True, timeout=120)
        assert ran.returncode == 1, (command, ran.stderr)
        assert f"{command[0]} cannot start: blitzq's tables are missing" in ran.stderr
        assert "run manage.py migrate" in ran.stderr
    env["BLITZQ_SQLITE"] = str(migrated_sqlite(tmp_path / "migrated.sqlite3"))
    check = subprocess.run([*manage, "check"], cwd=ROOT, env=env, text=True,
                           capture_output=True, timeout=120)
    assert check.returncode == 0 and "blitzq.W011" not in check.stdout + check.stderr


def test_check_says_when_the_default_redis_is_in_use(settings: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from blitzq_django.checks import check_namespace, check_redis_configured

    monkeypatch.delenv("REDIS_URL", raising=False)
    settings.BLITZQ = {"QUEUES": ["default"]}
    (info,) = check_redis_configured()
    assert info.id == "blitzq.I001" and "redis://localhost:6379/0" in info.msg
    (deploy,) = check_namespace()
    assert deploy.id == "blitzq.W010"
    assert "'blitzq'" in deploy.msg and "no Redis is configured" in deploy.msg
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:6379/0")
    conf.reset()
    assert check_redis_configured() == []
    (deploy,) = check_namespace()
    assert "no Redis is configured" not in deploy.msg  # still the shared namespace
    settings.BLITZQ = {"QUEUES": ["default"], "NAMESPACE": "shop"}
    assert check_namespace() == []


def test_a_queue_only_a_running_worker_serves_is_accepted(blitzq_redis: Client) -> None:
    """``runworker --queues bulk`` with "bulk" named nowhere: accepted while it runs (the
    demo's queue of its own), refused once no live worker serves it."""
    with pytest.raises(ConfigurationError, match="no running worker serves it"):
        tasks.noop.options(queue="own-queue").enqueue()
    with running_worker(blitzq_redis, queues=["own-queue"]):
        wait_until(lambda: any("own-queue" in w.queues for w in blitzq_redis.workers()),
                   message="the worker's heartbeat lists its queue")
        handle = tasks.noop.options(queue="own-queue").enqueue()
        assert handle.result(timeout=10) is None
