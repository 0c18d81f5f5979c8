"""Sentinel and Cluster in the settings and checks (issue 21): the URLs E005 takes and
refuses, the REDIS_OPTIONS that only they take, a django-redis Sentinel cache as
CACHE_ALIAS, and the deploy checks of the topology (E024, W012, W013) on real servers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from blitzq_django import conf
from blitzq_django.checks import check_redis_reachable, judge_topology
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine.brokers.redis import topology

from .conftest import running_worker


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


@pytest.mark.parametrize("url", [
    "redis+sentinel://:pw@h1:26379,h2:26379/mymaster/0",
    "rediss+sentinel://h1:26379/mymaster",
    "redis+cluster://:pw@h1:7000,h2:7001,h3:7002",
    "rediss+cluster://h1:7000",
])
def test_sentinel_and_cluster_urls_pass_the_checks(url: str) -> None:
    assert conf.problems({"REDIS_URL": url}) == []


@pytest.mark.parametrize("url", [
    "redis+sentinel://:s3cret@h1:26379,h2:26379",  # no service
    "redis+cluster://:s3cret@h1:7000/3",  # a cluster has db 0 only
    "redis+cluster://:s3cret@h1:70000",
    "redis+sentinal://:s3cret@h1:26379/mymaster",
])
def test_bad_sentinel_and_cluster_urls_are_e005_without_the_password(url: str) -> None:
    (problem,) = conf.problems({"REDIS_URL": url})
    assert problem.id == "blitzq.E005" and "s3cret" not in problem.message


def test_sentinel_and_cluster_options_are_known() -> None:
    assert conf.problems({"REDIS_OPTIONS": {"sentinel_kwargs": {"password": "x"},
                                            "min_other_sentinels": 1,
                                            "cluster_error_retry_attempts": 3}}) == []
    (problem,) = conf.problems({"REDIS_OPTIONS": {"sentinel_kwarg": {}}})
    assert problem.id == "blitzq.E008" and "sentinel_kwargs" in problem.hint


# -- the topology's deploy checks: pure ------------------------------------------------------


def test_a_cluster_not_ok_is_an_error() -> None:
    found = judge_topology({"kind": "cluster", "cluster_state": "fail", "masters": 3,
                            "masters_without_replica": [], "min_replicas_to_write": 1})
    assert ids(found) == ["blitzq.E024"]


def test_a_master_without_replica_is_a_warning() -> None:
    found = judge_topology({"kind": "cluster", "cluster_state": "ok", "masters": 3,
                            "masters_without_replica": ["h:1"], "min_replicas_to_write": 1})
    assert ids(found) == ["blitzq.W012"] and "h:1" in found[0].msg
    assert ids(judge_topology({"kind": "sentinel", "replicas": 0,
                               "min_replicas_to_write": 0})) == ["blitzq.W012"]


def test_writes_without_a_replica_are_advised_against() -> None:
    for facts in ({"kind": "cluster", "cluster_state": "ok", "masters": 3,
                   "masters_without_replica": [], "min_replicas_to_write": 0},
                  {"kind": "sentinel", "replicas": 2, "min_replicas_to_write": 0}):
        assert ids(judge_topology(facts)) == ["blitzq.W013"]
        assert judge_topology({**facts, "min_replicas_to_write": 1}) == []
    # refused CONFIG GET: nothing is claimed
    assert judge_topology({"kind": "sentinel", "replicas": 2,
                           "min_replicas_to_write": None}) == []


# -- on real servers ------------------------------------------------------------------------------


@pytest.fixture
def namespace() -> Iterator[str]:
    yield f"t{uuid.uuid4().hex[:10]}"


def _set_min_replicas(client: Any, value: int, cluster: bool) -> None:
    if cluster:
        for node in client.get_primaries():
            client.config_set("min-replicas-to-write", value, target_nodes=node)
    else:
        client.config_set("min-replicas-to-write", value)


@pytest.mark.parametrize("kind", ["cluster", "sentinel"])
def test_deploy_checks_read_the_topology(settings: Any, kind: str, namespace: str,
                                         request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(f"{kind}_url")
    settings.BLITZQ = {"REDIS_URL": url, "NAMESPACE": namespace}
    admin = topology.sync_client(url, {})
    try:
        found = check_redis_reachable()
        assert ids(found) == ["blitzq.W013"], [m.msg for m in found]  # the default: 0
        _set_min_replicas(admin, 1, kind == "cluster")
        assert check_redis_reachable() == []
    finally:
        _set_min_replicas(admin, 0, kind == "cluster")
        admin.close()
        conf.get_client().broker.close()


@blitzq_task
def multiply(a: int, b: int) -> int:
    return a * b


def test_a_django_redis_sentinel_cache_alias_supplies_the_connection(
        settings: Any, sentinel_url: str, namespace: str) -> None:
    target = topology.parse(sentinel_url)
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "queue": {"BACKEND": "django_redis.cache.RedisCache",
                  "LOCATION": f"redis://{target.service}/0",
                  "OPTIONS": {"CLIENT_CLASS": "django_redis.client.SentinelClient",
                              "SENTINELS": list(target.hosts),
                              "CONNECTION_FACTORY":
                                  "django_redis.pool.SentinelConnectionFactory",
                              "CONNECTION_POOL_CLASS":
                                  "redis.sentinel.SentinelConnectionPool"}},
    }
    settings.BLITZQ = {"CACHE_ALIAS": "queue", "NAMESPACE": namespace}
    broker = conf.get_client().broker
    assert topology.kind_of(broker.url) == topology.SENTINEL
    from django.core.cache import caches  # lazy: cost (the cache alias set just above)

    caches["queue"].set(f"{namespace}-probe", 1)  # the cache itself works there too
    handle = multiply.enqueue(6, 7)
    with running_worker():
        assert handle.result(timeout=10) == 42
    master = topology.sync_client(sentinel_url, {})
    try:
        assert master.get(f":1:{namespace}-probe") is not None
        for key in list(master.scan_iter(match=f"*{namespace}*")):
            master.delete(key)
    finally:
        master.close()
        broker.close()
