"""BLITZQ["RATE_LIMITS"] and @blitzq_task(rate_limit=, rate_key=): bad input named early."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from blitzq_django import conf
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine.core.rates import Rate


@pytest.fixture(autouse=True)
def _forget_tasks() -> Iterator[None]:
    """The registry is the process's: the tasks defined here leave it afterwards."""
    before = {spec.name for spec in conf.registry}
    yield
    for spec in list(conf.registry):
        if spec.name not in before:
            conf.registry._specs.pop(spec.name)


def problems(user: Any) -> list[tuple[str, str, str]]:
    return [(p.id, p.key, p.message) for p in conf.problems(user)]


def test_rate_limits_default_to_none_and_reach_the_client(settings: Any) -> None:
    assert conf.DEFAULTS["RATE_LIMITS"] == {}
    settings.BLITZQ = {"BROKER": "memory", "RATE_LIMITS": {"stripe": "25/s", "geo": "600/m"}}
    assert conf.problems() == []
    assert conf.get_client().rate_limits == {"stripe": Rate(25, 1), "geo": Rate(600, 60)}


@pytest.mark.parametrize(("buckets", "named"), [
    ({"stripe": "10/x"}, "'10/x'"),
    ({"stripe": "0/s"}, "'0/s'"),
    ({"stripe": "-1/s"}, "'-1/s'"),
    ({"stripe": "nan/s"}, "'nan/s'"),
    ({"stripe": 10}, "int 10"),
    ({"stripe": None}, "NoneType None"),
    ({"a b": "1/s"}, "'a b'"),
    ({"": "1/s"}, "''"),
    ({3: "1/s"}, "3"),
])
def test_bad_rate_limits_are_a_check_error_naming_the_value(buckets: dict[Any, Any],
                                                            named: str) -> None:
    (found,) = problems({"RATE_LIMITS": buckets})
    assert found[:2] == ("blitzq.E009", "RATE_LIMITS")
    assert "BLITZQ['RATE_LIMITS']" in found[2] and named in found[2]


def test_rate_limits_of_the_wrong_type() -> None:
    (found,) = problems({"RATE_LIMITS": "10/s"})
    assert found[:2] == ("blitzq.E003", "RATE_LIMITS")


def test_a_bad_rate_limit_fails_at_decoration_naming_task_and_value() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"bad_rate: task .*bad_rate.*'10/x'"):
        @blitzq_task(rate_limit="10/x")
        def bad_rate() -> None: ...


def test_rate_options_are_accepted(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "RATE_LIMITS": {"known": "5/s"}}

    @blitzq_task(name="tests.rated", rate_limit="10/s")
    def rated() -> None: ...

    @blitzq_task(name="tests.keyed", rate_key="known")
    def keyed() -> None: ...

    @blitzq_task(name="tests.own", rate_key="anything", rate_limit="1/m")
    def own() -> None: ...

    assert conf.registry.get("tests.rated").rate_limit == Rate(10, 1)
    assert conf.registry.get("tests.keyed").rate_key == "known"
    assert conf.registry.get("tests.own").rate_limit == Rate(1, 60)


def test_a_rate_key_naming_a_missing_bucket_fails_at_decoration(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory", "RATE_LIMITS": {"known": "5/s"}}
    with pytest.raises(ImproperlyConfigured, match=r"rate_key 'missing' names no bucket of "
                                                   r"BLITZQ\['RATE_LIMITS'\] \(known: 'known'\)"):
        @blitzq_task(name="tests.missing", rate_key="missing")
        def missing() -> None: ...
    assert "tests.missing" not in conf.registry
