"""``manage.py runhistory``: the task history writer as a process of its own.

``runworker`` already runs one beside each worker (this command, as its child:
history/process.py); run this one instead (or as well: one writer per queue is active
at a time, the others stand by) when workers should not touch the database. Stops on
SIGTERM or SIGINT after the batch in hand is written.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import schema
from ...engine.cli import main as cli
from ...engine.errors import BlitzqError
from ...history import history_queues, writer_for
from ...history.process import stop_at_stdin_eof
from ...history.writer import BATCH
from ...settings import get_settings
from ..logs import LOG_LEVELS, add_log_format_argument, configure_logging


class Command(BaseCommand):
    help = ("Write task history (TaskRecord rows) from the queues' events until SIGTERM or "
            "SIGINT. One writer per queue is active at a time; others stand by.")
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", "-Q", nargs="+", default=[], metavar="QUEUE",
                            help="queues to write the history of (default: every queue "
                            "of the settings, declared tasks and ROUTES)")
        parser.add_argument("--batch", type=int, default=BATCH,
                            help=f"events per read and transaction (default {BATCH})")
        parser.add_argument(
            "--log-level", choices=sorted(LOG_LEVELS), type=str.upper, default=None,
            help="level of the 'blitzq' logger (default: from --verbosity, INFO at 1)")
        add_log_format_argument(parser)
        parser.add_argument(
            "--until-stdin-closes", action="store_true",
            help="stop at end of file on stdin, and ignore SIGINT (runworker's child "
                 "writer: it stops with its parent, which handles Ctrl-C)")

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"], options.get("log_level"),
                          options.get("log_format"))
        try:
            settings = get_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(f"blitzq is misconfigured: {exc}") from None
        schema.refuse_if_missing("runhistory")
        self.check(display_num_errors=False)
        if not 1 <= options["batch"] <= 10_000:
            raise CommandError("--batch must be from 1 to 10000")
        try:
            queues = (list(cli.parse_queues(options["queues"])) if options["queues"]
                      else history_queues(settings))
        except BlitzqError as exc:
            raise CommandError(str(exc)) from None
        writer = writer_for(settings, queues, batch=options["batch"])
        if writer is None:
            raise CommandError("task history is off (BLITZQ['HISTORY'] is 'off' or "
                               "BLITZQ['EVENTS'] is False)")
        stop = threading.Event()

        def on_signal(signum: int, frame: Any) -> None:
            if stop.is_set():
                raise SystemExit(1)  # a second signal: leave now
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        if options["until_stdin_closes"]:
            # Ctrl-C reaches the whole process group: runworker shuts down, then closes
            # our stdin.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            threading.Thread(target=stop_at_stdin_eof, args=(stop,),
                             name="blitzq-history-stdin", daemon=True).start()
        if options["verbosity"] >= 1:
            self.stdout.write(f"history writer {writer.name} on {', '.join(queues)} "
                              f"({settings['HISTORY']})")
        sys.stdout.flush()
        try:
            writer.run(stop)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if options["verbosity"] >= 1:
            s = writer.stats
            self.stdout.write(f"history writer stopped: events {s.events}, rows {s.rows}, "
                              f"batches {s.batches}")
