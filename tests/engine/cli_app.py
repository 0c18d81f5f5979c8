"""The app of tests/engine/test_cli_logs.py: ``python -m blitzq_django.engine worker
tests.engine.cli_app:make_client`` (REDIS_URL, BLITZQ_NAMESPACE from the environment)."""

from __future__ import annotations

import os

from blitzq_django.engine import Client, RedisBroker


def make_client(url: str | None = None, namespace: str | None = None) -> Client:
    client = Client(RedisBroker(url or os.environ["REDIS_URL"],
                                namespace=namespace or os.environ["BLITZQ_NAMESPACE"]))

    @client.task(name="cli.flaky", retries=1, initial_delay=0)
    def flaky(n: int) -> None:
        raise ArithmeticError(f"no sum for {n}")

    return client
