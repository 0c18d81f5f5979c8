"""blitzq_django.embedded: one Redis per project, shared by the project's processes
(docs/quickstart.md runs it end to end: tests/docs/test_snippets.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from blitzq_django import embedded
from tests.support.snippets import stop_pid


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / embedded.FOLDER
    yield where
    stop_pid(where / "redis.pid")


def test_redis_url_is_the_environment_s_when_set(monkeypatch: pytest.MonkeyPatch,
                                                 folder: Path) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://example.invalid:6379/3")
    assert embedded.redis_url() == "redis://example.invalid:6379/3"
    assert not folder.exists()  # nothing started


def test_one_server_per_folder_shared_by_processes(folder: Path) -> None:
    url = embedded.ensure_server(folder)
    client = redis.Redis.from_url(url)
    try:
        client.set("k", "from the first process")
        # Another process (a worker, a shell) finds the same server instead of starting one.
        code = ("import sys; from pathlib import Path; from blitzq_django import embedded; "
                "print(embedded.ensure_server(Path(sys.argv[1])))")
        other = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True,
                               text=True, timeout=60, check=True).stdout.strip()
        assert other == url
        assert client.get("k") == b"from the first process"
        assert client.config_get("appendonly") == {"appendonly": "yes"}
    finally:
        client.close()


def test_a_stopped_server_is_started_again(folder: Path) -> None:
    first = embedded.ensure_server(folder)
    stop_pid(folder / "redis.pid")
    assert not embedded.answers(int(first.rsplit(":", 1)[1].split("/")[0]))
    client = redis.Redis.from_url(embedded.ensure_server(folder))
    try:
        assert client.ping()
    finally:
        client.close()
