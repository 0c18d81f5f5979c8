"""``manage.py demo``: a worker process, a few thousand example tasks, a summary.

It starts ``manage.py runworker`` as a separate process on a queue of its own,
enqueues a mix of the shop's tasks (no-ops, DB writes, async calls, flaky ones that
succeed on their third attempt, and a few that are dead-lettered), shows a progress
bar over their completion, stops the worker with SIGTERM and prints a summary.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
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

from blitzq_django import conf
from blitzq_django.engine import Record
from blitzq_django.engine.errors import BlitzqError
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
        try:
            self._wait_ready(worker, log_path)
            states, elapsed, enqueue_s = self._run(client, broker, queue, plan, total,
                                                   options["timeout"], worker)
        finally:
            code = self._stop(worker)
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
            time.sleep(0.05)  # noqa: sleep - polling a starting process's log

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
                    time.sleep(POLL_S)  # noqa: sleep - progress polling at a human pace
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
    from blitzq_django.engine.redis.store import redact

    return redact(url)
