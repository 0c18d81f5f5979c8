"""How a worker process and its supervisor (``--processes N``, engine/supervisor.py) talk.

A terminal's Ctrl-C sends SIGINT to every process of the foreground process group,
``timeout -s TERM`` signals the command and then its group, and systemd's default
``KillMode=control-group`` signals every process of the service: a supervised worker
gets the stop from there *and* from its supervisor, in any order. So a supervised
worker takes every SIGINT and SIGTERM as the same graceful request, and only
``FORCE_SIGNAL``, which the supervisor sends on a second signal of its own, makes it
force its exit.

A child starts with SIGINT and SIGTERM blocked (the supervisor blocks them around its
start, and the mask is inherited): a stop that arrives while it imports the project
waits, pending, until the worker handles it (``unblock_stop_signals``), instead of
killing it mid-import. Once it serves, it writes one byte to the pipe named by
``READY_FD_ENV``: a child that dies before that failed to start, and a supervisor
gives up after a few such failures in a row instead of restarting it for ever.
"""

from __future__ import annotations

import contextlib
import os
import signal

#: In a supervised worker's environment: the supervisor's pid.
SUPERVISOR_ENV = "BLITZQ_SUPERVISOR"
#: In a supervised worker's environment: the write end of the pipe its readiness goes to.
READY_FD_ENV = "BLITZQ_READY_FD"
#: The supervisor's "force your exit" (sent on its second signal only).
FORCE_SIGNAL = signal.SIGUSR1
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})
#: A stop signal this soon after the first is the same request, not a second one:
#: ``timeout`` signals its command and then the command's group, back to back.
REPEAT_WINDOW_S = 0.5


def supervised() -> bool:
    """Whether this process is a worker started by a supervisor."""
    return SUPERVISOR_ENV in os.environ


def notify_ready() -> None:
    """Tell the supervisor (if any) that this worker serves; once per process."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is None or not fd.isdigit():
        return
    with contextlib.suppress(OSError):  # the supervisor is gone: nobody to tell
        os.write(int(fd), b"1")
    with contextlib.suppress(OSError):
        os.close(int(fd))


def block_stop_signals() -> set[int | signal.Signals]:
    """Block SIGINT and SIGTERM in this thread (what a process started now inherits);
    returns the mask to restore."""
    return signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def unblock_stop_signals() -> None:
    """Deliver SIGINT and SIGTERM again, a pending one now (to the handlers just set)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


__all__ = ["FORCE_SIGNAL", "READY_FD_ENV", "REPEAT_WINDOW_S", "STOP_SIGNALS", "SUPERVISOR_ENV",
           "block_stop_signals", "notify_ready", "supervised", "unblock_stop_signals"]
