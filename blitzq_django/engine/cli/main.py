"""Command line of the engine: ``python -m blitzq_django.engine worker module:client``
(and ``scheduler module:client``, docs/scheduling.md).

The Django ``runworker`` command shares these options and the way they are run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .. import logformat
from ..banner import announce
from ..client import Client
from ..core import limits
from ..core.names import name_problem
from ..errors import BlitzqError, BrokerError, ConfigurationError
from ..scheduler import Scheduler
from ..supervisor import EXIT_RECYCLE, Supervisor
from ..worker import Worker, WorkerConfig, supervision
from . import ops as ops_cli
from .args import number

log = logging.getLogger("blitzq.worker")


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--queues", "--queue", "-Q", action="append", default=[], metavar="A,B",
        help="queues to serve, comma-separated, repeatable (default: every known queue)")
    add("--concurrency", "-c", type=number("concurrency"), default=None,
        help="attempts running at once per process")
    add("--queue-concurrency", action="append", default=[], metavar="QUEUE=N",
        help="most attempts of one queue running at once, e.g. reports=2 (comma-separated, "
             "repeatable); queues without one share --concurrency")
    add("--prefetch", type=number("prefetch"), default=None,
        help="most unacked messages a process holds (default concurrency + batch size)")
    add("--threads", type=number("threads"), default=None, help="thread pool size for def tasks")
    add("--batch-size", type=number("batch_size"), default=None)
    add("--burst", action="store_true", help="drain the queues, then exit")
    add("--processes", "-p", type=number("processes"), default=1,
        help="run this many worker processes under a supervisor that restarts dead ones")
    add("--max-tasks-per-child", type=number("max_tasks"), default=0,
        help="recycle a worker process after this many messages (0 = never)")
    add("--max-memory-per-child", type=number("max_memory_mb"), default=0,
        help="recycle a worker process above this resident memory in MiB (0 = never)")
    add("--visibility-timeout", type=number("visibility_timeout"), default=None)
    add("--max-deliveries", type=number("max_deliveries"), default=None)
    add("--shutdown-timeout", type=number("shutdown_timeout"), default=None)
    add("--time-limit-grace", type=number("time_limit_grace"), default=None, metavar="SECONDS",
        help="how long a def task's thread may run on past its timeout before the worker "
             "process recycles itself (default 5)")
    add("--no-promote", action="store_true", help="do not move due scheduled messages")
    add("--name", default=None, help="consumer name (default host:pid:random)")


def worker_config(options: dict[str, Any], defaults: dict[str, Any] | None = None) -> WorkerConfig:
    """Build a WorkerConfig from parsed options over settings-provided defaults."""
    values: dict[str, Any] = dict(defaults or {})
    # call_command("runworker", processes=...) skips the argparse types: check here too.
    limits.check("processes", options.get("processes", 1), "--processes")
    queues = parse_queues(options.get("queues") or [])
    if queues:
        values["queues"] = queues
    caps = parse_queue_concurrency(options.get("queue_concurrency") or [])
    if caps:
        values["queue_concurrency"] = {**values.get("queue_concurrency", {}), **caps}
    for field in ("concurrency", "prefetch", "threads", "batch_size", "visibility_timeout",
                  "max_deliveries", "shutdown_timeout", "name", "time_limit_grace"):
        if options.get(field) is not None:
            values[field] = options[field]
    values["burst"] = bool(options.get("burst"))
    values["promote"] = not options.get("no_promote")
    values["max_tasks"] = options.get("max_tasks_per_child") or 0
    values["max_memory_mb"] = options.get("max_memory_per_child") or 0
    return WorkerConfig(**values)


def parse_queues(given: Sequence[str]) -> tuple[str, ...]:
    """["a,b", "c"] -> ("a", "b", "c"); a --queues that names no queue is an error."""
    names = [q.strip() for part in given for q in part.split(",") if q.strip()]
    if given and not names:
        raise ConfigurationError("--queues names no queue")
    for name in names:
        problem = name_problem("queue", name)
        if problem is not None:
            raise ConfigurationError(f"--queues: {problem}")
    return tuple(dict.fromkeys(names))


def parse_queue_concurrency(given: Sequence[str]) -> dict[str, int]:
    """["a=10,b=2", "c=1"] -> {"a": 10, "b": 2, "c": 1}, each checked like --concurrency."""
    caps: dict[str, int] = {}
    for item in (i.strip() for part in given for i in part.split(",")):
        if item:
            queue, cap = _queue_cap(item)
            caps[queue] = cap
    return caps


def _queue_cap(item: str) -> tuple[str, int]:
    queue, sep, text = (part.strip() for part in item.partition("="))
    problem = name_problem("queue", queue) if sep else f"{item!r} is not QUEUE=N"
    if problem is None:
        try:
            cap = int(text)
        except ValueError:
            problem = f"{item!r}: N must be an integer"
        else:
            found = limits.problem("concurrency", cap)
            problem = f"{item!r}: N {found}" if found else None
    if problem is not None:
        raise ConfigurationError(f"--queue-concurrency: {problem}")
    return queue, cap


def child_argv(argv: Sequence[str]) -> list[str]:
    """The same command line as one worker process: without the supervisor's own option,
    and with ``--processes 1`` last (the last one wins), so that neither an option spelled
    another way (``-p2``, ``--proc 2``) nor a PROCESSES setting makes the child a
    supervisor of its own."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--processes", "-p"):
            skip = True
            continue
        if arg.startswith("--processes="):
            continue
        out.append(arg)
    return [*out, "--processes", "1"]


