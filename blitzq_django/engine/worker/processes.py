"""The process pool: `def` tasks declared ``executor="process"`` run in child processes.

For CPU-bound Python code, which a thread pool cannot run in parallel (the GIL). The pool
is the worker's own small manager over ``multiprocessing`` rather than
``concurrent.futures.ProcessPoolExecutor``: that one cannot kill the one child running a
timed-out call, and one child's death breaks it whole, failing every call in flight in
the other children too. Here each child has a slot: a thread of the worker that owns the
child and its pipe, so a timeout or a death costs exactly that attempt.

- N slots (``size``, default ``os.cpu_count()``), each one child from the ``forkserver``
  context (never a fork of a threaded worker). Nothing starts before the first process
  task: a worker that never runs one pays nothing.
- Calls wait in one FIFO for a free slot; the attempt holds its worker slot meanwhile
  and until the call returns in the child.
- A call past its timeout: the child is killed (SIGKILL) and replaced, the attempt fails
  with TimeoutError. A child that dies in a call (``os._exit``, a signal, the OOM
  killer): the attempt fails with ChildProcessDied, the child is replaced, other calls
  go on.
- A child runs ``max_tasks_per_child`` calls, then is replaced (leaks stay bounded).
- ``initializer(*initargs)`` runs once in each child before its first call (the Django
  glue passes one that runs ``django.setup()``); ``around_call`` before and after each.
- What crosses the pipe, between this worker and its own children only, is pickled: the
  task's module and name (the child imports it), its arguments (already plain data:
  they came from a message), and the result or the exception. An exception that cannot
  be pickled comes back as ChildProcessError with its description and traceback; a
  result that cannot is a failure too. Nothing from Redis is ever unpickled.
- ``current_task()`` is None in a child, so progress reports and ``cancelled`` are not
  available there; cancel() does not interrupt a running process call.
- shutdown(): idle children exit, busy ones are killed (the worker already waited for
  them up to shutdown_timeout, then requeued their messages), every child is joined:
  none outlives the worker. Children also die with their parent (PR_SET_PDEATHSIG on
  Linux), and exit when their pipe closes. They ignore SIGINT (a Ctrl-C reaches the
  whole process group; the worker stops them); send SIGTERM to the worker only
  (systemd: KillMode=mixed), or a running call dies with its child and is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.ids import now_ms
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..client.context import TaskContext
    from .inflight import Held

log = logging.getLogger("blitzq.worker")

DEFAULT_MAX_TASKS_PER_CHILD = 1000
MAX_SIZE = 1024
#: How long a child may take to start (its initializer included) before the call
#: waiting for it fails.
START_TIMEOUT_S = 120.0
#: How long an idle child is given to exit at shutdown or recycling before it is killed.
EXIT_TIMEOUT_S = 5.0
CONTEXT = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"

_READY, _OK, _ERROR, _TEXT = "ready", "ok", "error", "text"

Conclude = Callable[["Held", BaseException | None, Any, int], None]


class ChildProcessDied(ChildProcessError):
    """The child process running the attempt died before the call returned."""


def check_size(value: object, name: str = "processes") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
        raise ConfigurationError(f"{name} must be an integer >= 1 and <= {MAX_SIZE} "
                                 f"(None = the number of CPUs), not {value!r:.40}")
    return value


def check_max_tasks_per_child(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**9:
        raise ConfigurationError(f"max_tasks_per_child must be an integer >= 1, not "
                                 f"{value!r:.40}")
    return value


def default_size() -> int:
    return min(os.cpu_count() or 1, MAX_SIZE)


class ProcessPool:
    """N child processes running process-executor calls; see the module docstring."""

    def __init__(self, size: int | None = None, *,
                 max_tasks_per_child: int = DEFAULT_MAX_TASKS_PER_CHILD,
                 initializer: Callable[..., Any] | None = None, initargs: tuple[Any, ...] = (),
                 around_call: Callable[[], Any] | None = None,
                 context: str = CONTEXT) -> None:
        self.size = default_size() if size is None else check_size(size)
        self.max_tasks_per_child = check_max_tasks_per_child(max_tasks_per_child)
        self._setup = (initializer, tuple(initargs), around_call)
        self._context = multiprocessing.get_context(context)
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self.closing = False
        #: the pid of every child started so far (ops and tests: none may outlive the pool)
        self.started_pids: list[int] = []

    @property
    def started(self) -> bool:
        return bool(self._slots)

    def pids(self) -> list[int]:
        """The pids of the live children (for tests and ops)."""
        return [pid for slot in self._slots if (pid := slot.pid) is not None]

    def run(self, held: Held, context: Callable[[], TaskContext], timeout: float | None,
            conclude: Conclude) -> None:
        """Queue the attempt of ``held``; ``conclude(held, error, value, started_ms)`` is
        called on the worker's loop once it returns, fails, times out or its child dies."""
        if not self._slots:
            self._start()
        func = held.spec.func
        message = held.message
        self._jobs.put(_Job(held, func.__module__, func.__qualname__, message.args,
                            message.kwargs, timeout, conclude, asyncio.get_running_loop()))

    def _start(self) -> None:
        with self._lock:
            if self._slots or self.closing:
                return
            method = self._context.get_start_method()
            log.info("starting the process pool: %d children (%s)", self.size, method)
            if method == "forkserver":
                # Children forked from a server that imported this module (and the
                # engine) already start in a fraction of the time. Ignored if the
                # process's forkserver runs already.
                self._context.set_forkserver_preload(["__main__", __name__])
            self._slots = [_Slot(self, i) for i in range(self.size)]
            for slot in self._slots:
                slot.start()

    def shutdown(self, timeout: float = EXIT_TIMEOUT_S) -> None:
        """Stop every child: idle ones exit, busy ones are killed; join them all. Blocks."""
        with self._lock:
            self.closing = True
            slots = list(self._slots)
        for _ in slots:
            self._jobs.put(None)
        for slot in slots:
            slot.kill_busy()
        deadline = time.monotonic() + timeout + 1
        for slot in slots:
            slot.join(max(0.1, deadline - time.monotonic()))
        for slot in slots:  # a slot thread stuck somewhere: its child goes anyway
            slot.reap()
        # Calls still queued were requeued by the worker: they are not run.
        with contextlib.suppress(queue.Empty):
            while True:
                self._jobs.get_nowait()


