"""Example tasks: autodiscovered by blitzq_django's AppConfig.ready()."""

from __future__ import annotations

import asyncio
import random

from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import current_task

from .models import Order


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
