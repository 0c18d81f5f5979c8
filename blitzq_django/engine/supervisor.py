"""Supervisor: keep N worker processes running.

Each child is a full worker process started from the same command line. A
child that dies (SIGKILL, OOM, crash) or recycles itself (max_tasks,
max_memory_mb) is replaced. SIGTERM/SIGINT are forwarded for a graceful stop;
a second signal kills the children.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

log = logging.getLogger("blitzq.supervisor")

CRASH_WINDOW_S = 1.0  # a child dying sooner than this after its start counts as a crash loop
MAX_RESTART_DELAY_S = 5.0
POLL_S = 0.1
EXIT_RECYCLE = 75  # a child that stopped itself (max tasks, max memory): start a new one


@dataclass
class _Child:
    process: subprocess.Popen[bytes]
    started: float
    quick_deaths: int = 0


class Supervisor:
    def __init__(self, argv: Sequence[str], processes: int, *, shutdown_timeout: float = 30.0,
                 env: dict[str, str] | None = None, burst: bool = False) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.argv = list(argv)
        self.processes = processes
        self.shutdown_timeout = shutdown_timeout
        self.env = env
        #: burst: a child that exits 0 drained the queues and is not replaced; the
        #: supervisor returns once every child has finished
        self.burst = burst
        self.children: list[_Child | None] = [None] * processes
        self.restarts = 0
        self._signals = 0

    def _spawn(self, slot: int, quick_deaths: int = 0) -> None:
        process = subprocess.Popen(self.argv, env=self.env)
        self.children[slot] = _Child(process, time.monotonic(), quick_deaths)
        log.info("started worker process %d (pid %d)", slot, process.pid)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._signals += 1
        how = signal.SIGTERM if self._signals == 1 else signal.SIGKILL
        for child in self.children:
            if child is not None and child.process.poll() is None:
                child.process.send_signal(how)

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in range(self.processes):
                self._spawn(slot)
            while not self._signals:
                self._replace_dead()
                if all(child is None for child in self.children):
                    return 0  # burst: every child drained its queues
                time.sleep(POLL_S)  # supervision tick; signals interrupt it
            return self._wait_children()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _replace_dead(self) -> None:
        for slot, child in enumerate(self.children):
            if child is None or child.process.poll() is None:
                continue
            code = child.process.returncode
            if code == 0 and self.burst:
                log.info("worker process %d (pid %d) drained its queues", slot, child.process.pid)
                self.children[slot] = None
                continue
            lived = time.monotonic() - child.started
            crashed = code not in (0, EXIT_RECYCLE)
            quick = child.quick_deaths + 1 if crashed and lived < CRASH_WINDOW_S else 0
            if code in (0, EXIT_RECYCLE):
                log.info("worker process %d (pid %d) recycled", slot, child.process.pid)
            else:
                log.warning("worker process %d (pid %d) died with %s; restarting", slot,
                            child.process.pid, _describe(code))
            if quick:
                time.sleep(min(MAX_RESTART_DELAY_S, 0.1 * 2**quick))  # crash-loop backoff
            if self._signals:
                return  # told to stop meanwhile: a new child would never get the signal
            self.restarts += 1
            self._spawn(slot, quick)

    def _wait_children(self) -> int:
        deadline = time.monotonic() + self.shutdown_timeout + 5
        worst = 0
        for child in self.children:
            if child is None:
                continue
            try:
                code = child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                code = child.process.wait()
            worst = worst or (code if code and code > 0 and code != EXIT_RECYCLE else 0)
        return worst


def _describe(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
