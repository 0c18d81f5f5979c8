"""The dashboard's workflow counts (Tally): running and ended workflows from their own
events, each counted once whatever the order and repeats of those events."""

from __future__ import annotations

from typing import Any

from blitzq_django.engine.core.events import Event
from blitzq_django.web.live.aggregator import Tally

T0 = 1_700_000_000_000


def ev(kind: str, id: str, n: int, **more: Any) -> Event:
    return Event(f"{T0 + n}-0", "default", kind, id, "chord", T0 + n, **more)


def test_running_and_failed_workflows_are_counted_once() -> None:
    tally = Tally()
    tally.feed([ev("workflow_started", "a", 1), ev("workflow_started", "b", 2),
                ev("workflow_started", "c", 3), ev("workflow_started", "d", 4),
                ev("workflow_failed", "b", 5, duration_ms=3, error_type="KeyError"),
                # written at least once: the same end again, and a start read again
                ev("workflow_failed", "b", 6, duration_ms=4, error_type="KeyError"),
                ev("workflow_started", "b", 7),
                ev("workflow_succeeded", "c", 8, duration_ms=5),
                # an end read before its start
                ev("workflow_cancelled", "e", 9, duration_ms=1),
                ev("workflow_started", "e", 10)])
    expected = {"running": 2, "succeeded": 1, "failed": 1, "cancelled": 1}
    assert tally.snapshot(T0 + 20)["workflows"] == expected
    assert tally.delta(T0 + 20)["workflows"] == expected
    # Workflow events are not tasks: the task totals do not count them.
    assert set(tally.snapshot(T0 + 20)["totals"].values()) == {0}
