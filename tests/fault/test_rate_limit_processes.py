"""A rate limit holds across worker processes: 20/s over 10 s with 2 processes lands
within 10% (issue 7, item 7).

The worker processes load ``make_client`` below (``python -m blitzq_django.engine worker
tests.fault.test_rate_limit_processes:make_client``), which defines the limited task the
producer enqueues. Each run's start time comes from its record (``started_ms``).
"""

from __future__ import annotations

import collections
import os

import pytest

from blitzq_django.engine import Client, RedisBroker
from blitzq_django.engine.core.record import Record

from ..support.waiting import wait_until
from . import harness
from .harness import Scenario
from .ledger import REPORTS

pytestmark = [pytest.mark.fault, pytest.mark.slow]

APP = "tests.fault.test_rate_limit_processes:make_client"
RATE, WINDOW_S = 20, 10
#: The bucket holds RATE tokens: after a quiet spell, RATE runs start at once. The window
#: opens once that burst is spent, so it measures the rate itself.
BURST_S = 1.0
#: Enough for the burst, the window and a margin after it.
COUNT = RATE + RATE * (WINDOW_S + 3)


def register(client: Client) -> object:
    @client.task(name="fault.rated", rate_limit=f"{RATE}/s")
    async def rated(i: int) -> int:
        return i

    return rated


def make_client() -> Client:
    broker = RedisBroker(os.environ["REDIS_URL"], namespace=os.environ["BLITZQ_NAMESPACE"])
    client = Client(broker, store_results=True)
    register(client)
    return client


def test_a_rate_limit_holds_across_two_worker_processes(
        scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "APP", APP)
    workers = [scenario.worker("--concurrency", "20", "--visibility-timeout", "10")
               for _ in range(2)]
    client = Client(scenario.broker, store_results=True)
    rated = register(client)
    ids = [h.id for h in rated.enqueue_many([(i,) for i in range(COUNT)])]  # type: ignore[attr-defined]

    def finished() -> dict[str, Record] | None:
        records = scenario.records(ids)
        done = {i: r for i, r in records.items() if r is not None and r.is_final}
        return done if len(done) == len(ids) else None

    records = wait_until(finished, COUNT / RATE + 20, interval=0.25,
                                 message=f"{COUNT} rate-limited messages to run")
    for w in workers:
        assert w.alive(), w.text()
    assert all(r.succeeded and r.attempt == 1 for r in records.values())
    by_worker = collections.Counter(r.worker for r in records.values())
    assert len(by_worker) == 2, by_worker  # both processes took their share of the bucket

    starts = sorted(r.started_ms for r in records.values())
    opens = starts[0] + int(BURST_S * 1000)
    closes = opens + WINDOW_S * 1000
    assert starts[-1] >= closes, "the backlog ran out before the window closed"
    in_window = sum(opens <= s < closes for s in starts)
    rate = in_window / WINDOW_S
    per_second = [sum(opens + k * 1000 <= s < opens + (k + 1) * 1000 for s in starts)
                  for k in range(WINDOW_S)]
    overall = (len(starts) - RATE) / ((starts[-1] - starts[0]) / 1000)
    line = (f"[rate] {RATE}/s over {WINDOW_S} s across 2 processes: {rate:.2f}/s in the window "
            f"(per second {per_second}); {overall:.2f}/s over the whole run after the burst "
            f"of {RATE}; runs per process {sorted(by_worker.values())}")
    print(line)
    REPORTS.append(line)
    assert abs(rate - RATE) <= RATE * 0.10, line
