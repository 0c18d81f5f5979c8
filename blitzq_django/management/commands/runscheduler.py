"""``manage.py runscheduler``: dispatch periodic tasks (and promote delayed ones) until
SIGTERM/SIGINT.

Run as many as you like (for availability): each occurrence is claimed and dispatched in
one atomic step, so it runs once whatever the number of schedulers (docs/scheduling.md).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import periodic, schema
from ...engine.cli import main as cli
from ...engine.errors import BlitzqError
from ...runtime import get_client
from ...serving import reloading
from ...settings import get_settings
from .. import banner
from ..logs import LOG_LEVELS, add_log_format_argument, configure_logging

log = logging.getLogger("blitzq.scheduler")


class Command(BaseCommand):
    help = ("Run a blitzq scheduler: dispatch the periodic tasks (@periodic, "
            "@blitzq_task(schedule=...), BLITZQ['PERIODIC']) and promote due delayed "
            "messages, until SIGTERM or SIGINT. Any number may run at once: each occurrence "
            "is dispatched once.")
    requires_system_checks: list[str] = []  # checked in handle(), after --reload forks

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_scheduler_arguments(parser)
        parser.add_argument(
            "--reload", action=argparse.BooleanOptionalAction, default=None,
            help="restart the scheduler when a Python file changes (default: settings.DEBUG)")
        parser.add_argument(
            "--log-level", choices=sorted(LOG_LEVELS), type=str.upper, default=None,
            help="level of the 'blitzq' logger (default: from --verbosity, INFO at 1)")
        add_log_format_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"], options.get("log_level"),
                          options.get("log_format"))
        try:
            client = get_client()
        except ImproperlyConfigured as exc:
            raise CommandError(f"blitzq is misconfigured: {exc}") from None
        reload = options.get("reload")
        if reload is None:
            reload = settings.DEBUG
        if reload and not reloading.in_child():
            code = reloading.run_parent()
            if code:
                sys.exit(code)
            return
        schema.refuse_if_missing("runscheduler")  # its database schedules live there
        self.check(display_num_errors=False)  # blitzq.E015/E016: bad or unknown schedules
        if not client.schedule_registry:
            self.stderr.write("No periodic schedules are declared (@periodic, "
                              "@blitzq_task(schedule=...), BLITZQ['PERIODIC']): this "
                              "scheduler only promotes delayed messages.")
        try:
            scheduler = periodic.make_scheduler(
                promote=not options.get("no_promote"),
                queues=cli.parse_queues(options.get("queues") or []),
                poll_interval=options.get("poll_interval") or 0.5,
                name=options.get("name"))
        except BlitzqError as exc:
            raise CommandError(str(exc)) from None
        banner.scheduler(client, scheduler, get_settings())
        changed = reloading.watch(scheduler.stop) if reload else None

        def on_signal(signum: int, frame: Any) -> None:
            log.info("%s: scheduler %s stopping", signal.Signals(signum).name, scheduler.name)
            scheduler.stop()

        # Handlers of the process rather than of the loop: the loop's go when it closes,
        # and a SIGTERM right behind a SIGINT (a Ctrl-C while systemd stops it) then
        # killed the process on its way out. These stay until the command returns.
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            asyncio.run(scheduler.run(close_broker=True))
        except BlitzqError as exc:
            raise CommandError(str(exc)) from None
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if changed is not None and changed.is_set():
            sys.stdout.flush()
            sys.exit(reloading.RELOAD_EXIT_CODE)
        if options["verbosity"] >= 1:
            self.stdout.write(f"scheduler {scheduler.name} stopped: {scheduler.dispatched} "
                              "dispatched")
