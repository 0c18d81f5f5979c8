"""``manage.py runhistory``: the task history writer as a process of its own.

``runworker`` already runs one beside each worker; run this one instead (or as well:
one writer per queue is active at a time, the others stand by) when workers should not
touch the database. Stops on SIGTERM or SIGINT after the batch in hand is written.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import conf
from ...engine import cli
from ...engine.errors import BlitzqError
from ...history import history_queues, writer_for
from ...history.writer import BATCH
from ..logs import configure_logging


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

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        try:
            settings = conf.get_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(f"blitzq is misconfigured: {exc}") from None
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
