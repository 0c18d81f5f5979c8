"""Task functions for tests/engine/test_process_executor.py: a child process imports them
by name, so they live at the top level of an importable module (registered per test)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path


def mark(path: str, text: str) -> None:
    """Write ``path`` atomically: whoever sees it sees all of it."""
    Path(f"{path}.tmp").write_text(text)
    os.replace(f"{path}.tmp", path)


def pid_and_sum(n: int) -> list[int]:
    return [os.getpid(), sum(range(n))]


def fail(message: str) -> None:
    raise ValueError(message)


class Unpicklable(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()  # cannot be pickled


def fail_unpicklably(message: str) -> None:
    raise Unpicklable(message)


def hang(marker: str) -> None:
    """Mark that it started (with its pid), then block until killed."""
    mark(marker, str(os.getpid()))
    threading.Event().wait()


def die(how: str) -> None:
    if how == "exit":
        os._exit(7)
    os.kill(os.getpid(), signal.SIGKILL)


def meet(folder: str, expected: int, limit: float = 10.0) -> int:
    """Check in, then wait (bounded) until ``expected`` calls checked in: it returns
    only if that many calls ran at the same time. Returns its pid."""
    pid = os.getpid()
    mark(os.path.join(folder, str(pid)), "")
    deadline = time.monotonic() + limit
    while len(met := [n for n in os.listdir(folder) if n.isdigit()]) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(met)} of {expected} met")
        time.sleep(0.005)  # (noqa: sleep) the poll step of a deadline-bounded wait
    return pid


def wait_for(started: str, go: str, limit: float = 20.0) -> int:
    """Mark that it started, then wait (bounded) for ``go`` to exist."""
    mark(started, str(os.getpid()))
    deadline = time.monotonic() + limit
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise TimeoutError("never told to go")
        time.sleep(0.005)  # (noqa: sleep) the poll step of a deadline-bounded wait
    return os.getpid()
