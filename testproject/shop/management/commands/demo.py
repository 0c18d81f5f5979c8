"""``manage.py demo``: a worker process, a few thousand example tasks, a summary.

It starts ``manage.py runworker`` as a separate process on a queue of its own,
enqueues a mix of the shop's tasks (no-ops, DB writes, async calls, flaky ones that
succeed on their third attempt, and a few that are dead-lettered), shows a progress
bar over their completion, stops the worker with SIGTERM and prints a summary.

With ``--serve`` it also starts daphne on the example project (the admin and its live
dashboard, docs/dashboard.md), makes a ``demo`` superuser with a fresh password, prints
the dashboard's URL and login, and after the batch keeps the worker running and a
trickle of tasks coming (in waves, a few failing) until Ctrl-C.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

from blitzq_django import BlitzqError, Record, conf
from testproject.shop import tasks
from testproject.shop.models import Order

POLL_S = 0.1
CHUNK = 250  # messages per enqueue_many call, interleaved between the tasks


class Command(BaseCommand):
    help = "Run the blitzq demo: a runworker process, N example tasks, a summary."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tasks", type=int, default=3000, help="How many tasks (3000).")
        parser.add_argument("--concurrency", type=int, default=64,
                            help="The worker's --concurrency (64).")
        parser.add_argument("--timeout", type=float, default=45.0,
                            help="Give up waiting for completion after this many seconds.")
        parser.add_argument("--keep", action="store_true",
                            help="Keep the demo queue's keys in Redis afterwards.")
        parser.add_argument("--serve", action="store_true",
                            help="Also serve the admin and its live dashboard (daphne), and "
                                 "keep the worker and a trickle of tasks running until Ctrl-C.")
        parser.add_argument("--port", type=int, default=8000,
                            help="The port of --serve (8000), on 127.0.0.1.")

    def handle(self, *args: Any, **options: Any) -> None:
        self._check_migrated()
        try:
            client = conf.get_client()
            conf.check_connection(client)
        except (ImproperlyConfigured, BlitzqError) as exc:
            raise CommandError(str(exc)) from None
        if conf.get_settings()["BROKER"] != "redis":
            raise CommandError("the demo needs BLITZQ['BROKER'] = 'redis': its worker is a "
                               "separate process")
        broker: Any = client.broker
        queue = f"demo-{uuid.uuid4().hex[:8]}"
        plan = self._plan(options["tasks"], queue)
        total = sum(len(calls) for _, calls in plan)

        log_path = Path(settings.BASE_DIR) / ".demo" / "worker.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.stdout.write(f"Redis: {_redact(broker.url)}   queue: {queue}   "
                          f"database: {connections[DEFAULT_DB_ALIAS].vendor}")
        self.stdout.write(f"starting worker: manage.py runworker --queues {queue} "
                          f"--concurrency {options['concurrency']} (log: {log_path})")
        with log_path.open("w") as log:
            worker = subprocess.Popen(
                [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "runworker",
                 "--queues", queue, "--concurrency", str(options["concurrency"]),
                 "--shutdown-timeout", "10", "--no-reload", "--with-scheduler"],
                # The child uses this very Redis (the embedded one included).
                env={**os.environ, "REDIS_URL": broker.url, "PYTHONUNBUFFERED": "1"},
                cwd=settings.BASE_DIR, stdout=log, stderr=subprocess.STDOUT)
        server = None
        try:
            if options["serve"]:
                server = self._serve(broker, options["port"], log_path.parent / "daphne.log")
            self._wait_ready(worker, log_path)
            states, elapsed, enqueue_s = self._run(client, broker, queue, plan, total,
                                                   options["timeout"], worker)
            if server is not None:
                self._breathe(queue, worker, server, states, total, elapsed)
        finally:
            code = self._stop(worker)
            if server is not None:
                self._stop(server)
        self._summary(states, total, elapsed, enqueue_s, broker, queue, code, log_path)
        self._schedules(client)
        if not options["keep"]:
            self._purge(broker, queue)
        if sum(states.values()) < total:
            raise CommandError(f"only {sum(states.values())} of {total} tasks finished "
                               f"within {options['timeout']} s")

    # -- steps ---------------------------------------------------------------

    def _check_migrated(self) -> None:
        connection = connections[DEFAULT_DB_ALIAS]
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError("the database is not migrated: run `python manage.py migrate`")

    def _serve(self, broker: Any, port: int, log_path: Path) -> subprocess.Popen[bytes]:
        """daphne on the example project (admin + dashboard socket), a demo superuser."""
        from django.contrib.auth import get_user_model

        password = secrets.token_urlsafe(9)
        user, _ = get_user_model().objects.get_or_create(
            username="demo", defaults={"is_staff": True, "is_superuser": True})
        user.is_staff = user.is_superuser = user.is_active = True
        user.set_password(password)
        user.save()
        with log_path.open("w") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                 "testproject.asgi:application"],
                env={**os.environ, "REDIS_URL": broker.url, "PYTHONUNBUFFERED": "1"},
                cwd=settings.BASE_DIR, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                self._stop(server)
                raise CommandError(f"daphne did not start on port {port} (another server "
                                   f"there? try --port):\n" + log_path.read_text()[-2000:])
            time.sleep(0.1)  # (noqa: sleep) polling a starting server's port
        url = f"http://127.0.0.1:{port}/admin/blitzq_django/queueoverview/dashboard/"
        self.stdout.write(self.style.SUCCESS(f"dashboard: {url}"))
        self.stdout.write(f"  log in as demo / {password}   (daphne log: {log_path})")
        return server

    def _breathe(self, queue: str, worker: subprocess.Popen[bytes],
                 server: subprocess.Popen[bytes], states: Counter[str], total: int,
                 elapsed: float) -> None:
        """Keep tasks coming, in waves, until Ctrl-C (or the worker or server exits)."""
        self.stdout.write(f"the first {sum(states.values())} of {total} tasks finished in "
                          f"{elapsed:.1f} s; now a trickle of tasks until Ctrl-C...")
        noop, fetch, flaky, doomed = (task.options(queue=queue) for task in (
            tasks.noop, tasks.fetch_exchange_rate, tasks.charge_card, tasks.validate_card))
        started = time.monotonic()
        tick = 0
        try:
            while worker.poll() is None and server.poll() is None:
                tick += 1
                wave = 60 + 55 * math.sin((time.monotonic() - started) / 15)
                noop.enqueue_many([() for _ in range(int(wave))])
                fetch.enqueue_many([("EUR",) for _ in range(int(wave) // 5)])
                if tick % 3 == 0:
                    flaky.enqueue(f"{queue}-serve-{tick}")
                if tick % 10 == 0:
                    doomed.enqueue(f"4000-0000-0000-{random.randrange(10_000):04d}")
                time.sleep(1.0)  # (noqa: sleep) the demo's pace, a second per wave step
        except KeyboardInterrupt:
            self.stdout.write("\nstopping the worker and the server...")

    @staticmethod
    def _wait_ready(worker: subprocess.Popen[bytes], log_path: Path) -> None:
        """Wait for the worker to serve, so tasks/s measures the queue, not Django's boot."""
        deadline = time.monotonic() + 30
        while "serving" not in log_path.read_text():
            if worker.poll() is not None:
                raise CommandError(f"the worker exited with code {worker.returncode}:\n"
                                   + log_path.read_text()[-2000:])
            if time.monotonic() > deadline:
                raise CommandError(f"the worker did not start within 30 s (see {log_path})")
            time.sleep(0.05)  # (noqa: sleep) polling a starting process's log

    @staticmethod
    def _plan(n: int, queue: str) -> list[tuple[Any, list[Any]]]:
        doomed = max(1, n // 100)  # 1%: always fail, dead-lettered after one retry
        flaky = max(1, n * 4 // 100)  # 4%: fail twice, succeed on attempt 3
        fetches = n // 10  # 10%: async
        orders = n * 4 // 10  # 40%: write a row
        noops = max(0, n - doomed - flaky - fetches - orders)
        currencies = ("EUR", "USD", "GBP")
        return [
            (tasks.noop, [() for _ in range(noops)]),
            (tasks.create_order, [(f"{queue}-{i}", 100 + i) for i in range(orders)]),
            (tasks.fetch_exchange_rate, [(currencies[i % 3],) for i in range(fetches)]),
            (tasks.charge_card, [(f"{queue}-pay-{i}",) for i in range(flaky)]),
            (tasks.validate_card, [(f"4000-0000-0000-{i:04d}",) for i in range(doomed)]),
        ]

    def _run(self, client: Any, broker: Any, queue: str, plan: list[tuple[Any, list[Any]]],
             total: int, timeout: float, worker: subprocess.Popen[bytes]
             ) -> tuple[Counter[str], float, float]:
        from tqdm import tqdm

        started = time.monotonic()
        waiting: dict[str, str] = {}  # message id -> record key
        keys = broker.keys.queue(queue)
        offset = 0
        while any(offset < len(calls) for _, calls in plan):
            for task, calls in plan:
                for handle in task.options(queue=queue).enqueue_many(calls[offset:offset + CHUNK]):
                    waiting[handle.id] = keys.record(handle.id)
            offset += CHUNK
        enqueue_s = time.monotonic() - started
        states: Counter[str] = Counter()
        redis = broker.sync.client
        deadline = started + timeout
        tty = sys.stderr.isatty()
        with tqdm(total=total, unit="task", desc="completed", dynamic_ncols=True,
                  mininterval=0.1 if tty else 2.0) as bar:
            while waiting and time.monotonic() < deadline:
                if worker.poll() is not None:
                    self.stderr.write(f"the worker exited with code {worker.returncode}")
                    break
                ids = list(waiting)
                pipe = redis.pipeline(transaction=False)
                for message_id in ids:
                    pipe.get(waiting[message_id])
                done = 0
                for message_id, data in zip(ids, pipe.execute(), strict=True):
                    if data is None:
                        continue
                    record = Record.from_bytes(data)
                    if record.is_final:
                        states[record.state] += 1
                        del waiting[message_id]
                        done += 1
                bar.update(done)
                if waiting:
                    time.sleep(POLL_S)  # (noqa: sleep) progress polling at a human pace
        return states, time.monotonic() - started, enqueue_s

    @staticmethod
    def _stop(worker: subprocess.Popen[bytes]) -> int:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)  # graceful: finish, settle, leave the group
        try:
            return worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            return worker.wait()

    def _summary(self, states: Counter[str], total: int, elapsed: float, enqueue_s: float,
                 broker: Any, queue: str, code: int, log_path: Path) -> None:
        finished = sum(states.values())
        dead = broker.queue_stats(queue)["dead_letters"]
        orders = Order.objects.filter(reference__startswith=f"{queue}-").count()
        w = self.stdout.write
        w("")
        w(self.style.MIGRATE_HEADING("blitzq demo summary"))
        w(f"  tasks finished     {finished} of {total} in {elapsed:.2f} s "
          f"({finished / elapsed:,.0f} tasks/s; enqueueing took {enqueue_s:.2f} s)")
        for state, count in sorted(states.items()):
            w(f"  {state:<18} {count}")
        w(f"  dead letters       {dead} (validate_card always fails; 1 retry, then "
          "dead-lettered)")
        w(f"  orders written     {orders} (create_order, by the worker's thread pool)")
        last = [line for line in log_path.read_text().splitlines() if "stopped" in line]
        w(f"  worker             exit code {code}; {last[-1].strip() if last else 'no summary'}")

    def _schedules(self, client: Any) -> None:
        # The worker ran with --with-scheduler: the project's periodic tasks
        # (shop/tasks.py, docs/scheduling.md) and when they run next.
        for info in client.schedules():
            when = "paused" if info.next_run_ms is None else format(dt.datetime.fromtimestamp(
                info.next_run_ms / 1000, dt.UTC), "next run %Y-%m-%d %H:%M:%S UTC")
            self.stdout.write(f"  periodic           {info.name.rsplit('.', 1)[-1]}: "
                              f"{info.schedule}; {when}; last outcome {info.outcome}")

    @staticmethod
    def _purge(broker: Any, queue: str) -> None:
        redis = broker.sync.client
        pattern = broker.keys.queue(queue).tag + ":*"
        batch = list(redis.scan_iter(match=pattern, count=1000))
        for start in range(0, len(batch), 1000):
            redis.delete(*batch[start:start + 1000])


def _redact(url: str) -> str:
    from blitzq_django.engine.brokers.redis.store import redact

    return redact(url)
