"""``manage.py blitzq history`` and ``manage.py blitzq prune-history``.

They plug into the ops command line (engine/cli/ops.py): same ``--json``, same exit
codes (0 done, 1 nothing matched, 2 bad input), same progress bars (terminals only).
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from django.utils import timezone

from ..engine.cli import ops as ops_cli
from ..engine.cli.ops import EXIT_NOT_FOUND, EXIT_USAGE, Failure, Ops
from ..settings import get_settings

#: Rows deleted per statement by prune-history (a long DELETE would hold its locks and
#: bloat one transaction; batches let the writer go on between them).
PRUNE_BATCH = 2000
STATES = ("queued", "scheduled", "running", "retrying", "succeeded", "failed",
          "dead_lettered", "cancelled", "expired")


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 36_500:
        raise argparse.ArgumentTypeError(f"must be a number of days from 0 to 36500, "
                                         f"not {text!r}")
    return value


def add_commands(subparsers: Any) -> None:
    """Add ``history`` and ``prune-history`` to the ``manage.py blitzq`` subcommands."""
    history = subparsers.add_parser("history", help="task history rows, newest first",
                                    description="Task history rows (TaskRecord), newest "
                                    "first.")
    history.add_argument("--task", help="only this task name")
    history.add_argument("--state", choices=STATES, help="only rows in this state")
    history.add_argument("--queue", "-Q", help="only this queue")
    history.add_argument("--id", help="only this task id")
    history.add_argument("--workflow", metavar="ID",
                         help="only the steps of this workflow (in their tree's order)")
    history.add_argument("--limit", type=int, default=20, help="rows shown (default 20)")
    history.add_argument("--json", action="store_true",
                         help="print one JSON document instead of text")
    history.set_defaults(handler=run_history)

    prune = subparsers.add_parser(
        "prune-history", help="delete finished history rows older than the retention",
        description="Delete history rows that finished more than --older-than days ago "
        "(default BLITZQ['HISTORY_RETENTION']); unfinished rows are kept unless --state "
        "names their state (then their enqueue time counts).")
    prune.add_argument("--older-than", type=_days, default=None, metavar="DAYS",
                       help="age in days (default: BLITZQ['HISTORY_RETENTION'])")
    prune.add_argument("--state", choices=STATES, action="append",
                       help="only rows in this state (repeatable)")
    prune.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    prune.add_argument("--json", action="store_true",
                       help="print one JSON document instead of text")
    prune.set_defaults(handler=run_prune)


def shown(row: Any) -> dict[str, Any]:
    return {"task_id": row.task_id, "task": row.task_name, "queue": row.queue,
            "state": row.state, "attempt": row.attempt, "args": row.args,
            "kwargs": row.kwargs, "result": row.result, "error_type": row.error_type,
            "error_message": row.error_message, "worker": row.worker,
            "idempotency_key": row.idempotency_key, "enqueued": row.created_at,
            "started": row.started_at, "finished": row.finished_at,
            "workflow_id": row.workflow_id, "workflow_node": row.workflow_node,
            "workflow_path": row.workflow_path}


def tree_order(row: Any) -> tuple[bool, list[int]]:
    """A workflow step's place as numbers, on_error last."""
    return (row.workflow_node == "e",
            [int(p) if p.isdigit() else 0 for p in row.workflow_path.split(".") if p])


def run_history(ops: Ops, args: argparse.Namespace) -> None:
    # lazy: app loading
    from ..models import TaskRecord

    if not 1 <= args.limit <= 10_000:
        raise Failure(EXIT_USAGE, "--limit must be from 1 to 10000")
    rows = TaskRecord.objects.order_by("-created_at", "-id")
    if args.task:
        rows = rows.filter(task_name=args.task)
    if args.state:
        rows = rows.filter(state=args.state)
    if args.queue:
        rows = rows.filter(queue=args.queue)
    if args.id:
        rows = rows.filter(task_id=args.id)
    if args.workflow:
        # Its steps in the tree's order ("0.10" after "0.9", on_error last): at most
        # --limit of them, sorted here.
        found = sorted(rows.filter(workflow_id=args.workflow)[:args.limit], key=tree_order)
    else:
        found = list(rows[:args.limit])
    if args.json:
        ops.console.document({"rows": [shown(r) for r in found]})
    else:
        for r in found:
            finished = r.finished_at.isoformat(timespec="seconds") if r.finished_at else "-"
            error = f" {r.error_type}: {r.error_message[:60]}" if r.error_type else ""
            place = (f"  workflow {r.workflow_id} at {r.workflow_path or r.workflow_node}"
                     if r.workflow_id else "")
            ops.console.line(f"{r.created_at.isoformat(timespec='seconds')}  {r.task_id}  "
                             f"{r.task_name}  {r.queue}  {r.state}  attempt {r.attempt}  "
                             f"finished {finished}{error}{place}")
    if not found:
        raise Failure(EXIT_NOT_FOUND, "no history rows matched")


def prune_query(older_than_days: float, states: list[str] | None, now: dt.datetime) -> Any:
    """The rows prune-history deletes."""
    # lazy: app loading
    from django.db.models import Q

    # lazy: app loading
    from ..models import FINAL_STATES, TaskRecord

    cutoff = now - dt.timedelta(days=older_than_days)
    final = sorted(str(s) for s in FINAL_STATES)
    chosen = states or final
    done = [s for s in chosen if s in final]
    open_ = [s for s in chosen if s not in final]
    where = Q(state__in=done, finished_at__lt=cutoff)
    if open_:
        where |= Q(state__in=open_, created_at__lt=cutoff)
    return TaskRecord.objects.filter(where)


def prune_workflows_query(older_than_days: float, states: list[str] | None,
                          now: dt.datetime) -> Any:
    """The WorkflowRecord rows prune-history deletes: workflows that ended before the
    cutoff (in one of ``states`` when given: succeeded, failed, cancelled are theirs too);
    a running one is kept, as a task that has not finished is."""
    # lazy: app loading
    from ..models import WorkflowRecord

    rows = WorkflowRecord.objects.filter(
        finished_at__lt=now - dt.timedelta(days=older_than_days))
    return rows.filter(state__in=states) if states else rows


def run_prune(ops: Ops, args: argparse.Namespace) -> None:
    # lazy: app loading
    from ..models import TaskRecord

    days = args.older_than
    if days is None:
        days = float(get_settings()["HISTORY_RETENTION"])
    rows = prune_query(days, args.state, timezone.now())
    total = rows.count()
    deleted = 0
    if not args.dry_run and total:
        with ops_cli.progress(ops, total, "prune-history") as advance:
            while True:
                ids = list(rows.order_by().values_list("pk", flat=True)[:PRUNE_BATCH])
                if not ids:
                    break
                count, _ = TaskRecord.objects.filter(pk__in=ids).delete()
                deleted += count
                advance(count)
    flows = prune_workflows_query(days, args.state, timezone.now())
    workflows = flows.count()
    if not args.dry_run and workflows:
        workflows, _ = flows.delete()  # two events per workflow: few rows
    if args.json:
        ops.console.document({"older_than_days": days, "matched": total, "deleted": deleted,
                              "workflows": workflows, "dry_run": bool(args.dry_run)})
    elif args.dry_run:
        ops.console.line(f"{total} history rows and {workflows} workflows older than "
                         f"{days:g} days would be deleted")
    else:
        ops.console.line(f"deleted {deleted} history rows and {workflows} workflows older "
                         f"than {days:g} days")
