"""The history writer in a process of its own, started and watched by ``runworker``.

On a thread of the worker's process the writer competes with the worker for the GIL,
and it always has work while the worker is busy: a runworker draining ``def`` no-op
tasks did about a third fewer tasks/s with its writer on a thread than with the writer in
another process (docs/benchmarks.md). So by default (``HISTORY_WRITER`` "process")
runworker starts the writer as a child, ``manage.py runhistory --until-stdin-closes``
(run as ``python -m django``), and starts it again when it dies. The child stops when
runworker closes its stdin, or when runworker dies (the pipe closes then too): a writer
never outlives its worker.

A writer killed anywhere loses nothing (writer.py: ack after commit, re-read on start).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from django.conf import settings

from ..engine.worker.supervision import block_stop_signals

log = logging.getLogger("blitzq.history")

#: Waits before a dead writer process is started again (doubling up to the maximum; back
#: to the minimum after it ran this long).
RESTART_MIN_S, RESTART_MAX_S, RESTART_RESET_S = 1.0, 30.0, 60.0
#: How long a stopping writer may take to finish its batch before it is killed.
STOP_TIMEOUT_S = 10.0
#: How much nicer than its worker the writer runs (POSIX niceness, added to the
#: worker's). Its rows can wait and the worker's tasks cannot: when the CPUs are busy the
#: tasks come first and the events wait in Redis (capped by EVENTS_MAXLEN) until the CPUs
#: free up. Without it, the writer starting up beside a worker draining a backlog cost the
#: worker a tenth of its rate (docs/benchmarks.md).
NICENESS = 10


def settings_module() -> str | None:
    """The settings module a child can set Django up from; None for settings made with
    ``settings.configure()`` (they cannot be handed over)."""

    # SETTINGS_MODULE reads None under override_settings (tests): the variable holds it.
    return (getattr(settings, "SETTINGS_MODULE", None)
            or os.environ.get("DJANGO_SETTINGS_MODULE") or None)


def can_run() -> bool:
    return settings_module() is not None


def child_argv(queues: Sequence[str], log_level: int) -> list[str]:
    # One argument: queue names hold no commas (the CLI's own "A,B" syntax), and "=" keeps
    # a name starting with "-" from reading as an option.
    return [sys.executable, "-m", "django", "runhistory", "--until-stdin-closes",
            "--verbosity=0", f"--log-level={logging.getLevelName(log_level)}",
            f"--queues={','.join(queues)}"]


def child_env() -> dict[str, str]:
    """This process's environment, with its settings module and import path (manage.py's
    directory, a ``--pythonpath``) so the child imports the same project."""
    path = os.pathsep.join(p for p in sys.path if p)
    return {**os.environ, "PYTHONPATH": path,
            "DJANGO_SETTINGS_MODULE": settings_module() or ""}


def supervise(stop: threading.Event, queues: Sequence[str]) -> None:
    """Run the writer process until ``stop`` is set; start another when it dies."""
    backoff = RESTART_MIN_S
    level = logging.getLogger("blitzq").getEffectiveLevel()
    while not stop.is_set():
        began = time.monotonic()
        try:
            child = _start(queues, level)
        except OSError as exc:  # out of processes or memory: try again later
            log.warning("the history writer process could not start (%s); trying again in "
                        "%.0f s", exc, backoff)
        else:
            log.debug("history writer process %d started", child.pid)
            lower_priority(child.pid)
            while not stop.wait(0.2):  # stop is set from another thread: nothing to wake on
                if child.poll() is not None:
                    break
            if stop.is_set():
                _stop(child)
                return
            _close(child)
            if time.monotonic() - began > RESTART_RESET_S:
                backoff = RESTART_MIN_S
            log.warning("the history writer process exited with status %s; starting another "
                        "in %.0f s", child.returncode, backoff)
        if stop.wait(backoff):
            return
        backoff = min(backoff * 2, RESTART_MAX_S)


def _start(queues: Sequence[str], log_level: int) -> subprocess.Popen[bytes]:
    # With SIGINT and SIGTERM blocked, for good: a Ctrl-C or a systemd stop reaches the
    # whole process group, and the writer is to outlive the workers to write their last
    # rows. It stops when runworker closes its stdin (or dies).
    mask = block_stop_signals()
    try:
        return subprocess.Popen(child_argv(queues, log_level), env=child_env(),
                                stdin=subprocess.PIPE)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def lower_priority(pid: int) -> None:
    """Make ``pid`` NICENESS nicer than this process (never above the maximum, 19)."""
    try:
        niceness = min(os.getpriority(os.PRIO_PROCESS, 0) + NICENESS, 19)
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    except (AttributeError, OSError) as exc:  # no such call (Windows), or the child is gone
        log.debug("the history writer's priority was not lowered: %s", exc)


def _close(child: subprocess.Popen[bytes]) -> None:
    if child.stdin is not None:
        try:
            child.stdin.close()
        except OSError:  # the child is gone already
            pass


def _stop(child: subprocess.Popen[bytes]) -> None:
    """Close its stdin (it stops after the batch in hand), wait, then kill."""
    _close(child)
    try:
        child.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.warning("the history writer process %d did not stop in %.0f s: killing it",
                    child.pid, STOP_TIMEOUT_S)
        child.kill()
        child.wait()


# -- in the child -----------------------------------------------------------------------


def stop_at_stdin_eof(stop: threading.Event) -> None:
    """Set ``stop`` at end of file on stdin: the parent closed it, or died."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    stop.set()
