"""The engine CLI's worker (``python -m blitzq_django.engine worker``): its banner, and
failures logged with their traceback, in text or JSON (docs/observability.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blitzq_django.engine import Client

from . import cli_app

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.engine.cli_app:make_client"


@pytest.fixture
def client(redis_url: str, namespace: str, redis_client: Any) -> Iterator[Client]:
    client = cli_app.make_client(redis_url, namespace)
    yield client
    client.broker.close()
    keys = list(redis_client.scan_iter(match=client.broker.keys.all_keys_pattern()))
    if keys:
        redis_client.delete(*keys)


def run_worker(redis_url: str, namespace: str, *args: str) -> str:
    env = {**os.environ, "REDIS_URL": redis_url, "BLITZQ_NAMESPACE": namespace,
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "blitzq_django.engine", "worker", APP,
                           "--burst", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_failures_and_banner_as_json(client: Client, redis_url: str, namespace: str) -> None:
    message_id = client.enqueue(client.registry.get("cli.flaky"), (3,)).id
    err = run_worker(redis_url, namespace, "--log-format", "json", "--concurrency", "3")
    lines = [json.loads(line) for line in err.splitlines()]  # every line is JSON
    (banner,) = [line for line in lines if " starting\n" in line["message"]]
    assert banner["queues"] == ["default"] and banner["tasks"] == 1
    assert banner["redis"] == redis_url and banner["concurrency"] == 3
    assert banner["mode"] == "reliable"
    warning, error = [line for line in lines if line["logger"] == "blitzq.task"]
    assert (warning["level"], error["level"]) == ("WARNING", "ERROR")
    assert warning["task_id"] == error["task_id"] == message_id
    assert (warning["attempt"], error["attempt"], error["max_attempts"]) == (1, 2, 2)
    assert "in flaky" in warning["exc_info"]
    assert "ArithmeticError: no sum for 3" in error["exc_info"]


def test_failures_and_banner_as_text(client: Client, redis_url: str, namespace: str) -> None:
    client.enqueue(client.registry.get("cli.flaky"), (4,))
    err = run_worker(redis_url, namespace)
    assert " starting\n  queues:      default\n  tasks:       1 registered" in err
    assert f"  redis:       {redis_url}\n" in err
    assert " WARNING blitzq.task " in err and " ERROR blitzq.task " in err
    assert err.count("Traceback (most recent call last)") == 2
