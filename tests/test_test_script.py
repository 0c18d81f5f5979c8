"""scripts/test.py's choice of what each pass runs (the script itself is stdlib only)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def script() -> ModuleType:
    path = ROOT / "scripts" / "test.py"
    spec = importlib.util.spec_from_file_location("blitzq_test_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_the_django6_pass_runs_the_django_and_the_browser_tests() -> None:
    s = script()
    assert s.django_args([], s.DJANGO6_DIRS) == ["tests/django", "tests/browser"]
    assert s.django_args(["-x"], s.DJANGO6_DIRS) == ["tests/django", "tests/browser", "-x"]
    # "tests" or ".": all of both; a path inside one: that path only
    assert s.django_args(["tests"], s.DJANGO6_DIRS) == ["tests/django", "tests/browser"]
    chosen = "tests/browser/test_admin_layout.py"
    assert s.django_args([chosen, "-k", "bar"], s.DJANGO6_DIRS) == [chosen, "-k", "bar"]
    # nothing of theirs named: no pass
    assert s.django_args(["tests/engine"], s.DJANGO6_DIRS) is None


def test_the_postgresql_pass_runs_the_django_tests_only() -> None:
    s = script()
    assert s.django_args([]) == ["tests/django"]
    assert s.django_args(["tests"]) == ["tests/django"]
    assert s.django_args(["tests/browser"]) is None


def test_the_main_pass_leaves_the_django_tests_to_both_passes_beside_it() -> None:
    s = script()
    started = [object.__new__(s.PytestBeside), object.__new__(s.PytestBeside)]
    skipped = [started[0], s.Step(s.DJ6_PASS, "SKIP", 0, "no Python 3.12+")]
    assert s.main_args([], started) == ["--ignore=tests/django"]
    assert s.main_args(["-x"], started) == ["--ignore=tests/django", "-x"]
    # one of them skipped: the main pass runs them on SQLite itself
    assert s.main_args(["-x"], skipped) == ["-x"]
    # a path named: every pass runs what it names
    assert s.main_args(["tests/django/test_checks.py"], started) == \
        ["tests/django/test_checks.py"]


def test_the_main_pass_leaves_the_fault_tests_to_their_own_pass() -> None:
    s = script()
    started = [object.__new__(s.PytestBeside), object.__new__(s.PytestBeside)]
    fault = [object.__new__(s.PytestBeside), object.__new__(s.PytestBeside)]
    assert s.main_args(["-x"], started, fault) == \
        ["--ignore=tests/django", "--ignore=tests/fault", "--ignore=tests/docs", "-x"]
    assert s.main_args([], [], fault) == ["--ignore=tests/fault", "--ignore=tests/docs"]
    assert s.main_args([], [], []) == []
    # a path named: the main pass runs it, and the fault and docs passes do not start
    assert s.main_args(["tests/fault/test_soak.py"], started, fault) == \
        ["tests/fault/test_soak.py"]
    assert [p.status for p in s.start_fault_passes(["tests/fault/test_soak.py"], {})] == \
        ["SKIP", "SKIP"]


def test_every_pass_but_the_fault_tests_runs_niced() -> None:
    s = script()
    probe = ["-c", "import os; print(os.nice(0))"]
    fault = s.ScriptBeside("probe", Path(sys.prefix), probe, dict(os.environ))
    assert fault.proc.wait(10) == 0
    fault.output.seek(0)
    # (19 at most: this test may itself run in a niced pass)
    assert fault.output.read().strip() == str(min(19, os.nice(0) + s.BACKGROUND_NICE))
    fault.output.close()
    assert s.priority(True) is s.lowered
    assert s.priority(False) is None  # the fault tests' pass (niced=False)


def test_the_topology_pass_runs_the_marked_engine_tests_only() -> None:
    s = script()
    up = s.Step("cluster + sentinel", "PASS", 1.0)
    options = s.parse([])[0]
    # nothing of tests/engine named: no pass
    skipped = s.start_topology_pass(["tests/django"], options, up, {})
    assert (skipped.status, skipped.detail) == ("SKIP", "the pytest arguments select no "
                                                "engine tests")
    assert s.start_topology_pass([], s.parse(["--no-topology"])[0], up, {}).status == "SKIP"
    # the servers did not start: the pass fails, saying why
    down = s.Step("cluster + sentinel", "FAIL", 1.0, "port in use")
    failed = s.start_topology_pass([], options, down, {})
    assert (failed.status, failed.detail) == ("FAIL", "no cluster and Sentinel: port in use")


def test_the_cluster_and_sentinel_set_serve_every_pass_and_are_torn_down() -> None:
    s = script()
    topologies = s.Topologies()
    step = topologies.start()
    try:
        if step.status == "SKIP":
            pytest.skip(step.detail)  # no redis-server on PATH
        assert step.status == "PASS", step.detail
        cluster, sentinels = topologies.running
        module = topologies.module
        # Still up once start() has returned (they once died with the thread that
        # started them), and handed to the passes through the environment.
        cluster.wait_healthy(30)
        sentinels.wait_healthy(30)
        assert s.os.environ[module.CLUSTER_URL_ENV] == cluster.url
        assert s.os.environ[module.SENTINEL_URL_ENV] == sentinels.url()
    finally:
        topologies.stop()
    for topology in (cluster, sentinels):
        assert not any(node.alive for node in topology.nodes)
        assert not topology.root.exists()
    assert module.CLUSTER_URL_ENV not in s.os.environ
