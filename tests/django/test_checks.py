"""The system checks added for duplicate task names (E020), the Redis server (E021, E022,
W005, W006, deploy) and database connections (W004 deploy, W007), and the id tables."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from blitzq_django import checks as blitzq_checks
from blitzq_django import conf, decorators
from blitzq_django.checks import (
    check_database_connections,
    check_redis_reachable,
    check_task_names,
    connection_budget,
    database_limit,
    judge_redis,
    persistent_connections,
    redis_version,
)
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import RedisBroker

from ..support.redis_server import RedisServer
from .conftest import running_worker

ROOT = Path(__file__).resolve().parents[2]


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


# -- the tables ------------------------------------------------------------------------------


def test_every_id_is_in_both_tables() -> None:
    """Each id the package can emit (checks, conf.problems, the django.tasks backend) is
    listed, with its meaning, in the docstring of checks.py and in
    docs/configuration.md; neither lists others."""
    emitted = set()
    for path in (ROOT / "blitzq_django").rglob("*.py"):
        source = path.read_text()
        emitted |= set(re.findall(r'id="(blitzq\.[EW]\d{3})"', source))
        emitted |= set(re.findall(r'Problem\("(blitzq\.[EW]\d{3})"', source))
    docstring = set(re.findall(r"^(blitzq\.[EW]\d{3}) ", blitzq_checks.__doc__ or "", re.M))
    doc = set(re.findall(r"^\| `(blitzq\.[EW]\d{3})` \|", (ROOT / "docs/configuration.md")
                         .read_text(), re.M))
    assert emitted == docstring == doc


# -- E020: duplicate task names --------------------------------------------------------------


@pytest.fixture
def task_name() -> Iterator[str]:
    name = f"tests.checks.dup_{uuid.uuid4().hex[:8]}"
    yield name
    decorators.duplicate_tasks[:] = [d for d in decorators.duplicate_tasks if d[0] != name]
    conf.registry._specs.pop(name, None)


def test_two_functions_under_one_name_are_reported_not_raised(task_name: str) -> None:
    @blitzq_task(name=task_name)
    def first() -> str:
        return "first"

    @blitzq_task(name=task_name)  # no exception here: Django must load to run the check
    def second() -> str:
        return "second"

    (error,) = check_task_names()
    assert error.id == "blitzq.E020" and error.hint
    assert task_name in error.msg and "first" in error.msg and "second" in error.msg
    assert conf.registry.get(task_name).func is first.spec.func  # the first one holds it
    with pytest.raises(ImproperlyConfigured, match=r"blitzq\.E020"):
        second.enqueue()
    assert second() == "second"  # a direct call is still the function


def test_decorating_the_same_function_again_is_no_duplicate(task_name: str) -> None:
    def task() -> None: ...

    blitzq_task(name=task_name)(task)
    blitzq_task(name=task_name)(task)  # a module reload does this
    assert check_task_names() == []


# Django 6.1's system checks query the database (JSONField support on SQLite).
@pytest.mark.django_db
def test_manage_py_check_reports_a_duplicate(task_name: str) -> None:
    @blitzq_task(name=task_name)
    def one() -> None: ...

    @blitzq_task(name=task_name)
    def two() -> None: ...

    with pytest.raises(SystemCheckError, match=r"blitzq\.E020"):
        call_command("check")


# -- the Redis server: pure judgement --------------------------------------------------------


@pytest.mark.parametrize(("version", "old"), [("6.0.16", True), ("5.0.7", True),
                                             ("6.2.0", False), ("7.0.15", False),
                                             ("255.255.255", False)])
def test_redis_older_than_6_2_is_an_error(version: str, old: bool) -> None:
    found = judge_redis({"redis_version": version, "maxmemory": 0}, "noeviction")
    assert ids(found) == (["blitzq.E021"] if old else [])


def test_a_version_that_cannot_be_parsed_is_not_judged() -> None:
    assert redis_version({"redis_version": "unstable"}) is None
    assert redis_version({"redis_version": "7.2.4"}) == (7, 2, 4)
    assert judge_redis({}, "noeviction") == []


@pytest.mark.parametrize(("policy", "maxmemory", "expected"), [
    ("noeviction", 1 << 30, []),
    ("allkeys-lru", 1 << 30, ["blitzq.E022"]),
    ("allkeys-random", 1 << 30, ["blitzq.E022"]),
    ("allkeys-lru", 0, ["blitzq.W005"]),  # not evicting yet: no maxmemory
    ("volatile-lru", 1 << 30, ["blitzq.W005"]),
    ("volatile-ttl", 0, ["blitzq.W005"]),
])
def test_eviction_policies(policy: str, maxmemory: int, expected: list[str]) -> None:
    found = judge_redis({"redis_version": "7.0.0", "maxmemory": maxmemory}, policy)
    assert ids(found) == expected
    assert all(m.hint and "noeviction" in m.hint for m in found)


def test_an_unreadable_policy_is_a_warning_not_a_crash() -> None:
    (warning,) = judge_redis({"redis_version": "7.0.0"}, None, "CONFIG GET failed: NOPERM")
    assert warning.id == "blitzq.W006" and "NOPERM" in warning.msg


# -- the Redis server: real round trips ------------------------------------------------------


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisServer]:
    """A server of this module's own: its configuration is changed."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def admin(own_redis: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=own_redis.port)
    yield client
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 0)
    client.close()


