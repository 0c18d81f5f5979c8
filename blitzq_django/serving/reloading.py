"""``runworker --reload``: restart the worker when a Python file changes (development).

Django's own ``run_with_reloader`` runs the program in a thread and keeps the main
thread for the file watcher, so the program cannot install signal handlers and a
reload kills running tasks mid-way. Here it is the other way round: the child runs
the worker on its main thread (signal handlers installed, SIGTERM/SIGINT graceful)
and Django's file watcher in a thread; a change stops the worker gracefully and the
child exits with code 3, which tells the parent to start a new child. The parent
only forwards SIGTERM/SIGINT to the child and returns its exit code.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable

from django.utils import autoreload

log = logging.getLogger("blitzq")

RELOAD_EXIT_CODE = 3  # Django's autoreloader convention: "start me again"


def in_child() -> bool:
    return os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true"


def run_parent() -> int:
    """Start children until one exits for another reason than a reload."""
    args = autoreload.get_child_arguments()
    env = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    while True:
        # A session of its own: a Ctrl-C in the terminal reaches the parent only, which
        # forwards it once (a second SIGINT would force the worker to exit).
        child = subprocess.Popen(args, env=env, close_fds=False, start_new_session=True)

        def forward(signum: int, _frame: object, child: subprocess.Popen[bytes] = child) -> None:
            child.send_signal(signum)

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = child.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if code != RELOAD_EXIT_CODE:
            return code
        log.info("code changed: starting the worker again")


def watch(on_change: Callable[[], None]) -> threading.Event:
    """Watch the project's files in a thread; call ``on_change`` once on the first
    change. Returns an event that is set when a change was seen."""
    changed = threading.Event()
    reloader = autoreload.get_reloader()
    main_thread = threading.main_thread()

    def run() -> None:
        try:
            reloader.run(main_thread)
        except SystemExit:  # trigger_reload() exits the watching thread with code 3
            changed.set()
            on_change()
        except Exception:
            log.exception("the file watcher stopped; --reload is off from now on")

    def orphaned() -> None:
        # The child has a session of its own, so a parent killed with SIGKILL leaves it
        # running; it stops (gracefully) once its parent is gone.
        parent = os.getppid()
        while os.getppid() == parent:
            if changed.wait(1.0):
                return
        log.warning("the --reload parent is gone: stopping")
        on_change()

    threading.Thread(target=run, name="blitzq-reloader", daemon=True).start()
    threading.Thread(target=orphaned, name="blitzq-reload-parent", daemon=True).start()
    return changed
