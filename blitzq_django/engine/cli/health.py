"""``health``: whether this process's or this host's workers are alive and Redis answers.

For liveness and readiness probes (docs/deployment.md): exit status 0 when healthy, 1
when not, with what is wrong on stderr (and in the document with ``--json``). A worker
is alive when its registry entry is there: each worker rewrites it every heartbeat and it
expires on its own (3 heartbeats, at least 5 s), so a killed or stuck worker drops out;
``--max-age`` asks for a fresher beat than that.
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
from typing import TYPE_CHECKING, Any

from ..core.ids import now_ms
from ..errors import BlitzqError
from .args import number
from .failure import Failure

if TYPE_CHECKING:
    from ..core.registry import WorkerInfo
    from .ops import Ops

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--pid", type=int, action="append", metavar="PID",
                       help="the worker of this process id (repeatable; under --processes "
                            "or --reload, a child's pid, not the supervisor's)")
    scope.add_argument("--host", default=None,
                       help="the workers of this host name (default: this host's, "
                            f"{socket.gethostname()!r} here)")
    scope.add_argument("--any-host", action="store_true",
                       help="any live worker of the namespace")
    scope.add_argument("--redis-only", action="store_true",
                       help="only that Redis answers (web processes, which run no worker)")
    parser.add_argument("--min-workers", type=number("min_workers"), default=1, metavar="N",
                        help="at least N live workers in the scope (default 1)")
    parser.add_argument("--max-age", type=number("heartbeat_age"), default=None,
                        metavar="SECONDS",
                        help="a worker whose last heartbeat is older counts as dead "
                             "(default: only its registry expiry)")


def run_health(ops: Ops, args: argparse.Namespace) -> None:
    problems: list[str] = []
    redis: dict[str, Any] = {"ok": True, "error": None}
    workers: list[WorkerInfo] = []
    try:
        ops.client.broker.ping()
        if not args.redis_only:
            workers = ops.client.workers()
    except (BlitzqError, OSError) as exc:
        redis = {"ok": False, "error": str(exc)}
        problems.append(f"Redis does not answer: {exc}")
    now = now_ms()
    scope, chosen = select(workers, args)
    if redis["ok"] and not args.redis_only:
        beating = [w for w in chosen if args.max_age is None
                   or now - w.heartbeat_ms <= args.max_age * 1000]
        stale = len(chosen) - len(beating)
        if len(beating) < args.min_workers:
            why = f" ({stale} with a heartbeat older than {args.max_age:g} s)" if stale else ""
            problems.append(f"{len(beating)} live worker(s) for {scope}, "
                            f"{args.min_workers} wanted{why}")
    healthy = not problems
    if args.json:
        ops.console.document({
            "healthy": healthy, "redis": redis, "scope": scope,
            "workers": [{**dataclasses.asdict(w), "heartbeat_age_s": (now - w.heartbeat_ms) / 1000}
                        for w in chosen],
            "problems": problems})
    else:
        ops.console.line(f"redis: {'ok' if redis['ok'] else 'unreachable'}")
        if not args.redis_only:
            ops.console.line(f"workers ({scope}): {len(chosen)}")
            for w in chosen:
                ops.console.line(f"  {w.name}  pid {w.pid}  last beat "
                                 f"{(now - w.heartbeat_ms) / 1000:.1f} s ago")
        ops.console.line("healthy" if healthy else "unhealthy")
    if problems:
        raise Failure(EXIT_UNHEALTHY, "; ".join(problems))


def select(workers: list[WorkerInfo], args: argparse.Namespace) -> tuple[str, list[WorkerInfo]]:
    """(what the scope is, in words; the workers in it)."""
    if args.redis_only:
        return "none: --redis-only", []
    if args.any_host:
        return "any host", list(workers)
    if args.pid:
        pids = set(args.pid)
        return f"pid {', '.join(map(str, sorted(pids)))}", [w for w in workers if w.pid in pids]
    host = args.host or socket.gethostname()
    return f"host {host}", [w for w in workers if w.host == host]