def test_deploy_check_reads_the_policy_of_the_apps_redis(settings: Any, own_redis: RedisServer,
                                                          admin: redis.Redis) -> None:
    settings.BLITZQ = {"REDIS_URL": own_redis.url}
    assert check_redis_reachable() == []
    admin.config_set("maxmemory", 1 << 30)
    admin.config_set("maxmemory-policy", "allkeys-lru")
    assert ids(check_redis_reachable()) == ["blitzq.E022"]
    admin.config_set("maxmemory-policy", "volatile-lfu")
    assert ids(check_redis_reachable()) == ["blitzq.W005"]


def test_the_version_comes_from_info(own_redis: RedisServer, admin: redis.Redis) -> None:
    broker = RedisBroker(own_redis.url)
    facts = broker.server_facts()
    broker.close()
    assert facts is not None
    info, policy, why = facts
    assert redis_version(info) == redis_version(admin.info("server"))
    assert (policy, why) == ("noeviction", "")


def test_config_refused_falls_back_to_info(settings: Any, own_redis: RedisServer,
                                           admin: redis.Redis) -> None:
    # A managed Redis refuses CONFIG: an ACL user without it, on a real server.
    admin.acl_setuser("noconfig", enabled=True, passwords=["+pw1"], keys=["*"],
                      channels=["*"], commands=["+@all", "-config"])
    admin.acl_setuser("noinfo", enabled=True, passwords=["+pw2"], keys=["*"],
                      channels=["*"], commands=["+@all", "-config", "-info"])
    admin.config_set("maxmemory", 1 << 30)
    admin.config_set("maxmemory-policy", "allkeys-lfu")
    try:
        settings.BLITZQ = {"REDIS_URL": f"redis://noconfig:pw1@127.0.0.1:{own_redis.port}/0"}
        assert ids(check_redis_reachable()) == ["blitzq.E022"]  # read from INFO memory
        settings.BLITZQ = {"REDIS_URL": f"redis://noinfo:pw2@127.0.0.1:{own_redis.port}/0"}
        (warning,) = check_redis_reachable()
        assert warning.id == "blitzq.W006" and "pw2" not in warning.msg
    finally:
        admin.acl_deluser("noconfig", "noinfo")


@blitzq_task
def multiply(a: int, b: int) -> int:
    return a * b


def test_a_django_redis_cache_alias_supplies_the_connection(settings: Any,
                                                            own_redis: RedisServer,
                                                            admin: redis.Redis) -> None:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "queue": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": own_redis.url},
    }
    settings.BLITZQ = {"CACHE_ALIAS": "queue", "NAMESPACE": namespace}
    # A real round trip through the alias's server ...
    handle = multiply.enqueue(6, 7)
    assert admin.keys(f"*{namespace}*")  # the message is on own_redis
    with running_worker():
        assert handle.result(timeout=10) == 42
    # ... and the deploy checks read that same server.
    assert check_redis_reachable() == []
    admin.config_set("maxmemory", 1 << 30)
    admin.config_set("maxmemory-policy", "allkeys-lru")
    assert ids(check_redis_reachable()) == ["blitzq.E022"]
    keys = admin.keys(f"*{namespace}*")
    if keys:
        admin.delete(*keys)


