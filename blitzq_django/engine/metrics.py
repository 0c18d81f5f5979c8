"""Metrics folded from the events streams, kept in Redis: right across worker processes.

Workers count nothing in memory. Every transition of a message is already an event of
its queue's stream (core/events.py), written atomically with the transition by
whichever process made it. ``fold()`` reads the events after a cursor kept in Redis and
adds them to per-queue counters and histograms in a Redis hash (``QueueKeys.metrics``),
the new cursor written in the same MULTI as the counts: a folder that dies part-way
leaves the counts and the cursor as they were, and the next fold counts those events
once. One folder at a time per queue (a lease, ``QueueKeys.metrics_lease``), so any
number of processes may scrape.

Counters: one per event kind. Histograms: the run time of attempts (``duration_ms``
of their outcome events) and the queue latency of messages (from ``enqueued`` to the
``started`` of their first attempt; the enqueue time waits in ``QueueKeys.
metrics_starts`` until then). Needs events (``EVENTS``); events trimmed from the stream
(``EVENTS_MAXLEN``) before a fold are not counted. Stored through the broker's metrics
store and lease (brokers/capabilities.py): on the memory broker, in its process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .core import events as ev

if TYPE_CHECKING:
    from .brokers.capabilities import MetricsStore
    from .client import Client

#: Upper bounds of the histogram buckets, in ms (then +Inf).
BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000,
              300_000)
#: Event kinds of an attempt's outcome: their duration_ms goes to the duration histogram.
OUTCOMES = frozenset({ev.SUCCEEDED, ev.FAILED, ev.RETRIED, ev.DEAD_LETTERED, ev.CANCELLED})
#: The counters, in the order shown.
COUNTED = (ev.ENQUEUED, ev.SCHEDULED, ev.STARTED, ev.SUCCEEDED, ev.FAILED, ev.RETRIED,
           ev.DEAD_LETTERED, ev.CANCELLED, ev.EXPIRED, ev.RECOVERED, ev.REQUEUED,
           ev.REPLAYED)
#: Events read per round trip, and most round trips in one fold.
BATCH = 1000
MAX_BATCHES = 200
LEASE_MS = 30_000
#: Most messages waiting for their first start that are remembered (beyond: dropped).
MAX_STARTS = 200_000


@dataclass
class Histogram:
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_MS) + 1))
    sum_ms: int = 0
    count: int = 0

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound in seconds, cumulative count), the last bound being inf."""
        out, running = [], 0
        for bound, n in zip((*BUCKETS_MS, float("inf")), self.buckets, strict=True):
            running += n
            out.append((bound / 1000 if bound != float("inf") else bound, running))
        return out


@dataclass
class QueueMetrics:
    queue: str
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTED, 0))
    duration: Histogram = field(default_factory=Histogram)
    latency: Histogram = field(default_factory=Histogram)
    cursor: str = "0"

    def to_dict(self) -> dict[str, Any]:
        def hist(h: Histogram) -> dict[str, Any]:
            return {"count": h.count, "sum_ms": h.sum_ms,
                    "buckets_ms": {str(b): n for b, n in zip((*BUCKETS_MS, "inf"), h.buckets,
                                                             strict=True)}}
        return {"counters": dict(self.counters), "duration": hist(self.duration),
                "latency": hist(self.latency), "cursor": self.cursor}


def _bucket(ms: int) -> int:
    for i, bound in enumerate(BUCKETS_MS):
        if ms <= bound:
            return i
    return len(BUCKETS_MS)


def _latency(started_ms: int, enqueued_ms: int) -> int | None:
    """From enqueue to start (0 if the clocks disagree); None when the times are not
    plausible (a forged event: its sum must not overflow Redis's 64-bit counter)."""
    latency = started_ms - enqueued_ms
    return max(0, latency) if latency <= ev.MAX_DURATION_MS else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def fold(client: Client, queue: str) -> int:
    """Add the queue's events since the last fold to its counters; returns how many were
    folded (0 also when another process holds the lease: it is folding them)."""
    broker = client.broker
    store = broker.metrics
    lease = broker.lease(queue, "metrics", os.urandom(8).hex(), LEASE_MS)
    if not lease.hold():
        return 0
    total = 0
    try:
        cursor = store.cursor(queue)
        for _ in range(MAX_BATCHES):
            batch = client.events(queue, after=cursor, count=BATCH)
            if not batch:
                break
            _apply(store, queue, batch)
            cursor = batch[-1].cursor
            total += len(batch)
            if len(batch) < BATCH:
                break
    finally:
        lease.release()  # only if still ours (a fold longer than the lease lost it)
    return total


def _apply(store: MetricsStore, queue: str, batch: list[ev.Event]) -> None:
    incr: dict[str, int] = {}
    enqueued: dict[str, int] = {}
    waiting_start: list[ev.Event] = []
    gone: set[str] = set()

    def add(name: str, n: int = 1) -> None:
        incr[name] = incr.get(name, 0) + n

    def add_latency(latency: int | None) -> None:
        if latency is not None:
            add(f"l:{_bucket(latency)}")
            add("l:sum", latency)
            add("l:count")

    for event in batch:
        add(f"c:{event.kind}")
        if event.kind in OUTCOMES and event.duration_ms is not None:
            add(f"d:{_bucket(event.duration_ms)}")
            add("d:sum", event.duration_ms)
            add("d:count")
        if event.kind == ev.ENQUEUED:
            enqueued[event.id] = event.time_ms
        elif event.kind == ev.STARTED:
            if event.id in enqueued:
                add_latency(_latency(event.time_ms, enqueued.pop(event.id)))
            elif event.attempt in (None, 1):
                waiting_start.append(event)
        elif event.terminal:
            enqueued.pop(event.id, None)
            gone.add(event.id)
    if waiting_start:  # enqueued in an earlier fold: their time waits in the store
        times = store.enqueue_times(queue, [e.id for e in waiting_start])
        for event, at in zip(waiting_start, times, strict=True):
            if at is not None:
                add_latency(_latency(event.time_ms, at))
                gone.add(event.id)
    gone -= set(enqueued)
    store.add(queue, incr, batch[-1].cursor, sorted(gone), enqueued, MAX_STARTS)


def read(client: Client, queue: str) -> QueueMetrics:
    """The queue's folded metrics (as of the last fold)."""
    out = QueueMetrics(queue)
    for key, value in client.broker.metrics.read(queue).items():
        name, text = _text(key), _text(value)
        if name == "cursor":
            out.cursor = text
            continue
        kind, _, what = name.partition(":")
        try:
            n = int(text)
        except ValueError:
            continue
        if kind == "c":
            out.counters[what] = n
        elif kind in ("d", "l"):
            hist = out.duration if kind == "d" else out.latency
            if what == "sum":
                hist.sum_ms = n
            elif what == "count":
                hist.count = n
            elif what.isdigit() and int(what) < len(hist.buckets):
                hist.buckets[int(what)] = n
    return out


def collect(client: Client, queue: str) -> QueueMetrics:
    """Fold, then read: the queue's metrics up to now."""
    fold(client, queue)
    return read(client, queue)
