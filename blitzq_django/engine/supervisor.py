"""Supervisor: keep N worker processes running.

Each child is a full worker process started from the same command line. A
child that dies (SIGKILL, OOM, crash) or recycles itself (max_tasks,
max_memory_mb, a thread stuck past its time limit) is replaced; one that keeps
failing before it serves (an import error, a broken setting) is not restarted
for ever: after ``MAX_START_FAILURES`` in a row the supervisor stops the pool.

Stopping (worker/supervision.py has the child's side): the first SIGTERM or
SIGINT is passed on to the children as a graceful stop, which each takes as one
request however many copies reach it (its process group's, its supervisor's); a
second one, which only a person sends on purpose, makes the supervisor send
FORCE_SIGNAL. The children start with SIGINT and SIGTERM blocked, so a stop that
reaches a child still importing the project waits for its worker's handlers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .worker import supervision

log = logging.getLogger("blitzq.supervisor")

CRASH_WINDOW_S = 1.0  # a child dying sooner than this after its start counts as a crash loop
MAX_RESTART_DELAY_S = 5.0
POLL_S = 0.1
EXIT_RECYCLE = 75  # a child that stopped itself (max tasks, max memory): start a new one
#: Exit status of a pool that was forced (second signal), gave up on children that
#: cannot start, or had to kill a child that outlived its shutdown timeout.
EXIT_FAILED = 1
#: Children failing before they serve, in a row in one slot, before the pool gives up.
MAX_START_FAILURES = 5
#: A child that exits 0 on its own was stopped by a signal that reached it first (one sent
#: to the process group usually reaches its supervisor too): wait this long for that.
SIGNALLED_RESTART_S = 1.0
#: A stopping child still alive this long after its shutdown timeout (or after a forced
#: stop) is killed.
KILL_AFTER_S = 5.0


@dataclass
class _Child:
    process: subprocess.Popen[bytes]
    started: float
    ready_fd: int | None  # read end of the pipe its worker writes a byte to once it serves
    ready: bool = False

    def check_ready(self) -> None:
        fd = self.ready_fd
        if fd is None:
            return
        try:
            data = os.read(fd, 1)
        except BlockingIOError:
            return  # not yet
        except OSError:
            data = b""
        self.ready = self.ready or bool(data)
        self.close_pipe()

    def close_pipe(self) -> None:
        if self.ready_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.ready_fd)
            self.ready_fd = None


@dataclass
class _Slot:
    child: _Child | None = None
    start_at: float | None = None  # when to start a child here (None: not to be started)
    failures: int = 0  # children that died before they served, in a row
    quick_deaths: int = 0  # children that died soon after their start, in a row
    last_code: int = 0  # exit status of its last child


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
        self.slots = [_Slot() for _ in range(processes)]
        self.restarts = 0
        #: why the pool stopped with EXIT_FAILED (None: it did not)
        self.failure: str | None = None
        self._stop_at: float | None = None  # monotonic time of the first stop signal
        self._forced_at: float | None = None

    @property
    def children(self) -> list[_Child | None]:
        return [slot.child for slot in self.slots]

    # -- signals ---------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if self._stop_at is None:
            log.info("%s: stopping the worker processes gracefully (again to force)", name)
            self._stop_at = now
            self._send_all(signal.SIGTERM)
        elif self._forced_at is None and now - self._stop_at >= supervision.REPEAT_WINDOW_S:
            log.warning("second %s: forcing the worker processes to exit", name)
            self._forced_at = now
            self.failure = f"forced by a second {name}"
            self._send_all(supervision.FORCE_SIGNAL)

    def _send_all(self, signum: int) -> None:
        for child in self.children:
            if child is not None:
                self._send(child, signum)

    @staticmethod
    def _send(child: _Child, signum: int) -> None:
        if child.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signum)

    # -- running ---------------------------------------------------------------------

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for index in range(self.processes):
                self._spawn(index)
            while self._stop_at is None and self.failure is None:
                self._watch()
                if all(slot.child is None and slot.start_at is None for slot in self.slots):
                    return 0  # burst: every child drained its queues
                time.sleep(POLL_S)  # supervision tick; signal handlers run in it
            if self._stop_at is None:  # gave up: stop the children that do run
                self._stop_at = time.monotonic()
                self._send_all(signal.SIGTERM)
            return self._wait_children()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            for slot in self.slots:
                if slot.child is not None:
                    slot.child.close_pipe()

    def _spawn(self, index: int) -> None:
        slot = self.slots[index]
        slot.start_at = None
        read_end, write_end = os.pipe()
        env = {**(os.environ if self.env is None else self.env),
               supervision.SUPERVISOR_ENV: str(os.getpid()),
               supervision.READY_FD_ENV: str(write_end)}
        # Blocked in the child from its first instruction (the mask is inherited); its
        # worker unblocks them once it handles them.
        mask = supervision.block_stop_signals()
        try:
            process = subprocess.Popen(self.argv, env=env, pass_fds=(write_end,))
        except OSError as exc:  # out of processes or memory: try again later
            os.close(read_end)
            log.error("worker process %d could not start (%s); trying again in %.0f s", index,
                      exc, MAX_RESTART_DELAY_S)
            slot.start_at = time.monotonic() + MAX_RESTART_DELAY_S
            return
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(write_end)
        os.set_blocking(read_end, False)
        child = slot.child = _Child(process, time.monotonic(), read_end)
        log.info("started worker process %d (pid %d)", index, process.pid)
        if self._stop_at is not None:
            # A stop signal ran its handler (on this thread, or delivered to another one)
            # before this child was in the list: it gets the stop now.
            self._send(child, signal.SIGTERM)

    def _watch(self) -> None:
        """One supervision tick: note who serves, handle exits, start what is due."""
        now = time.monotonic()
        for index, slot in enumerate(self.slots):
            child = slot.child
            if child is not None:
                child.check_ready()
                code = child.process.poll()
                if code is None:
                    continue
                child.check_ready()  # a byte written just before it exited
                child.close_pipe()
                slot.child = None
                slot.last_code = code
                self._exited(index, slot, child, code, now)
            if self.failure is not None or self._stop_at is not None:
                return  # told to stop meanwhile: a new child would never get the signal
            if slot.start_at is not None and now >= slot.start_at:
                self.restarts += 1
                self._spawn(index)

    def _exited(self, index: int, slot: _Slot, child: _Child, code: int, now: float) -> None:
        pid = child.process.pid
        if code == 0 and self.burst:
            log.info("worker process %d (pid %d) drained its queues", index, pid)
            return
        if code == EXIT_RECYCLE:
            log.info("worker process %d (pid %d) recycled", index, pid)
            slot.failures = slot.quick_deaths = 0
            slot.start_at = now
            return
        if code == 0:
            # A worker exits 0 when told to stop: by a signal this supervisor did not
            # send, since it is not stopping. One sent to the process group reaches the
            # supervisor too, soon: then nothing is started again.
            log.info("worker process %d (pid %d) stopped on a signal; starting another in "
                     "%.0f s unless the pool is stopped too", index, pid, SIGNALLED_RESTART_S)
            slot.start_at = now + SIGNALLED_RESTART_S
            return
        if not child.ready:
            slot.failures += 1
            if slot.failures >= MAX_START_FAILURES:
                self.failure = (f"worker process {index} failed to start {slot.failures} times "
                                f"in a row (last: {_describe(code)})")
                log.error("%s: giving up, stopping the pool; the error is in the worker's "
                          "output above", self.failure)
                return
            delay = min(MAX_RESTART_DELAY_S, 0.25 * 2 ** (slot.failures - 1))
            log.error("worker process %d (pid %d) %s before it served (%d of %d failures in a "
                      "row before the pool gives up); starting another in %.2f s", index, pid,
                      _describe_exit(code), slot.failures, MAX_START_FAILURES, delay)
            slot.start_at = now + delay
            return
        slot.failures = 0
        slot.quick_deaths = slot.quick_deaths + 1 if now - child.started < CRASH_WINDOW_S else 0
        log.warning("worker process %d (pid %d) died with %s; restarting", index, pid,
                    _describe(code))
        # Crash-loop backoff (a poison message that kills each child at once).
        delay = min(MAX_RESTART_DELAY_S, 0.1 * 2 ** slot.quick_deaths) if slot.quick_deaths else 0
        slot.start_at = now + delay

    def _wait_children(self) -> int:
        """Wait for every child to stop; kill those past their deadline. Exit status: 0
        when every child stopped by itself and none had failed, else EXIT_FAILED."""
        assert self._stop_at is not None
        killed = []
        while True:
            now = time.monotonic()
            alive = []
            for index, slot in enumerate(self.slots):
                child = slot.child
                if child is None:
                    continue
                code = child.process.poll()
                if code is None:
                    alive.append((index, child))
                    continue
                slot.child, slot.last_code = None, code
                child.close_pipe()
                log.info("worker process %d (pid %d) %s", index, child.process.pid,
                         _describe_exit(code))
            if not alive:
                break
            deadline = (self._forced_at + KILL_AFTER_S if self._forced_at is not None
                        else self._stop_at + self.shutdown_timeout + KILL_AFTER_S)
            if now >= deadline:
                for index, child in alive:
                    log.warning("worker process %d (pid %d) did not stop in time: killing it",
                                index, child.process.pid)
                    self._send(child, signal.SIGKILL)
                    killed.append(index)
                for _index, child in alive:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.process.wait(KILL_AFTER_S)
            time.sleep(POLL_S)  # signal handlers (a second signal: force) run in it
        if killed and self.failure is None:
            self.failure = f"killed worker process(es) {sorted(set(killed))} past the deadline"
        if self.failure is not None:
            return EXIT_FAILED
        codes = [slot.last_code for slot in self.slots]
        return EXIT_FAILED if any(c not in (0, EXIT_RECYCLE) for c in codes) else 0


def _describe(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _describe_exit(code: int) -> str:
    return f"was killed by {_describe(code)}" if code < 0 else f"exited with status {code}"
