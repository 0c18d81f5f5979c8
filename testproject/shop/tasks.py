"""Example tasks: autodiscovered by blitzq_django's AppConfig.ready()."""

from __future__ import annotations

import asyncio
import os
import random
import signal

from blitzq_django import blitzq_task, current_task
from blitzq_django.periodic import periodic

from .models import Delivery, Order


@blitzq_task
def noop() -> None:
    """Does nothing: measures the queue itself."""


@blitzq_task(retries=3, initial_delay=0.1)
def create_order(reference: str, amount_cents: int) -> int:
    """Writes a row. get_or_create keeps it idempotent: delivery is at-least-once, so a
    message recovered after a worker crash may run twice."""
    order, _ = Order.objects.get_or_create(reference=reference,
                                           defaults={"amount_cents": amount_cents})
    return order.pk


@blitzq_task(timeout=5)
async def fetch_exchange_rate(currency: str) -> float:
    """An async call to a (simulated) remote API: runs on the worker's event loop."""
    await asyncio.sleep(random.uniform(0.005, 0.02))
    return {"EUR": 1.0, "USD": 1.08, "GBP": 0.85}.get(currency, 1.0)


class GatewayTimeout(ConnectionError):
    pass


@blitzq_task(retries=3, initial_delay=0.05, max_delay=0.5)
def charge_card(reference: str, fail_times: int = 2) -> str:
    """A flaky payment gateway: attempts 1..fail_times fail, then it succeeds."""
    task = current_task()
    attempt = task.attempt if task else 1
    if attempt <= fail_times:
        raise GatewayTimeout(f"payment gateway timed out (simulated, attempt {attempt})")
    return f"charged {reference} on attempt {attempt}"


@blitzq_task(retries=1, initial_delay=0.05, jitter=False)
def validate_card(number: str) -> None:
    """Always rejects: after its one retry the message is dead-lettered."""
    raise ValueError(f"card {number[-4:]} declined (simulated)")


@blitzq_task(effectively_once=True)
def record_delivery(reference: str) -> int:
    """Inserts a Delivery row each time its body runs (no unique constraint), made
    effectively-once: a redelivered message returns the first run's result instead.

    Fault tests: when BLITZQ_TEST_KILL_AFTER_COMMIT lists ``reference`` (comma-separated),
    the worker SIGKILLs itself right after the commit, before Redis hears of the outcome.
    """
    from django.db import transaction

    row = Delivery.objects.create(reference=reference)
    doomed = os.environ.get("BLITZQ_TEST_KILL_AFTER_COMMIT", "")
    if doomed and reference in doomed.split(","):
        transaction.on_commit(lambda: os.kill(os.getpid(), signal.SIGKILL))
    return row.pk


@periodic(every=60, missed="skip")
def count_orders() -> int:
    """A periodic task (docs/scheduling.md): every minute, on the minute, while a
    ``manage.py runscheduler`` (or ``runworker --with-scheduler``) runs; ``manage.py blitzq
    schedules`` shows its last run, next run and outcome."""
    return Order.objects.count()


@blitzq_task(schedule={"cron": "30 2 * * *", "tz": "Europe/Berlin", "kwargs": {"days": 30}})
def purge_old_deliveries(days: int) -> int:
    """Nightly at 02:30 Berlin time: a cron schedule with a zone (on the night clocks jump
    from 02:00 to 03:00 there is no 02:30, and it does not run)."""
    import datetime as dt

    from django.utils import timezone

    cutoff = timezone.now() - dt.timedelta(days=days)
    deleted, _ = Delivery.objects.filter(created_at__lt=cutoff).delete()
    return deleted


@blitzq_task(timeout=600)
def export_orders(rows: int = 20, seconds_per_row: float = 0.1) -> dict[str, int]:
    """A slow export that reports its progress (docs/progress.md): /shop/export/ enqueues
    it for the logged-in user and shows its bar moving."""
    import time

    task = current_task()
    for row in range(rows):
        time.sleep(seconds_per_row)  # the slow part: writing one row somewhere
        if task is not None:
            task.progress(row + 1, rows, note=f"row {row + 1} of {rows}")
    return {"rows": rows}


@blitzq_task(timeout=600)
async def export_orders_async(rows: int = 20, seconds_per_row: float = 0.1) -> dict[str, int]:
    """export_orders as an ``async def`` task: progress() is the same call."""
    task = current_task()
    for row in range(rows):
        await asyncio.sleep(seconds_per_row)
        if task is not None:
            task.progress(row + 1, rows, note=f"row {row + 1} of {rows}")
    return {"rows": rows}
