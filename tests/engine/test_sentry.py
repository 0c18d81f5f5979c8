"""Sentry out of the box: a project that calls ``sentry_sdk.init()`` (its default
integrations, among them logging) gets an event for each task failure, with the
exception's frames and the task's tags (engine/worker/tasklog.py).

The worker runs in a process of its own (Sentry's integrations patch the process for
good), on a real Redis, with the real sentry-sdk; its transport keeps the envelopes in
memory (no network) and the process prints their events as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

WORKER = r"""
import asyncio, json, os, sys
import sentry_sdk
from sentry_sdk.transport import Transport

class InMemory(Transport):
    def __init__(self, options=None):
        super().__init__(options)
        self.envelopes = []

    def capture_envelope(self, envelope):
        self.envelopes.append(envelope)

transport = InMemory()
options = {}
if sys.argv[2] == "warning":
    import logging
    from sentry_sdk.integrations.logging import LoggingIntegration

    options["integrations"] = [LoggingIntegration(event_level=logging.WARNING)]
sentry_sdk.init(dsn="https://public@sentry.invalid/1", transport=transport, **options)

from blitzq_django.engine import Client, RedisBroker, Worker

client = Client(RedisBroker(os.environ["REDIS_URL"], namespace=sys.argv[1]))

@client.task(name="shop.validate_card", retries=1, initial_delay=0)
def validate_card(number):
    raise ValueError(f"card {number[-4:]} declined")

@client.task(name="shop.refund")
async def refund(order):
    raise LookupError(f"no payment for order {order}")

ids = [validate_card.enqueue("4242424242424242").id, refund.enqueue(7).id]
asyncio.run(Worker(client, burst=True, block_timeout=0.05).run(close_broker=True))
sentry_sdk.flush()
events = [item.payload.json for envelope in transport.envelopes for item in envelope.items
          if item.type == "event"]
redis = client.broker.sync.client
for key in redis.scan_iter(match=client.broker.keys.all_keys_pattern()):
    redis.delete(key)
print(json.dumps({"ids": ids, "events": events}, default=str))
"""


def run_worker(redis_url: str, namespace: str, event_level: str = "default"
               ) -> dict[str, Any]:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the engine alone, as a non-Django project
    done = subprocess.run([sys.executable, "-c", WORKER, namespace, event_level], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_failing_task_is_a_sentry_event_with_its_traceback_and_tags(
        redis_url: str, namespace: str) -> None:
    out = run_worker(redis_url, namespace)
    card_id, refund_id = out["ids"]
    # One event per final failure; the retried attempt's WARNING is no event (Sentry's
    # logging integration makes events of ERROR and above).
    events = {event["tags"]["blitzq.task"]: event for event in out["events"]}
    assert sorted(events) == ["shop.refund", "shop.validate_card"], out["events"]

    card = events["shop.validate_card"]
    assert card["level"] == "error" and card["logger"] == "blitzq.task"
    (exception,) = card["exception"]["values"]
    assert exception["type"] == "ValueError" and exception["value"] == "card 4242 declined"
    frames = exception["stacktrace"]["frames"]
    assert frames[-1]["function"] == "validate_card"  # the task's own frame, where it raised
    assert card["tags"] == {"blitzq.task": "shop.validate_card", "blitzq.task_id": card_id,
                            "blitzq.queue": "default", "blitzq.attempt": "2",
                            "blitzq.outcome": "dead_lettered"}
    assert card["extra"]["task_id"] == card_id and card["extra"]["max_attempts"] == 2
    assert "dead-lettered (retries exhausted)" in card["logentry"]["formatted"]

    refund = events["shop.refund"]  # an async task; its tags are its own, not the first's
    (exception,) = refund["exception"]["values"]
    assert exception["type"] == "LookupError"
    assert exception["stacktrace"]["frames"][-1]["function"] == "refund"
    assert refund["tags"]["blitzq.task_id"] == refund_id
    assert refund["tags"]["blitzq.attempt"] == "1"


def test_warnings_are_events_too_when_the_integration_says_so(redis_url: str,
                                                               namespace: str) -> None:
    out = run_worker(redis_url, namespace, event_level="warning")
    card_id, _refund_id = out["ids"]
    card = [e for e in out["events"] if e["tags"]["blitzq.task_id"] == card_id]
    assert [(e["level"], e["tags"]["blitzq.attempt"], e["tags"]["blitzq.outcome"])
            for e in card] == [("warning", "1", "retrying"), ("error", "2", "dead_lettered")]
    assert card[0]["exception"]["values"][0]["type"] == "ValueError"
