"""Database connections around `def` tasks, at no cost for tasks that never open one.

Django's ``close_old_connections`` walks every configured alias through an
``asgiref.local.Local`` (about 8 µs a call, twice a task). A thread that never
connected has nothing to close, and a thread can hold a connection only once
``connection_created`` fired in it: so the hook asks a plain thread-local flag
first, and walks the aliases only in threads that connected since they last had
none open. Correctness is Django's own: the same ``close_old_connections`` runs
wherever a connection exists (CONN_MAX_AGE, broken connections, CONN_HEALTH_CHECKS).
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import close_old_connections, connections
from django.db.backends.signals import connection_created

_opened = threading.local()


def _on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    _opened.any = True


connection_created.connect(_on_connection_created, dispatch_uid="blitzq-connection-opened")


def close_old_connections_if_opened() -> None:
    """``close_old_connections()`` in a thread that opened a connection; else nothing."""
    if getattr(_opened, "any", False):
        close_old_connections()
        # Still open (persistent connections): keep checking them around every task.
        _opened.any = any(conn.connection is not None
                          for conn in connections.all(initialized_only=True))
