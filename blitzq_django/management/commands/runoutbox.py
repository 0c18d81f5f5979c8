"""``manage.py runoutbox``: publish the transactional outbox to Redis until SIGTERM/SIGINT.

runworker already runs a relay in a thread (unless ``BLITZQ["OUTBOX_RELAY"]`` is
False); this command is for a relay of its own (one per deployment is enough; more
share the rows with ``SKIP LOCKED`` where the database has it). ``--once`` publishes
what is there and exits (a cron job, a deploy step).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import schema
from ...runtime import get_client
from ...settings import get_settings
from ...transactions.outbox import relay_from_settings
from ..logs import add_log_format_argument, configure_logging


class Command(BaseCommand):
    help = ("Publish the transactional outbox (durable enqueues) to Redis until SIGTERM or "
            "SIGINT; --once publishes what is there and exits.")

    def add_arguments(self, parser: CommandParser) -> None:
        add_log_format_argument(parser)
        parser.add_argument("--once", action="store_true",
                            help="publish every row there is, then exit")
        parser.add_argument("--database", action="append", dest="databases", default=None,
                            help="database alias to publish (repeatable; default "
                                 "BLITZQ['OUTBOX_DATABASES'])")
        parser.add_argument("--outbox", action="append", dest="outboxes", default=None,
                            help="outbox name to publish (repeatable; default: all)")
        parser.add_argument("--batch", type=int, default=None,
                            help="rows per Redis round trip (default BLITZQ['OUTBOX_BATCH'])")
        parser.add_argument("--interval", type=float, default=None,
                            help="seconds between looks at an empty outbox (default "
                                 "BLITZQ['OUTBOX_INTERVAL'])")

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"], log_format=options.get("log_format"))
        try:
            merged = get_settings()
            get_client()
        except ImproperlyConfigured as exc:
            raise CommandError(f"blitzq is misconfigured: {exc}") from None
        schema.refuse_if_missing("runoutbox")
        if options["batch"] is not None and not 1 <= options["batch"] <= 1000:
            raise CommandError("--batch must be from 1 to 1000")
        if options["interval"] is not None and not 0.01 <= options["interval"] <= 60:
            raise CommandError("--interval must be from 0.01 to 60 seconds")
        relay = relay_from_settings(merged, databases=options["databases"],
                                    outboxes=options["outboxes"], batch=options["batch"],
                                    interval=options["interval"])
        if options["once"]:
            count = relay.run_once()
            if options["verbosity"] >= 1:
                self.stdout.write(f"published {count} outbox messages")
            return
        stop = threading.Event()

        def stopping(signum: int, frame: Any) -> None:
            if stop.is_set():  # a second signal: leave now
                sys.exit(1)
            stop.set()

        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)
        logging.getLogger("blitzq").info("outbox relay serving databases %s",
                                         ", ".join(relay.databases))
        relay.run(stop)
        if options["verbosity"] >= 1:
            self.stdout.write(f"outbox relay stopped: published {relay.published}")
        sys.stdout.flush()
