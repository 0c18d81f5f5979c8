"""Fixtures for the Django layer: settings pointing at a MemoryBroker or a real Redis,
and a worker running in a thread of the test process.

DJANGO_SETTINGS_MODULE=testproject.settings comes from pytest.ini.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from blitzq_django import conf
from blitzq_django.db_connections import close_old_connections_if_opened
from blitzq_django.engine import Client, Worker


@pytest.fixture(autouse=True)
def _fresh_blitzq() -> Iterator[None]:
    """No client survives from one test to the next."""
    conf.reset()
    yield
    conf.reset()


@pytest.fixture
def blitzq_memory(settings: Any) -> Client:
    settings.BLITZQ = {"BROKER": "memory", "QUEUES": ["default"]}
    return conf.get_client()


@pytest.fixture
def blitzq_redis(settings: Any, redis_url: str, namespace: str) -> Iterator[Client]:
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "QUEUES": ["default"]}
    client = conf.get_client()
    yield client
    plain = redis.Redis.from_url(redis_url)
    pattern = client.broker.keys.all_keys_pattern()  # type: ignore[attr-defined]
    keys = list(plain.scan_iter(match=pattern, count=1000))
    if keys:
        plain.delete(*keys)
    plain.close()


@pytest.fixture(params=["memory", "redis"])
def blitzq_client(request: pytest.FixtureRequest) -> Client:
    """Each round-trip test runs on both brokers."""
    return request.getfixturevalue(f"blitzq_{request.param}")


@contextmanager
def running_worker(client: Client | None = None, **options: Any) -> Iterator[Worker]:
    """A worker on its own thread and event loop, as runworker builds it; stopped on exit."""
    options.setdefault("concurrency", 8)
    worker = Worker(client or conf.get_client(), around_sync_call=[close_old_connections_if_opened],
                    **options)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["stats"] = asyncio.run(worker.run(close_broker=True))
        except BaseException as exc:  # surfaced in the test thread below
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="blitzq-test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()  # safe even if run() has not started yet
        thread.join(timeout=20)
        assert not thread.is_alive(), "worker did not stop"
    if "error" in outcome:
        raise outcome["error"]


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def manage() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start the project's manage.py commands; whatever still runs at teardown is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT,
                                env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
