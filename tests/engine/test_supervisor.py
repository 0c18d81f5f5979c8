"""The supervisor of ``--processes N`` with stand-in children (tiny Python scripts): start
failures, a stop that reaches a child first, a stop that reaches a child still starting.
(tests/fault/test_graceful_pools.py runs real pools.)"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from blitzq_django.engine.supervisor import EXIT_FAILED, MAX_START_FAILURES

from ..support.waiting import wait_until


def supervise(child: str, processes: int, log: Path) -> subprocess.Popen[bytes]:
    """A supervisor of ``processes`` children running ``child``, in a session of its own."""
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "from blitzq_django.engine.supervisor import Supervisor\n"
        f"sys.exit(Supervisor([sys.executable, '-c', {child!r}], {processes}, "
        "shutdown_timeout=5).run())\n"
    )
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-c", script], stdout=out, stderr=out,
                                start_new_session=True)


def finish(process: subprocess.Popen[bytes], timeout: float) -> int:
    try:
        return process.wait(timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the group this test started
        process.wait(5)


def test_children_that_keep_failing_to_start_make_the_pool_give_up(tmp_path: Path) -> None:
    # As `python -m django runworker --processes 2` did: every child died at import.
    marker = tmp_path / "starts"
    child = (f"open({str(marker)!r}, 'a').write('x')\n"
             "raise ImportError('cannot import name SimpleCookie')\n")
    log = tmp_path / "supervisor.log"
    process = supervise(child, 2, log)
    code = finish(process, 60)
    text = log.read_text()
    assert code == EXIT_FAILED, text
    assert f"failed to start {MAX_START_FAILURES} times in a row (last: exit code 1)" in text
    assert "giving up" in text
    # Each failure it counted was logged; a child still starting when it gave up is
    # stopped with the pool, maybe before its own error was printed.
    starts = len(marker.read_text())
    failures = text.count("ImportError: cannot import name SimpleCookie")
    assert MAX_START_FAILURES <= failures <= starts <= 2 * MAX_START_FAILURES, text


def test_a_child_stopped_before_its_supervisor_is_not_started_again(tmp_path: Path) -> None:
    # A stop sent to the process group can reach a child, which stops (exit 0), before
    # the supervisor, which must not read that exit as a recycle to replace.
    marker = tmp_path / "starts"
    child = (
        "import os, subprocess\n"
        f"open({str(marker)!r}, 'a').write('x')\n"
        # The supervisor's copy of the stop, a little later than the child's.
        "subprocess.Popen(['sh', '-c', f'sleep 0.3; kill -TERM {os.getppid()}'])\n"
    )
    log = tmp_path / "supervisor.log"
    process = supervise(child, 1, log)
    code = finish(process, 30)
    text = log.read_text()
    assert code == 0, text
    assert marker.read_text() == "x", text  # started once: not replaced
    assert "stopped on a signal" in text


def test_a_child_still_starting_when_the_pool_stops_stops_gracefully(tmp_path: Path) -> None:
    # The stop reaches a child while it imports the project (before its worker handles
    # signals): it waits, pending, and the worker then stops gracefully, instead of the
    # child dying of it mid-import. (The stand-in does what the worker does.)
    marker = tmp_path / "child"
    child = (
        "import os, signal, sys, threading, time\n"
        f"path = {str(marker)!r}\n"
        "open(path, 'a').write('starting\\n')\n"
        "while not os.path.exists(path + '.go'):\n"
        "    time.sleep(0.01)  # importing the project\n"
        "stop = threading.Event()\n"
        "signal.signal(signal.SIGTERM, lambda *a: stop.set())\n"
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})\n"
        "stop.wait(30)\n"
        "open(path, 'a').write('graceful\\n' if stop.is_set() else 'no stop\\n')\n"
    )
    log = tmp_path / "supervisor.log"
    process = supervise(child, 1, log)
    try:
        wait_until(lambda: marker.exists(), 30, interval=0.01, message="the child to start")
        process.send_signal(signal.SIGTERM)
        wait_until(lambda: "stopping the worker processes" in log.read_text(), 10,
                   interval=0.01, message="the supervisor to pass the stop on")
        Path(f"{marker}.go").touch()  # the child's "import" ends after the stop reached it
    finally:
        code = finish(process, 30)
    text = log.read_text()
    assert marker.read_text().split() == ["starting", "graceful"], text
    assert code == 0, text