# -- database connections ------------------------------------------------------------------


def test_connection_budget_keeps_a_margin_for_the_web_server() -> None:
    assert connection_budget("default", 80, 100, 3) is None  # 80 + 9 <= 97
    warning = connection_budget("default", 90, 100, 3)  # 90 + 9 > 97
    assert warning is not None and warning.id == "blitzq.W004"
    assert "97" in warning.msg and "margin of 9" in warning.msg and warning.hint
    assert connection_budget("default", 16, 20) is not None  # a margin of at least 5
    assert connection_budget("default", 15, 20) is None


def test_worker_threads_count_threads_or_concurrency_times_processes(settings: Any) -> None:
    from blitzq_django.checks import worker_connections, worker_threads

    assert worker_threads({"THREADS": None, "CONCURRENCY": 50, "PROCESSES": 4}) == 200
    assert worker_threads({"THREADS": 8, "CONCURRENCY": 50, "PROCESSES": 4}) == 32
    merged = {"THREADS": None, "CONCURRENCY": 50, "PROCESSES": 4}
    assert worker_connections(merged, {})[0] == 200
    # Django's pool (PostgreSQL OPTIONS["pool"]) caps what each process holds.
    assert worker_connections(merged, {"OPTIONS": {"pool": True}})[0] == 16
    assert worker_connections(merged, {"OPTIONS": {"pool": {"min_size": 2,
                                                             "max_size": 10}}})[0] == 40


@pytest.mark.django_db
def test_deploy_check_reads_the_database_limit(settings: Any) -> None:
    limit = database_limit(connection)
    if connection.vendor != "postgresql":
        assert limit is None  # SQLite: no limit known, nothing checked
        settings.BLITZQ = {"THREADS": 10_000, "PROCESSES": 8}
        assert check_database_connections() == []
        return
    assert limit is not None
    most, _reserved = limit
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        assert most == int(cursor.fetchone()[0])
    settings.BLITZQ = {"THREADS": most, "PROCESSES": 1}
    (warning,) = check_database_connections()
    assert warning.id == "blitzq.W004" and str(most) in warning.msg
    settings.BLITZQ = {"THREADS": 2, "PROCESSES": 1}
    assert check_database_connections() == []


def test_persistent_connections_of_many_threads_are_a_warning() -> None:
    postgres = {"ENGINE": "django.db.backends.postgresql", "CONN_MAX_AGE": 60}
    (warning,) = persistent_connections(100, {"default": postgres})
    assert warning.id == "blitzq.W007" and "100" in warning.msg and warning.hint
    assert persistent_connections(99, {"default": postgres}) == []
    assert persistent_connections(500, {"default": {**postgres, "CONN_MAX_AGE": 0}}) == []
    assert persistent_connections(500, {"default": {**postgres, "CONN_MAX_AGE": None}})
    pooled = {**postgres, "OPTIONS": {"pool": True}}  # Django refuses CONN_MAX_AGE with it
    assert persistent_connections(500, {"default": pooled}) == []
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "CONN_MAX_AGE": 60}
    assert persistent_connections(500, {"default": sqlite}) == []


def test_the_default_settings_raise_no_connection_warning(settings: Any) -> None:
    settings.BLITZQ = {}
    assert blitzq_checks.check_persistent_connections() == []


def test_history_without_events_is_a_warning(settings: Any) -> None:
    from blitzq_django.checks import check_history_needs_events

    settings.BLITZQ = {"BROKER": "memory", "EVENTS": False}
    (warning,) = check_history_needs_events()
    assert warning.id == "blitzq.W008" and "EVENTS" in warning.msg and warning.hint
    settings.BLITZQ = {"BROKER": "memory", "EVENTS": False, "HISTORY": "off"}
    assert check_history_needs_events() == []
    settings.BLITZQ = {"BROKER": "memory"}
    assert check_history_needs_events() == []
