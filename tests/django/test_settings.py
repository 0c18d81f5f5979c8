"""settings.BLITZQ: validation (system checks, ImproperlyConfigured), laziness, Redis location."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from blitzq_django import conf
from blitzq_django.checks import check_redis_reachable, check_settings
from blitzq_django.engine import BrokerUnavailable, MemoryBroker, RedisBroker
from tests.support.redis_server import free_port


def ids(user: Any, **kw: Any) -> list[str]:
    return [p.id for p in conf.problems(user, **kw)]


def test_defaults_are_valid() -> None:
    assert conf.problems({}) == []


@pytest.mark.parametrize(("user", "expected_id", "named"), [
    ([("REDIS_URL", "x")], "blitzq.E001", "settings.BLITZQ"),
    ({"REDIS_ULR": "redis://x"}, "blitzq.E002", "REDIS_ULR"),
    ({"CONCURRENCY": "10"}, "blitzq.E003", "CONCURRENCY"),
    ({"STORE_RESULTS": 1}, "blitzq.E003", "STORE_RESULTS"),
    ({"RESULT_TTL": True}, "blitzq.E003", "RESULT_TTL"),
    ({"QUEUES": "default"}, "blitzq.E003", "QUEUES"),
    ({"CONCURRENCY": 0}, "blitzq.E004", "CONCURRENCY"),
    ({"BROKER": "rabbitmq"}, "blitzq.E004", "BROKER"),
    ({"QUEUES": ["a"], "DEFAULT_QUEUE": "b"}, "blitzq.E004", "DEFAULT_QUEUE"),
    ({"QUEUES": ["a{b}"], "DEFAULT_QUEUE": "a{b}"}, "blitzq.E004", "QUEUES"),
    ({"NAMESPACE": "my:ns"}, "blitzq.E004", "NAMESPACE"),
    ({"REDIS_URL": "http://localhost:6379"}, "blitzq.E005", "REDIS_URL"),
    ({"CACHE_ALIAS": "nope"}, "blitzq.E006", "CACHE_ALIAS"),
    # Numbers: type, range and finiteness, by the engine's rule (core.limits).
    ({"VISIBILITY_TIMEOUT": float("nan")}, "blitzq.E004", "VISIBILITY_TIMEOUT"),
    ({"VISIBILITY_TIMEOUT": float("inf")}, "blitzq.E004", "VISIBILITY_TIMEOUT"),
    ({"VISIBILITY_TIMEOUT": 0.5}, "blitzq.E004", "VISIBILITY_TIMEOUT"),
    ({"SHUTDOWN_TIMEOUT": float("nan")}, "blitzq.E004", "SHUTDOWN_TIMEOUT"),
    ({"TIME_LIMIT_GRACE": -1}, "blitzq.E004", "TIME_LIMIT_GRACE"),
    ({"RESULT_TTL": 10**17}, "blitzq.E004", "RESULT_TTL"),
    ({"IDEMPOTENCY_TTL": 10**17}, "blitzq.E004", "IDEMPOTENCY_TTL"),
    ({"DEAD_LETTER_MAX": 10**12}, "blitzq.E004", "DEAD_LETTER_MAX"),
    ({"CONCURRENCY": 10**9}, "blitzq.E004", "CONCURRENCY"),
    ({"MAX_RESULT_SIZE": 10}, "blitzq.E004", "MAX_RESULT_SIZE"),
    ({"MAX_RESULT_SIZE": "8MB"}, "blitzq.E003", "MAX_RESULT_SIZE"),
    ({"MAX_RESULT_SIZE": 2.0**20}, "blitzq.E003", "MAX_RESULT_SIZE"),
    ({"REDACT": "password"}, "blitzq.E003", "REDACT"),
    ({"REDACT": ["token", 3]}, "blitzq.E003", "REDACT"),
    ({"REDACT": [""]}, "blitzq.E003", "REDACT"),
    # URLs urlsplit() refuses: a check error, not a crash of manage.py check.
    ({"REDIS_URL": "redis://[::1"}, "blitzq.E005", "REDIS_URL"),
    ({"REDIS_URL": "redis://h:99999"}, "blitzq.E005", "REDIS_URL"),
    ({"REDIS_URL": "redis://h:port/0"}, "blitzq.E005", "REDIS_URL"),
    ({"REDIS_OPTIONS": {"socket_timout": 3}}, "blitzq.E008", "REDIS_OPTIONS"),
    ({"REDIS_OPTIONS": {1: 3}}, "blitzq.E008", "REDIS_OPTIONS"),
    ({"REDIS_OPTIONS": {"socket_timeout": float("nan")}}, "blitzq.E004", "socket_timeout"),
    ({"REDIS_OPTIONS": {"socket_timeout": 0.5}}, "blitzq.E004", "socket_timeout"),
    ({"REDIS_OPTIONS": {"socket_connect_timeout": float("inf")}}, "blitzq.E004",
     "socket_connect_timeout"),
    ({"ROUTES": {"reports.*": "bad:queue"}}, "blitzq.E010", "reports.*"),
    ({"ROUTES": {"": "q"}}, "blitzq.E010", "ROUTES"),
    ({"ROUTES": ["a"]}, "blitzq.E003", "ROUTES"),
    ({"QUEUE_CONCURRENCY": {"reports": 0}}, "blitzq.E011", "reports"),
    ({"QUEUE_CONCURRENCY": {"reports": float("nan")}}, "blitzq.E011", "reports"),
    ({"QUEUE_CONCURRENCY": {"a b": 1}}, "blitzq.E011", "a b"),
    ({"MODE": "turbo"}, "blitzq.E014", "turbo"),
    ({"MODE": 1}, "blitzq.E003", "MODE"),
    ({"QUEUE_MODES": {"default": "turbo"}}, "blitzq.E014", "turbo"),
    ({"QUEUE_MODES": {"bulk": "fast"}}, "blitzq.E014", "unknown queue 'bulk'"),
    ({"QUEUE_MODES": {"a b": "fast"}}, "blitzq.E014", "not a queue name"),
    ({"QUEUE_MODES": ["bulk"]}, "blitzq.E003", "QUEUE_MODES"),
    ({"EVENTS": 1}, "blitzq.E003", "EVENTS"),
    ({"EVENTS_MAXLEN": "100k"}, "blitzq.E003", "EVENTS_MAXLEN"),
    ({"EVENTS_MAXLEN": 0}, "blitzq.E004", "EVENTS_MAXLEN"),
    ({"EVENTS_MAXLEN": 10**12}, "blitzq.E004", "EVENTS_MAXLEN"),
    ({"REPLICA_WAIT": 1}, "blitzq.E003", "REPLICA_WAIT"),
    ({"REPLICA_WAIT": {"replicas": 1}}, "blitzq.E004", "'replicas' and 'timeout_ms'"),
    ({"REPLICA_WAIT": {"replicas": 0, "timeout_ms": 100}}, "blitzq.E004", "replicas"),
    ({"REPLICA_WAIT": {"replicas": 1, "timeout_ms": 0}}, "blitzq.E004", "timeout_ms"),
    ({"REPLICA_WAIT": {"replicas": 1, "timeout_ms": 1.5}}, "blitzq.E004", "timeout_ms"),
])
def test_each_problem_has_its_id_and_names_the_key(user: Any, expected_id: str,
                                                   named: str) -> None:
    found = conf.problems(user)
    assert [p.id for p in found] == [expected_id]
    assert named in found[0].message


def test_queue_modes_may_name_queues_and_routed_queues() -> None:
    assert conf.problems({"MODE": "fast", "QUEUES": ["default", "bulk"],
                          "ROUTES": {"reports.*": "slow"},
                          "QUEUE_MODES": {"bulk": "fast", "slow": "reliable"}}) == []


@pytest.mark.parametrize("broker", ["memory", "redis"])
def test_modes_reach_the_broker_producers_and_workers_share(broker: str) -> None:
    merged = {**conf.DEFAULTS, "BROKER": broker, "MODE": "fast",
              "QUEUES": ["default", "bulk"], "QUEUE_MODES": {"default": "reliable"}}
    client = conf.build_client(merged)  # no connection is opened here
    try:
        assert client.broker.mode_of("bulk") == "fast"
        assert client.broker.mode_of("default") == "reliable"
    finally:
        client.broker.close()


def test_replica_wait_reaches_the_broker() -> None:
    assert conf.problems({"REPLICA_WAIT": {"replicas": 2, "timeout_ms": 250}}) == []
    merged = {**conf.DEFAULTS, "REPLICA_WAIT": {"replicas": 2, "timeout_ms": 250}}
    client = conf.build_client(merged)  # no connection is opened here
    try:
        assert client.broker.replica_wait == (2, 250)
    finally:
        client.broker.close()
    client = conf.build_client(dict(conf.DEFAULTS))
    try:
        assert client.broker.replica_wait is None
    finally:
        client.broker.close()


def test_unknown_key_suggests_the_close_one() -> None:
    (problem,) = conf.problems({"redis_url": "redis://x"})
    assert problem.id == "blitzq.E002"
    assert "Did you mean 'REDIS_URL'?" in problem.hint


@pytest.mark.parametrize(("typo", "meant"), [
    ("CONCURENCY", "CONCURRENCY"), ("VISIBILTY_TIMEOUT", "VISIBILITY_TIMEOUT"),
    ("RESULTS_TTL", "RESULT_TTL"), ("QUEUE", "QUEUES"), ("namespac", "NAMESPACE")])
def test_a_misspelt_key_gets_the_closest_key_only(typo: str, meant: str) -> None:
    (problem,) = conf.problems({typo: 1})
    assert problem.hint == f"Did you mean {meant!r}?"  # not the list of every key


def test_a_key_like_no_other_gets_the_list() -> None:
    (problem,) = conf.problems({"XYZZY": 1})
    assert problem.hint.startswith("Known keys: BROKER, CACHE_ALIAS, ")


def test_cache_alias_must_be_a_redis_cache() -> None:
    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert ids({"CACHE_ALIAS": "default"}, caches=caches) == ["blitzq.E006"]


def test_manage_py_check_reports_errors_with_ids(settings: Any) -> None:
    settings.BLITZQ = {"CONCURRENCY": "ten", "NOT_A_KEY": 1}
    messages = check_settings()
    assert {m.id for m in messages} == {"blitzq.E002", "blitzq.E003"}
    assert all(isinstance(m, checks.Error) and m.hint for m in messages)
    with pytest.raises(SystemCheckError) as info:
        call_command("check", "--tag", "blitzq")
    assert "blitzq.E003" in str(info.value) and "CONCURRENCY" in str(info.value)


# Django 6.1's system checks query the database (JSONField support on SQLite).
@pytest.mark.django_db
def test_check_passes_on_the_testproject() -> None:
    call_command("check")  # raises SystemCheckError on any error


def test_bad_settings_raise_improperly_configured_naming_the_key(settings: Any) -> None:
    settings.BLITZQ = {"VISIBILITY_TIMEOUT": "1 minute"}
    with pytest.raises(ImproperlyConfigured, match=r"BLITZQ\['VISIBILITY_TIMEOUT'\]"):
        conf.get_client()


def test_settings_are_read_lazily_and_follow_override_settings(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "NAMESPACE": "one"}
    first = conf.get_client()
    assert conf.get_client() is first  # cached
    assert isinstance(first.broker, MemoryBroker)
    with override_settings(BLITZQ={"REDIS_URL": "redis://example.invalid:1/0",
                                   "NAMESPACE": "two"}):
        second = conf.get_client()
        assert isinstance(second.broker, RedisBroker)
        assert second.broker.keys.namespace == "two"
    assert conf.get_client() is not second


def test_redis_url_may_be_a_callable_and_defaults_to_the_environment(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.BLITZQ = {"REDIS_URL": lambda: "redis://from-callable:6379/3"}
    assert conf.get_client().broker.url == "redis://from-callable:6379/3"
    monkeypatch.setenv("REDIS_URL", "redis://from-env:6379/4")
    settings.BLITZQ = {}
    assert conf.get_client().broker.url == "redis://from-env:6379/4"


def test_cache_alias_uses_the_django_redis_location_and_password(settings: Any) -> None:
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "redis": {"BACKEND": "django_redis.cache.RedisCache",
                  "LOCATION": ["redis://cache-host:6380/2", "redis://replica:6380/2"],
                  "OPTIONS": {"PASSWORD": "pw", "CONNECTION_POOL_KWARGS": {"max_connections": 7}}},
    }
    settings.BLITZQ = {"CACHE_ALIAS": "redis", "REDIS_OPTIONS": {"socket_timeout": 3}}
    broker = conf.get_client().broker
    assert broker.url == "redis://cache-host:6380/2"
    assert broker._options == {"password": "pw", "max_connections": 7, "socket_timeout": 3}


def _unreachable(settings: Any) -> str:
    port = free_port()  # nothing listens there
    settings.BLITZQ = {"REDIS_URL": f"redis://user:s3cret-pw@127.0.0.1:{port}/0"}
    return f"127.0.0.1:{port}"


def test_unreachable_redis_is_a_clear_error_without_the_password(settings: Any) -> None:
    where = _unreachable(settings)
    with pytest.raises(BrokerUnavailable) as info:
        conf.check_connection()
    assert where in str(info.value) and "s3cret-pw" not in str(info.value)


def test_deploy_check_pings_redis(settings: Any) -> None:
    where = _unreachable(settings)
    (error,) = check_redis_reachable()
    assert error.id == "blitzq.E007"
    assert where in error.msg and "s3cret-pw" not in error.msg


# Django 6.1's system checks query the database (JSONField support on SQLite).
@pytest.mark.django_db
def test_deploy_check_is_not_run_by_default(settings: Any) -> None:
    _unreachable(settings)
    registered = checks.registry.registry.get_checks(include_deployment_checks=False)
    assert check_redis_reachable not in registered
    call_command("check")  # no network: passes although Redis is unreachable


def test_deploy_check_passes_with_a_reachable_redis(blitzq_redis: Any) -> None:
    assert check_redis_reachable() == []


def test_memory_broker_is_flagged_in_deploy_checks(blitzq_memory: Any) -> None:
    assert [m.id for m in check_redis_reachable()] == ["blitzq.W003"]


def test_cache_alias_round_trip_on_a_real_redis(settings: Any, redis_url: str,
                                                namespace: str) -> None:
    from testproject.shop import tasks

    from .conftest import running_worker

    settings.CACHES = {**settings.CACHES, "queue": {"BACKEND": "django_redis.cache.RedisCache",
                                                     "LOCATION": redis_url}}
    settings.BLITZQ = {"CACHE_ALIAS": "queue", "NAMESPACE": namespace}
    conf.check_connection()
    handle = tasks.fetch_exchange_rate.enqueue("GBP")
    try:
        with running_worker():
            assert handle.result(timeout=10) == 0.85
    finally:
        import redis

        plain = redis.Redis.from_url(redis_url)
        keys = list(plain.scan_iter(match=conf.get_client().broker.keys.all_keys_pattern()))
        if keys:
            plain.delete(*keys)
        plain.close()


def test_redis_options_typo_suggests_the_option() -> None:
    (problem,) = conf.problems({"REDIS_OPTIONS": {"socket_timout": 3}})
    assert "'socket_timout'" in problem.message
    assert problem.hint == "Did you mean 'socket_timeout'?"


def test_redis_options_accepts_what_redis_py_accepts() -> None:
    options = {"socket_timeout": 3, "max_connections": 10, "ssl_cert_reqs": "required",
               "ssl_ca_certs": "/ca.pem", "ssl_min_version": None, "decode_responses": False,
               "health_check_interval": 10, "username": "u", "password": "p",
               "client_name": "w", "retry_on_timeout": True, "socket_keepalive": True,
               "single_connection_client": False, "protocol": 3}
    assert conf.problems({"REDIS_OPTIONS": options}) == []


def test_unparsable_redis_url_does_not_crash_manage_py_check(settings: Any) -> None:
    settings.BLITZQ = {"REDIS_URL": "redis://user:s3cret@[::1"}
    (error,) = check_settings()
    assert error.id == "blitzq.E005" and "Invalid IPv6 URL" in error.msg
    assert "s3cret" not in error.msg
    with pytest.raises(SystemCheckError, match=r"blitzq\.E005"):
        call_command("check", "--tag", "blitzq")
    # urlsplit quotes the netloc in this message: it must not reach the check.
    (problem,) = conf.problems({"REDIS_URL": "redis://u:p\uff03w-s3cret@h/0"})
    assert problem.id == "blitzq.E005" and "s3cret" not in problem.message


def test_a_callable_url_resolving_to_an_unparsable_one_is_improperly_configured(
        settings: Any) -> None:
    settings.BLITZQ = {"REDIS_URL": lambda: "redis://:pw@h:99999/0"}
    with pytest.raises(ImproperlyConfigured, match=r"blitzq\.E005") as info:
        conf.get_client()
    assert "Port out of range" in str(info.value) and "pw@" not in str(info.value)


def test_nan_visibility_timeout_is_refused_by_get_client(settings: Any) -> None:
    settings.BLITZQ = {"VISIBILITY_TIMEOUT": float("nan")}
    with pytest.raises(ImproperlyConfigured, match=r"VISIBILITY_TIMEOUT.*finite"):
        conf.get_client()


def test_max_result_size_reaches_the_client(settings: Any) -> None:
    assert conf.DEFAULTS["MAX_RESULT_SIZE"] == 8 * 1024 * 1024
    settings.BLITZQ = {"BROKER": "memory", "MAX_RESULT_SIZE": 4096}
    assert conf.get_client().max_result_size == 4096


def test_events_settings_reach_the_broker(settings: Any) -> None:
    assert (conf.DEFAULTS["EVENTS"], conf.DEFAULTS["EVENTS_MAXLEN"]) == (True, 100_000)
    settings.BLITZQ = {"BROKER": "memory"}
    assert conf.get_client().broker.events_maxlen == 100_000
    settings.BLITZQ = {"BROKER": "memory", "EVENTS_MAXLEN": 500}
    assert conf.get_client().broker.events_maxlen == 500
    settings.BLITZQ = {"EVENTS": False, "EVENTS_MAXLEN": 500}
    broker = conf.get_client().broker
    assert isinstance(broker, RedisBroker) and broker.events_maxlen == 0


def test_redact_names_follow_the_settings(settings: Any) -> None:
    assert "password" in conf.redact_names()  # the default list
    settings.BLITZQ = {"REDACT": ["iban"]}
    assert conf.redact_names() == ("iban",)


def test_routes_and_queue_concurrency_reach_the_client_and_runworker(settings: Any) -> None:
    from blitzq_django.management.commands.runworker import Command

    settings.BLITZQ = {"BROKER": "memory", "ROUTES": {"reports.*": "slow"},
                       "QUEUE_CONCURRENCY": {"slow": 2}}
    assert conf.get_client().route("reports.monthly") == "slow"
    assert "slow" in Command()._queues([], conf.get_settings(), conf.get_client())