class _Job:
    __slots__ = ("held", "module", "qualname", "args", "kwargs", "timeout", "conclude", "loop")

    def __init__(self, held: Held, module: str, qualname: str, args: Any, kwargs: Any,
                 timeout: float | None, conclude: Conclude, loop: Any) -> None:
        self.held, self.module, self.qualname = held, module, qualname
        self.args, self.kwargs, self.timeout = args, kwargs, timeout
        self.conclude, self.loop = conclude, loop

    def finish(self, error: BaseException | None, value: Any, started: int) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the worker is gone
            self.loop.call_soon_threadsafe(self.conclude, self.held, error, value, started)


class _Slot(threading.Thread):
    """One child and the thread that feeds it calls, one at a time."""

    def __init__(self, pool: ProcessPool, index: int) -> None:
        super().__init__(name=f"blitzq-process-{index}", daemon=True)
        self.index = index
        self._pool = pool
        self._process: Any = None
        self._conn: Any = None
        self._calls = 0
        self._busy = False
        self._guard = threading.Lock()

    @property
    def pid(self) -> int | None:
        process = self._process
        try:
            return process.pid if process is not None and process.is_alive() else None
        except ValueError:  # closed meanwhile by the slot's thread: gone
            return None

    def run(self) -> None:
        pool = self._pool
        broken = False  # the last start failed: the next one waits for a call needing it
        try:
            while True:
                if self._process is None and not broken and not pool.closing:
                    broken = self._spawn() is not None  # eagerly: the next call finds it up
                job = pool._jobs.get()
                if job is None or pool.closing:
                    break  # calls still queued were requeued by the stopping worker
                if self._process is None:
                    error = self._spawn()
                    if error is not None:  # the call fails with it (and is retried per policy)
                        broken = True
                        job.finish(error, None, now_ms())
                        continue
                broken = False
                self._call(job)
        finally:
            self._retire()

    # -- one call --------------------------------------------------------------

    def _call(self, job: _Job) -> None:
        started = now_ms()
        job.held.started_ms = started
        conn, process = self._conn, self._process
        with self._guard:
            self._busy = True
        try:
            try:
                conn.send_bytes(pickle.dumps((job.module, job.qualname, job.args, job.kwargs),
                                             pickle.HIGHEST_PROTOCOL))
            except (OSError, ValueError):
                job.finish(self._died(f"before the call of {job.qualname} could be sent"),
                           None, started)
                return
            except Exception as exc:  # noqa: BLE001 - arguments that do not pickle
                job.finish(TypeError(f"the arguments of {job.qualname} cannot be sent to a "
                                     f"child process: {exc}"), None, started)
                return
            timeout = job.timeout
            ready = multiprocessing.connection.wait([conn, process.sentinel], timeout)
            if not ready:
                self._kill()
                job.finish(TimeoutError(f"task exceeded its timeout of {timeout} s: its "
                                        "child process was killed"), None, started)
                return
            if conn not in ready:  # only the sentinel: the child is gone without a reply
                job.finish(self._died(f"while running {job.qualname}"), None, started)
                return
            try:
                kind, payload = pickle.loads(conn.recv_bytes())  # noqa: S301 - our own child
            except (EOFError, OSError):
                job.finish(self._died(f"while running {job.qualname}"), None, started)
                return
            except Exception as exc:  # noqa: BLE001 - a result that does not unpickle here
                job.finish(ChildProcessError(f"the outcome of {job.qualname} could not be "
                                             f"read back from its child process: {exc!r}"),
                           None, started)
                return
        finally:
            with self._guard:
                self._busy = False
        self._calls += 1
        if kind == _OK:
            job.finish(None, payload, started)
        elif kind == _ERROR:
            job.finish(payload, None, started)
        else:  # _TEXT: an exception that could not be pickled, described
            job.finish(ChildProcessError(payload), None, started)
        if self._calls >= self._pool.max_tasks_per_child:
            self._retire()  # recycled; the next turn of run() starts a new child

    def _died(self, when: str) -> ChildProcessDied:
        process = self._process
        with contextlib.suppress(Exception):
            process.join(EXIT_TIMEOUT_S)
        code = process.exitcode if process is not None else None
        how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
               and -code in signal.valid_signals() else f"exit code {code}")
        self._reset()
        return ChildProcessDied(f"the child process running the task died {when} ({how}); "
                                "it was replaced")

    # -- the child's life --------------------------------------------------------

    def _spawn(self) -> BaseException | None:
        """Start a child and wait for its initializer; the error, or None."""
        pool = self._pool
        parent_end, child_end = multiprocessing.Pipe(duplex=True)
        try:
            process = pool._context.Process(  # type: ignore[attr-defined]  # typeshed: BaseContext
                target=_child_main, args=(child_end, *pool._setup),
                name=f"blitzq-child-{self.index}", daemon=True)
            process.start()
        except Exception as exc:  # noqa: BLE001 - reported to the call that needed it
            parent_end.close()
            child_end.close()
            log.error("cannot start a child process: %s", exc)
            return ChildProcessError(f"cannot start a child process: {exc}")
        child_end.close()
        self._process, self._conn, self._calls = process, parent_end, 0
        kind, detail = "", f"it did not start within {START_TIMEOUT_S:g} s"
        try:
            ready = multiprocessing.connection.wait([parent_end, process.sentinel],
                                                    START_TIMEOUT_S)
            if parent_end in ready:
                kind, detail = pickle.loads(parent_end.recv_bytes())  # noqa: S301 - own child
            elif ready:
                kind, detail = "", f"it exited with code {process.exitcode}"
        except (EOFError, OSError):
            kind, detail = "", "it died while starting"
        if kind == _READY:
            pool.started_pids.append(process.pid)
            return None
        self._kill()
        log.error("a child process failed to start: %s", detail)
        return ChildProcessError(f"the child process failed to start: {detail}")

    def _retire(self) -> None:
        """Ask the child to exit (after its last call), or kill it."""
        process, conn = self._process, self._conn
        if process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            conn.send_bytes(pickle.dumps(None))
        process.join(EXIT_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join(EXIT_TIMEOUT_S)
        self._reset()

    def _kill(self) -> None:
        process = self._process
        if process is not None:
            with contextlib.suppress(Exception):
                process.kill()
                process.join(EXIT_TIMEOUT_S)
        self._reset()

    def _reset(self) -> None:
        conn, process = self._conn, self._process
        self._conn = self._process = None
        if conn is not None:
            conn.close()
        if process is not None and process.exitcode is not None:
            with contextlib.suppress(Exception):
                process.close()

    def kill_busy(self) -> None:
        """At shutdown: kill the child if a call runs in it (its message was requeued)."""
        with self._guard:
            process = self._process if self._busy else None
        if process is not None:
            with contextlib.suppress(Exception):
                process.kill()

    def reap(self) -> None:
        """At shutdown, after join(): whatever child is left is killed and joined."""
        process = self._process
        if process is not None:
            with contextlib.suppress(Exception):
                if process.is_alive():
                    process.kill()
                process.join(EXIT_TIMEOUT_S)


# -- in the child ------------------------------------------------------------------


def _child_main(conn: Any, initializer: Callable[..., Any] | None, initargs: tuple[Any, ...],
                around_call: Callable[[], Any] | None) -> None:
    # The worker decides when its children stop: a Ctrl-C sent to the whole process group
    # must not kill a call the worker waits for at a graceful stop. (SIGTERM is left as
    # is: multiprocessing ends daemonic children with it at exit.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    try:
        if initializer is not None:
            initializer(*initargs)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send_bytes(pickle.dumps((_TEXT, _describe(exc))))
        return
    conn.send_bytes(pickle.dumps((_READY, os.getpid())))
    functions: dict[tuple[str, str], Callable[..., Any]] = {}
    while True:
        try:
            job = pickle.loads(conn.recv_bytes())  # noqa: S301 - our own parent
        except (EOFError, OSError):
            return  # the worker is gone
        if job is None:
            return
        module, qualname, args, kwargs = job
        try:
            func = functions.get((module, qualname))
            if func is None:
                func = functions[module, qualname] = _resolve(module, qualname)
            if around_call is not None:
                around_call()
            try:
                reply: tuple[str, Any] = (_OK, func(*args, **kwargs))
            finally:
                if around_call is not None:
                    around_call()
        except BaseException as exc:  # noqa: BLE001 - SystemExit too fails the attempt
            reply = (_ERROR, _Raised(exc))
        conn.send_bytes(_dumps(reply, qualname))


def _dumps(reply: tuple[str, Any], qualname: str) -> bytes:
    kind, payload = reply
    try:
        data = pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
        if kind == _ERROR:
            pickle.loads(data)  # noqa: S301 - ours: an exception that cannot be rebuilt?
        return data
    except Exception as exc:  # noqa: BLE001
        if kind == _OK:
            text = (f"the result of {qualname} cannot be sent back from its child process "
                    f"(a {type(payload).__name__}): {exc}")
        else:
            text = _describe(payload.error)
        return pickle.dumps((_TEXT, text))


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a child process, as text: the cause of the
    exception the parent rebuilds (its own frames do not cross the pipe), so a record,
    a log line and an error tracker show where the task raised it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class _Raised:
    """What a child sends back for an exception: it, with its traceback as text."""

    __slots__ = ("error", "text")

    def __init__(self, error: BaseException) -> None:
        self.error = error
        try:
            self.text = "".join(traceback.format_exception(error)).strip()[-20_000:]
        except Exception:  # noqa: BLE001
            self.text = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuilt, (self.error, self.text)


def _rebuilt(error: BaseException, text: str) -> BaseException:
    """In the parent: the child's exception, its traceback text as its cause."""
    if text:
        error.__cause__ = RemoteTraceback(f"in the child process:\n\n{text}")
    return error


def _describe(exc: BaseException) -> str:
    """An exception that cannot be pickled back, as text: its class, message, traceback."""
    try:
        detail = "".join(traceback.format_exception(exc)).strip()
    except Exception:  # noqa: BLE001
        detail = ""
    try:
        said = str(exc)
    except Exception:  # noqa: BLE001
        said = "?"
    return (f"{type(exc).__module__}.{type(exc).__qualname__}: {said[:1000]} (raised in a "
            f"child process; it could not be pickled back)\n{detail[-4000:]}").strip()


def _resolve(module: str, qualname: str) -> Callable[..., Any]:
    """The task function of ``module.qualname``: the decorated name holds a Task object
    (or a BlitzqTask) whose spec has the function."""
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    spec = getattr(target, "spec", None)
    func = getattr(spec, "func", None)
    if callable(func) and getattr(func, "__qualname__", None) == qualname:
        return func
    wrapped = getattr(target, "__wrapped__", None)
    if callable(wrapped) and getattr(wrapped, "__qualname__", None) == qualname:
        return wrapped
    if callable(target):
        return target
    raise TypeError(f"{module}.{qualname} is not a callable task")


def _die_with_parent() -> None:
    """Linux: SIGKILL this child when its parent dies (a worker killed with SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        # lazy: cost (ctypes, on Linux only, once per child)
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort: the pipe's EOF stops it anyway
        pass


__all__ = ["DEFAULT_MAX_TASKS_PER_CHILD", "ChildProcessDied", "ProcessPool"]