def relaunch_command() -> list[str]:
    """The command line that started this process, to start another one like it.

    ``sys.argv`` alone is not it: under ``python -m django`` its first item is the path of
    Django's ``__main__.py``, and running that path as a script puts Django's package
    directory first on ``sys.path`` (its ``http`` package then shadows the standard
    library's: the child dies at import). ``sys.orig_argv`` keeps ``-m django`` and the
    interpreter's own options (``-X``, ``-W``, ``-u``).
    """
    original = list(getattr(sys, "orig_argv", ()))
    args = sys.argv[1:]
    cut = len(original) - len(args)
    if cut >= 1 and original[cut:] == args:
        return [sys.executable, *original[1:cut], *args]
    return [sys.executable, *sys.argv]  # sys.argv was changed after the start: the best guess


def run(client: Client, config: WorkerConfig, processes: int, argv: Sequence[str],
        **worker_kwargs: Any) -> int:
    """Run one worker in this process, or supervise ``processes`` children."""
    if processes > 1:
        return Supervisor(child_argv(argv), processes, shutdown_timeout=config.shutdown_timeout,
                          burst=config.burst).run()
    worker = Worker(client, config, **worker_kwargs)
    asyncio.run(worker.run(install_signal_handlers=True, close_broker=True))
    if worker.lost_slot and not supervision.supervised():
        restart_in_place([*argv, "--processes", "1"])
    return exit_code(worker)


def restart_in_place(argv: Sequence[str]) -> NoReturn:
    """Start afresh as ``argv`` in this very process (``exec``: the same pid, so systemd,
    a container runtime or runworker's --reload parent go on watching it), leaving a
    thread that could not be stopped behind. SIGINT and SIGTERM stay blocked across the
    exec: one sent meanwhile waits, pending, for the new worker's handlers."""
    log.warning("starting a fresh worker in this process (pid %d): %s", os.getpid(),
                " ".join(argv))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    supervision.block_stop_signals()
    os.execv(argv[0], list(argv))


def exit_code(worker: Worker) -> int:
    """The process exit status after run(): EXIT_RECYCLE asks a supervisor for a new one."""
    code = 1 if worker.forced else EXIT_RECYCLE if worker.recycled else 0
    if worker.forced or worker.threads_left:
        # Threads still run user code whose messages were requeued; do not wait for them.
        logging.shutdown()
        os._exit(code)
    return code


def _resolve(path: str) -> Client | None:
    """The Client at ``module:attribute`` (calling a factory), or None if it is not one."""
    module_name, _, attr = path.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in (attr or "client").split("."):
        value = getattr(value, part)
    if callable(value) and not isinstance(value, Client):
        value = value()
    return value if isinstance(value, Client) else None


def _load(path: str) -> Client:
    client = _resolve(path)
    if client is None:
        raise SystemExit(f"{path} is not a blitzq Client")
    return client


