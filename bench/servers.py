"""A throwaway redis-server for the benchmarks that start their own (REDIS_URL wins)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis() -> tuple[str, subprocess.Popen[bytes] | None]:
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"], None
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("no redis-server on PATH; set REDIS_URL")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", tempfile.mkdtemp()],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return f"redis://127.0.0.1:{port}/0", proc
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
