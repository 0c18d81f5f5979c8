"""``manage.py blitzq <command>``: the ops command line on the project's client.

stats, workers, health, schedules, inspect, cancel, purge, forget-queue, dead-letters, events,
workflow: the same commands, flags, output and exit codes as ``python -m
blitzq_django.engine <command> APP`` (one implementation, engine/cli/ops.py; docs/cli.md),
with ``get_client()`` as the client.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import queues
from ...engine.cli import ops as ops_cli
from ...history import cli as history_cli
from ...runtime import get_client
from ...settings import get_settings, redact_names


class Command(BaseCommand):
    help = ("Look at and operate the blitzq queues: stats, workers, health, schedules, inspect, "
            "cancel, purge, forget-queue, dead-letters, events, workflow (inspect, cancel); "
            "task history: history, prune-history. Exit codes: 0 done, "
            "1 not found or nothing matched, 2 usage or bad input, 3 Redis unavailable, 4 refused.")
    # Ops must work on a project whose other apps have failing checks (that is often
    # when an operator needs them); our own settings are checked by get_client().
    requires_system_checks: list[str] = []
    # call_command("blitzq", "purge", "q", stdin=io.StringIO("y\n")): the answer to
    # the confirmation, as createsuperuser takes it.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        ops_cli.add_commands(commands)
        # Task history (the database's, not Redis's): history, prune-history.
        history_cli.add_commands(commands)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            settings = get_settings()
            client = get_client()
        except ImproperlyConfigured as exc:
            raise CommandError(f"blitzq is misconfigured: {exc}",
                               returncode=ops_cli.EXIT_USAGE) from None
        # The raw streams, not self.stdout/self.stderr: an OutputWrapper ends every write
        # with a newline, which would put the answer to a confirmation on the next line.
        console = ops_cli.Console.standard(options.get("stdout") or sys.stdout,
                                           options.get("stderr") or sys.stderr,
                                           options.get("stdin") or sys.stdin)
        ops = ops_cli.Ops(client, console, queues=queues.named(settings),
                          redact=redact_names())
        try:
            ops_cli.perform(ops, argparse.Namespace(**options))
        except ops_cli.Failure as failure:
            # Django prints "CommandError: ..." and exits with the code; call_command
            # raises it with .returncode.
            raise CommandError(str(failure), returncode=failure.code) from None