def _load_for_ops(path: str) -> Client:
    """Like _load, with a bad APP as one line and exit 2 (ops_cli's bad input), not a
    traceback."""
    try:
        client = _resolve(path)
    except (ImportError, AttributeError, TypeError) as exc:  # TypeError: a factory's call
        raise ConfigurationError(f"cannot load APP {path!r}: {exc}") from None
    if client is None:
        raise ConfigurationError(f"APP {path!r} is not a blitzq Client (nor a factory of one)")
    return client


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m blitzq_django.engine",
        description="Run a blitzq worker, or look at and operate the queues (docs/cli.md).",
        epilog="APP is module:attribute of a Client (or of a factory of one). Exit codes: "
               "0 done, 1 not found or nothing matched, 2 usage or bad input, 3 Redis "
               "unavailable, 4 refused.")
    sub = parser.add_subparsers(dest="command", required=True)
    worker_parser = sub.add_parser("worker", help="run a worker")
    worker_parser.add_argument("app", help="module:attribute of a Client (or a factory of one)")
    worker_parser.add_argument("--log-level", default=os.environ.get("BLITZQ_LOG_LEVEL", "INFO"))
    _add_log_format(worker_parser)
    add_worker_arguments(worker_parser)
    scheduler_parser = sub.add_parser(
        "scheduler", help="run a scheduler: dispatch periodic tasks, promote delayed ones")
    scheduler_parser.add_argument("app", help="module:attribute of a Client (or a factory of "
                                  "one)")
    scheduler_parser.add_argument("--log-level",
                                  default=os.environ.get("BLITZQ_LOG_LEVEL", "INFO"))
    _add_log_format(scheduler_parser)
    add_scheduler_arguments(scheduler_parser)
    ops_cli.add_commands(sub, leaf=_add_app_argument)
    return parser


def _add_log_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-format", choices=logformat.LOG_FORMATS, type=str.lower,
                        default=logformat.from_environment() or "text",
                        help="text, or one JSON object a line with a task's fields as keys "
                             "(default: $BLITZQ_LOG_FORMAT, else text)")


def _configure_logging(args: argparse.Namespace) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logformat.formatter(
        args.log_format, "%(asctime)s %(levelname)s %(name)s %(process)d: %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])


def _add_app_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app", metavar="APP",
                        help="module:attribute of a Client (or a factory of one)")


def main(argv: Sequence[str] | None = None,
         load: Callable[[str], Client] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.command == "worker":
        return _run_worker(args, argv, load or _load)
    if args.command == "scheduler":
        return _run_scheduler(args, load or _load)
    return _run_ops(args, load or _load_for_ops)


def _run_worker(args: argparse.Namespace, argv: list[str],
                load: Callable[[str], Client]) -> int:
    _configure_logging(args)
    try:
        client = load(args.app)
        config = worker_config(vars(args))
        announce(client, config, processes=args.processes,
                 verbosity=2 if args.log_level.upper() == "DEBUG" else 1)
        return run(client, config, args.processes, [sys.executable, "-m", "blitzq_django.engine",
                                                    *argv])
    except BlitzqError as exc:
        print(f"blitzq: {exc}", file=sys.stderr)
        return 2


def add_scheduler_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a scheduler (engine CLI and ``manage.py runscheduler``)."""
    add = parser.add_argument
    add("--no-promote", action="store_true",
        help="do not move due scheduled (delayed) messages onto their queues")
    add("--queues", "--queue", "-Q", action="append", default=[], metavar="A,B",
        help="also promote these queues (default: every known queue)")
    add("--poll-interval", type=number("schedule_poll_interval"), default=0.5,
        help="longest a due delayed message waits for promotion, in seconds (default 0.5)")
    add("--name", default=None, help="scheduler name in logs (default host:pid:random)")


def run_scheduler(client: Client, options: dict[str, Any], **kwargs: Any) -> int:
    """Run one scheduler until SIGTERM/SIGINT; 2 if a schedule names an unknown task."""
    unknown = [f"schedule {s.name!r}: task {s.task!r} is not registered"
               for s in client.schedule_registry if client.registry.find(s.task) is None]
    if unknown:
        raise ConfigurationError("; ".join(unknown))
    scheduler = Scheduler(client, promote=not options.get("no_promote"),
                          queues=parse_queues(options.get("queues") or []),
                          poll_interval=options.get("poll_interval") or 0.5,
                          name=options.get("name"), **kwargs)
    asyncio.run(scheduler.run(install_signal_handlers=True, close_broker=True))
    return 0


def _run_scheduler(args: argparse.Namespace, load: Callable[[str], Client]) -> int:
    _configure_logging(args)
    try:
        return run_scheduler(load(args.app), vars(args))
    except BlitzqError as exc:
        print(f"blitzq: {exc}", file=sys.stderr)
        return 2


def _run_ops(args: argparse.Namespace, load: Callable[[str], Client]) -> int:
    console = ops_cli.Console.standard()
    try:
        client = load(args.app)
    except BlitzqError as exc:  # a bad APP; or its factory could not reach Redis
        console.note(f"blitzq: {exc}")
        return ops_cli.EXIT_UNAVAILABLE if isinstance(exc, BrokerError) else ops_cli.EXIT_USAGE
    try:
        return ops_cli.execute(ops_cli.Ops(client, console), args)
    finally:
        client.broker.close()
