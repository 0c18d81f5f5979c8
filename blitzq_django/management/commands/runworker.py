"""``manage.py runworker``: run a blitzq worker in this process until SIGTERM/SIGINT.

List ``blitzq_django`` BEFORE ``channels`` in INSTALLED_APPS: Channels ships a
``runworker`` command too, and the first app listed wins the name (check blitzq.W001).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import periodic, queues, schema
from ...db_connections import close_old_connections_if_opened
from ...engine import Worker
from ...engine.cli import main as cli
from ...engine.errors import BlitzqError
from ...engine.worker import supervision
from ...registry import registry
from ...runtime import get_client
from ...serving import reloading
from ...serving.companions import Running
from ...serving.pool import process_pool_options
from ...settings import get_settings
from ...signals import worker_listeners
from ...tasks import configured as django_tasks
from .. import banner
from ..logs import LOG_LEVELS, add_log_format_argument, configure_logging


class Command(BaseCommand):
    help = (
        "Run a blitzq worker: fetch messages from Redis and run their tasks until SIGTERM or "
        "SIGINT (graceful: running attempts finish or are requeued; a second signal forces "
        "exit). Note: put 'blitzq_django' before 'channels' in INSTALLED_APPS, since Channels "
        "has a runworker command too."
    )
    # Our settings are validated in handle() with a one-line error; the rest of the
    # checks still run there, so a worker never starts on a broken project.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        # The engine CLI's options: one definition for both ways of running a worker.
        cli.add_worker_arguments(parser)
        # None: BLITZQ["PROCESSES"] (the engine CLI's default is 1).
        parser.set_defaults(processes=None)
        parser.add_argument(
            "--reload", action=argparse.BooleanOptionalAction, default=None,
            help="restart the worker when a Python file changes, gracefully (default: "
                 "settings.DEBUG; never with --processes above 1)")
        parser.add_argument(
            "--log-level", choices=sorted(LOG_LEVELS), type=str.upper, default=None,
            help="level of the 'blitzq' logger (default: from --verbosity, INFO at 1)")
        add_log_format_argument(parser)
        parser.add_argument(
            "--history", action=argparse.BooleanOptionalAction, default=True,
            help="run the task history writer beside the worker when BLITZQ['HISTORY'] is "
                 "on (default); --no-history when `manage.py runhistory` runs elsewhere")
        parser.add_argument(
            "--with-scheduler", action="store_true",
            help="also dispatch periodic tasks, as runscheduler does (docs/scheduling.md)")

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"], options.get("log_level"),
                          options.get("log_format"))
        try:
            merged = get_settings()
            client = get_client()
        except ImproperlyConfigured as exc:
            raise CommandError(f"blitzq is misconfigured: {exc}") from None
        if options.get("processes") is None:
            options["processes"] = merged["PROCESSES"]
        reload = options.get("reload")
        if reload is None:
            reload = settings.DEBUG and options["processes"] == 1 and not options["burst"]
        if reload and options["processes"] > 1:
            raise CommandError("--reload runs one worker process; drop --processes")
        if reload and not reloading.in_child():
            # The parent only restarts children; each child checks and runs the worker.
            code = reloading.run_parent()
            if code:
                sys.exit(code)
            return
        schema.refuse_if_missing("runworker")  # not "no such table" at every write
        self.check(display_num_errors=False)
        try:
            # No ping first: a worker started before its Redis waits for it (logging each
            # attempt) instead of exiting, as a service under systemd or Kubernetes must.
            config = cli.worker_config(options, {
                "queues": self._queues(options["queues"], merged, client),
                "concurrency": merged["CONCURRENCY"],
                "threads": merged["THREADS"] or 0,
                "queue_concurrency": dict(merged["QUEUE_CONCURRENCY"]),
                "visibility_timeout": float(merged["VISIBILITY_TIMEOUT"]),
                "max_deliveries": merged["MAX_DELIVERIES"],
                "shutdown_timeout": float(merged["SHUTDOWN_TIMEOUT"]),
                "time_limit_grace": float(merged["TIME_LIMIT_GRACE"]),
            })
        except BlitzqError as exc:
            raise CommandError(str(exc)) from None
        if not config.threads:
            # `def` tasks honour the concurrency (--concurrency or CONCURRENCY) unless
            # THREADS or --threads says otherwise.
            config = replace(config, threads=config.concurrency)
        if merged["BROKER"] == "memory":
            self.stderr.write("BLITZQ['BROKER'] is 'memory': this worker sees only messages "
                              "enqueued in this process.")
            if options["processes"] > 1:
                raise CommandError("--processes needs a Redis broker, not 'memory'")
        if not registry:
            self.stderr.write("No tasks are registered: is there a tasks.py with "
                              "@blitzq_task in an installed app?")
        banner.worker(client, config, merged, options)
        if options["processes"] > 1:
            self._supervise(options, merged, client, config)
            return
        # A listener only when a blitzq signal has a receiver now, or a django.tasks
        # backend of BlitzQ is configured (signals.py): else nothing is paid per message.
        worker = Worker(client, config, around_sync_call=[close_old_connections_if_opened],
                        listeners=listeners(), **process_pool_options(merged))
        # The history writer (a child process, or a thread) and the outbox relay (a
        # thread) run beside the worker.
        companions = Running().start(self._served(merged, config),
                                     without=self._without(options))
        # Without --queues: say which queues are written to after the start (a restart
        # serves them; see blitzq_django/queues.py).
        watch = (queues.Watch(client, config.queues).start()
                 if not options["queues"] and merged["BROKER"] != "memory" else None)
        # --with-scheduler: the periodic tasks too, on a thread (the worker promotes).
        scheduler = (periodic.SchedulerThread(periodic.make_scheduler(promote=False)).start()
                     if options.get("with_scheduler") else None)
        changed = reloading.watch(worker.stop) if reload else None
        try:
            stats = asyncio.run(worker.run(install_signal_handlers=True, close_broker=True))
        except BlitzqError as exc:
            raise CommandError(str(exc)) from None
        finally:
            companions.stop()
            if scheduler is not None:
                scheduler.stop()
            if watch is not None:
                watch.stop()
        if changed is not None and changed.is_set():
            sys.stdout.flush()
            sys.exit(reloading.RELOAD_EXIT_CODE)
        if options["verbosity"] >= 1:
            counts = ", ".join(f"{k} {v}" for k, v in stats.as_dict().items())
            self.stdout.write(f"worker {worker.name} stopped: {counts}")
        sys.stdout.flush()
        if worker.lost_slot and not supervision.supervised() and self._from_command_line():
            # A thread stuck past its time limit: a fresh worker, in this process (its
            # supervisor, under --processes, starts one instead).
            cli.restart_in_place([*cli.relaunch_command(), "--processes", "1"])
        code = cli.exit_code(worker)
        if code:
            sys.exit(code)  # EXIT_RECYCLE: a supervisor starts a new worker

    @staticmethod
    def _served(merged: dict[str, Any], config: Any) -> dict[str, Any]:
        """The settings the companions get: QUEUES with the queues this worker serves
        added (``--queues`` may name queues the settings do not), so that their history
        is written too."""
        return {**merged, "QUEUES": list(dict.fromkeys([*merged["QUEUES"], *config.queues]))}

    @staticmethod
    def _without(options: dict[str, Any]) -> frozenset[str]:
        return frozenset() if options["history"] else frozenset({"history"})

    def _supervise(self, options: dict[str, Any], merged: dict[str, Any], client: Any,
                   config: Any) -> None:
        """``--processes N``: N children, each this same command without --processes. A
        history writer process is started once, here, and the children run none (with
        HISTORY_WRITER "thread", each child runs its own, one of which writes)."""
        if not self._from_command_line():
            raise CommandError("--processes runs this command again in each worker "
                               "process: start runworker from a command line (manage.py, "
                               "django-admin, python -m django), not call_command()")
        # Started the way this process was (manage.py, django-admin, python -m django).
        # --no-reload: under DEBUG each child would otherwise become a reloader of its own.
        argv = [*cli.relaunch_command(), "--no-reload"]
        here = merged["HISTORY_WRITER"] == "process" and options["history"]
        if here:
            argv.append("--no-history")
        companions = (Running().start(self._served(merged, config), only={"history"})
                      if here else None)
        try:
            code = cli.run(client, config, options["processes"], argv)
        finally:
            if companions is not None:
                companions.stop()
        if code:  # forced, or a child that kept failing to start: logged above
            raise CommandError(f"the worker processes stopped with exit status {code} (see "
                               "the log above)")

    @staticmethod
    def _from_command_line() -> bool:
        """Whether this process is this command run from a command line, and not
        call_command() in some other program (whose command line is not ours to run)."""
        return sys.argv[1:2] == ["runworker"]

    def _queues(self, given: list[str], merged: dict[str, Any], client: Any
                ) -> tuple[str, ...]:
        """--queues, or what a default runworker serves (blitzq_django/queues.py): the
        queues the project names, and those Redis has seen a message written to."""
        if given:
            chosen = cli.parse_queues(given)
            strangers, why = queues.unknown(chosen, client)
            for queue in strangers:
                self.stderr.write(f"warning: queue {queue!r} is named by no setting and no "
                                  "task, and no message was ever written to it: a typo?")
            if why:
                self.stderr.write(f"warning: cannot tell whether the queues of --queues "
                                  f"were ever written to: {why}")
            return chosen
        try:
            return queues.served_by_default(client, merged)
        except (BlitzqError, OSError) as exc:
            # A worker waits for its Redis rather than exit: it serves the named queues,
            # and the watch warns about the others once Redis answers.
            self.stderr.write(f"warning: cannot read the queues Redis has seen ({exc}): "
                              "serving the queues the project names")
            return tuple(queues.named(merged))


def listeners() -> list[Any]:
    """The worker's listeners: the BlitzQ signals' and the django.tasks backend's, each
    only when it has something to send (a worker without any pays nothing per message)."""
    return [*worker_listeners(), *django_tasks.worker_listeners()]
