"""executor="process" in Django: each child runs django.setup(), so a process task sees
the settings and the ORM; the decorator refuses what a child cannot run."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from blitzq_django import conf
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client, Worker
from blitzq_django.serving import pool

from ..support.waiting import wait_until
from . import process_tasks


@pytest.mark.django_db(transaction=True)
def test_a_process_task_uses_the_settings_and_the_orm(blitzq_redis: Client) -> None:
    handle = process_tasks.orm_in_child.enqueue("made-in-a-child")
    options = {**pool.process_pool_options(conf.get_settings()), "processes": 1,
               "process_initializer": process_tasks.setup_child,
               "process_initargs": (os.environ.get("DJANGO_SETTINGS_MODULE"),
                                    str(connection.settings_dict["NAME"]))}
    worker = Worker(blitzq_redis, block_timeout=0.05, shutdown_timeout=5, **options)
    thread = threading.Thread(target=lambda: asyncio.run(worker.run(close_broker=True)),
                              daemon=True)
    thread.start()
    try:
        record = wait_until(lambda: (r := blitzq_redis.inspect(handle.id)) is not None
                            and r.is_final and r, 30, message="the process task to end")
    finally:
        worker.stop()
        thread.join(20)
    assert not thread.is_alive()
    assert record.state == "succeeded", (record.error_type, record.error_message)
    result: dict[str, Any] = record.result
    assert result["pid"] != os.getpid() and result["apps_ready"] is True
    assert result["settings"] == "testproject.settings"
    assert result["root_urlconf"] == "testproject.urls" and result["users"] == 1
    assert User.objects.filter(username="made-in-a-child").exists()  # the same database


def test_the_pool_settings_reach_the_worker(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "PROCESS_POOL_SIZE": 3,
                       "PROCESS_MAX_TASKS_PER_CHILD": 50}
    options = pool.process_pool_options(conf.get_settings())
    worker = Worker(conf.get_client(), **options)
    assert worker.processes.size == 3 and worker.processes.max_tasks_per_child == 50
    assert not worker.processes.started  # nothing starts before the first process task


@pytest.mark.parametrize(("value", "said"), [
    (0, "E004"), (True, "E003"), ("2", "E003"), (2.0, "E003"), (2000, "E004")])
def test_bad_pool_settings_are_reported(value: Any, said: str) -> None:
    for key in ("PROCESS_POOL_SIZE", "PROCESS_MAX_TASKS_PER_CHILD"):
        if key == "PROCESS_MAX_TASKS_PER_CHILD" and value == 2000:
            continue  # within its range
        found = [p for p in conf.problems({key: value}) if p.key == key]
        assert [p.id for p in found] == [f"blitzq.{said}"], found
    assert conf.problems({"PROCESS_POOL_SIZE": None, "PROCESS_MAX_TASKS_PER_CHILD": 1}) == []


def test_the_decorator_refuses_what_a_child_cannot_run() -> None:
    def local() -> None:
        return None

    with pytest.raises(ImproperlyConfigured, match=r"executor=.process..*closure"):
        blitzq_task(executor="process", name="t.local")(local)
    with pytest.raises(ImproperlyConfigured, match="executor must be one of"):
        blitzq_task(executor="processes", name="t.bad")(process_tasks.setup_child)
    with pytest.raises(ImproperlyConfigured, match=r"effectively_once.*executor=.process."):
        blitzq_task(executor="process", effectively_once=True,
                    name="t.once")(process_tasks.setup_child)
