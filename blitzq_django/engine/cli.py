"""Command line of the engine: ``python -m blitzq_django.engine worker module:client``.

The Django ``runworker`` command shares these options and the way they are run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .client import Client
from .core import limits
from .core.names import name_problem
from .errors import BlitzqError, ConfigurationError
from .supervisor import EXIT_RECYCLE, Supervisor
from .worker import Worker, WorkerConfig


def number(name: str) -> Callable[[str], int | float]:
    """An argparse type checking a flag by the rule of the same name (core.limits).

    argparse reports the ArgumentTypeError as "argument --flag: must be ...".
    """
    rule = limits.LIMITS[name]

    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if rule.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {rule.describe()}, not {text!r}") from None
        found = limits.problem(name, value)
        if found:
            raise argparse.ArgumentTypeError(found)
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--queues", "--queue", "-Q", action="append", default=[], metavar="A,B",
        help="queues to serve, comma-separated, repeatable (default: every known queue)")
    add("--concurrency", "-c", type=number("concurrency"), default=None,
        help="attempts running at once per process")
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
    for field in ("concurrency", "prefetch", "threads", "batch_size", "visibility_timeout",
                  "max_deliveries", "shutdown_timeout", "name"):
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


def child_argv(argv: Sequence[str]) -> list[str]:
    """The same command line without the supervisor's own option."""
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
    return out


def run(client: Client, config: WorkerConfig, processes: int, argv: Sequence[str],
        **worker_kwargs: Any) -> int:
    """Run one worker in this process, or supervise ``processes`` children."""
    if processes > 1:
        return Supervisor(child_argv(argv), processes, shutdown_timeout=config.shutdown_timeout,
                          burst=config.burst).run()
    worker = Worker(client, config, **worker_kwargs)
    asyncio.run(worker.run(install_signal_handlers=True, close_broker=True))
    return exit_code(worker)


def exit_code(worker: Worker) -> int:
    """The process exit status after run(): EXIT_RECYCLE asks a supervisor for a new one."""
    code = 1 if worker.forced else EXIT_RECYCLE if worker.recycled else 0
    if worker.forced or worker.threads_left:
        # Threads still run user code whose messages were requeued; do not wait for them.
        logging.shutdown()
        os._exit(code)
    return code


def _load(path: str) -> Client:
    module_name, _, attr = path.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in (attr or "client").split("."):
        value = getattr(value, part)
    if callable(value) and not isinstance(value, Client):
        value = value()
    if not isinstance(value, Client):
        raise SystemExit(f"{path} is not a blitzq Client")
    return value


def main(argv: Sequence[str] | None = None,
         load: Callable[[str], Client] = _load) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m blitzq_django.engine")
    sub = parser.add_subparsers(dest="command", required=True)
    worker_parser = sub.add_parser("worker", help="run a worker")
    worker_parser.add_argument("app", help="module:attribute of a Client (or a factory of one)")
    worker_parser.add_argument("--log-level", default=os.environ.get("BLITZQ_LOG_LEVEL", "INFO"))
    add_worker_arguments(worker_parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(process)d: %(message)s")
    try:
        client = load(args.app)
        config = worker_config(vars(args))
        return run(client, config, args.processes, [sys.executable, "-m", "blitzq_django.engine",
                                                    *argv])
    except BlitzqError as exc:
        print(f"blitzq: {exc}", file=sys.stderr)
        return 2
