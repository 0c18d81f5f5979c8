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
(``EVENTS_MAXLEN``) before a fold are not counted. RedisBroker only (with the memory
broker the counters stay at 0; the gauges are right).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .brokers.redis.ops import Op
from .core import events as ev

if TYPE_CHECKING:
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


def _is_redis(broker: Any) -> bool:
    from .brokers.redis import RedisBroker

    return isinstance(broker, RedisBroker)


def fold(client: Client, queue: str) -> int:
    """Add the queue's events since the last fold to its counters; returns how many were
    folded (0 also when another process holds the lease: it is folding them)."""
    broker = client.broker
    if not _is_redis(broker):
        return 0  # the memory broker: counters need Redis
    keys = broker.keys.queue(queue)
    r = broker.sync.client
    token = os.urandom(8).hex()
    if not r.set(keys.metrics_lease, token, nx=True, px=LEASE_MS):
        return 0
    total = 0
    try:
        cursor = _text(r.hget(keys.metrics, "cursor") or b"0")
        for _ in range(MAX_BATCHES):
            batch = client.events(queue, after=cursor, count=BATCH)
            if not batch:
                break
            _apply(r, keys, batch)
            cursor = batch[-1].cursor
            total += len(batch)
            if len(batch) < BATCH:
                break
    finally:
        # Released only if still ours (a fold longer than the lease lost it).
        if _text(r.get(keys.metrics_lease) or b"") == token:
            r.delete(keys.metrics_lease)
    return total


def _apply(r: Any, keys: Any, batch: list[ev.Event]) -> None:
    incr: dict[str, int] = {}
    enqueued: dict[str, int] = {}
    waiting_start: list[ev.Event] = []
    gone: set[str] = set()

    def add(name: str, n: int = 1) -> None:
        incr[name] = incr.get(name, 0) + n

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
                latency = _latency(event.time_ms, enqueued.pop(event.id))
                if latency is not None:
                    add(f"l:{_bucket(latency)}")
                    add("l:sum", latency)
                    add("l:count")
            elif event.attempt in (None, 1):
                waiting_start.append(event)
        elif event.terminal:
            enqueued.pop(event.id, None)
            gone.add(event.id)
    if waiting_start:  # enqueued in an earlier fold: their time waits in metrics_starts
        times = r.hmget(keys.metrics_starts, [e.id for e in waiting_start])
        for event, at in zip(waiting_start, times, strict=True):
            if at is not None:
                latency = _latency(event.time_ms, int(at))
                if latency is not None:
                    add(f"l:{_bucket(latency)}")
                    add("l:sum", latency)
                    add("l:count")
                gone.add(event.id)
    pipe = r.pipeline(transaction=True)
    for name, n in incr.items():
        pipe.hincrby(keys.metrics, name, n)
    pipe.hset(keys.metrics, "cursor", batch[-1].cursor)
    gone -= set(enqueued)
    if gone:
        pipe.hdel(keys.metrics_starts, *gone)
    if enqueued:
        pipe.hset(keys.metrics_starts, mapping=enqueued)
    pipe.execute()
    if enqueued and r.hlen(keys.metrics_starts) > MAX_STARTS:
        r.delete(keys.metrics_starts)  # messages that never start: forget them all


def read(client: Client, queue: str) -> QueueMetrics:
    """The queue's folded metrics (as of the last fold)."""
    broker = client.broker
    if not _is_redis(broker):
        return QueueMetrics(queue)
    raw = broker.sync.run(Op(command=("HGETALL", broker.keys.queue(queue).metrics)))
    if isinstance(raw, list):
        raw = dict(zip(raw[::2], raw[1::2], strict=True))
    out = QueueMetrics(queue)
    for key, value in (raw or {}).items():
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
