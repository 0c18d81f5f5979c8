"""The dashboard's aggregator: one per process (per event loop), fed by the events streams.

``Tally`` is the arithmetic, without I/O: it is fed events (engine ``Event``), queue stats
and the live workers, and answers a ``snapshot()`` (everything a dashboard draws) and
``delta()`` (what changed since the last delta). It counts per second, over the last 15
minutes: completions (``succeeded``) and failures (``retried``, ``failed``,
``dead_lettered`` together: attempts that raised, or messages given up) for the chart, and
per queue enqueued and completed for the rates; and it pairs each ``enqueued`` event with
the message's ``started`` for the enqueue-to-start latency (bounded memory: the most
recent ids and samples only). Its totals count each event kind under the kind's own name,
as ``/metrics`` does (``failed``: messages that failed for good and were not kept as dead
letters, never the sum of failures; docs/dashboard.md).

``Aggregator`` drives a Tally from an event loop: every 500 ms it reads each known queue's
events stream from its cursor (``XRANGE`` through ``Client.aevents``, pages of 1,000), and
every second the queues' stats and the workers (one Redis call each), and what runs now
(the workers' running indexes, one round trip, and the progress of the RUNNING_SHOWN
oldest, one more: ``set_running``), then hands one
compact delta to every subscriber (an ``asyncio.Queue``): one message per subscriber per
tick at most, never one per task. A subscriber first gets a snapshot. The aggregator starts
with its first subscriber and stops ``linger_s`` after its last one left.

``Poller`` is the same for a synchronous caller (the HTTP fallback of the dashboard): it
reads what is new when asked, at most every 500 ms, under a lock.

Nothing here imports Django: the glue (``consumers.py``, ``views.py``) passes the client
and a function returning the queues to follow; ``bench/dashboard_cost.py`` runs it on a
bare engine client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any

from ...engine import Client, progress
from ...engine.core.events import (
    DEAD_LETTERED,
    ENQUEUED,
    FAILED,
    RETRIED,
    STARTED,
    SUCCEEDED,
    WORKFLOW_END,
    WORKFLOW_STARTED,
    Event,
)
from ...engine.core.ids import now_ms
from ...engine.core.registry import workers_per_queue

log = logging.getLogger("blitzq.dashboard")

WINDOW_S = 900  # the chart: the last 15 minutes, one point per second
RATE_WINDOW_S = 10  # rates: the average of the last 10 whole seconds
LATENCY_WINDOW_S = 60  # latency percentiles: starts of the last minute...
LATENCY_SAMPLES = 20_000  # ...at most this many (the most recent)
PENDING_IDS = 100_000  # enqueued messages waiting for their start, at most (oldest dropped)
FAILURES_KEPT = 25  # recent failures listed
PAGE = 1000  # events per read
MAX_PAGES = 20  # reads per queue per tick; further behind: skip to the newest event
BACKFILL_PAGES = 30  # reads per queue when it is first followed (the last 15 minutes)

FAILURE_KINDS = frozenset({FAILED, RETRIED, DEAD_LETTERED})
#: The totals: one per event kind counted, named as the kind.
TOTALS = (ENQUEUED, STARTED, SUCCEEDED, RETRIED, FAILED, DEAD_LETTERED)
RUNNING_SHOWN = 50  # attempts listed as running now, at most (the oldest first)
WORKFLOWS_KEPT = 100_000  # workflow ids remembered (running, and ended), at most each
#: A workflow's end event kind -> its final state (the counts' names).
WORKFLOW_STATE_OF_END = {kind: state for state, kind in WORKFLOW_END.items()}


def _percentile(ordered: list[int], fraction: float) -> int | None:
    if not ordered:
        return None
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


class Tally:
    """Counts of events per second and per queue, latency, stats and workers."""

    def __init__(self) -> None:
        # second -> [completed, failed] over every queue (the chart)
        self.series: dict[int, list[int]] = {}
        # queue -> second -> [enqueued, completed] (the rates), last RATE_WINDOW_S + 2 s
        self.per_queue: dict[str, dict[int, list[int]]] = {}
        # one count per event kind, each under its kind's name (as blitzq_tasks_<kind>)
        self.totals = dict.fromkeys(TOTALS, 0)
        self._pending: OrderedDict[str, int] = OrderedDict()  # id -> enqueued time_ms
        self._samples: deque[tuple[int, int]] = deque(maxlen=LATENCY_SAMPLES)
        self.failures: deque[dict[str, Any]] = deque(maxlen=FAILURES_KEPT)
        self.stats: dict[str, dict[str, Any]] = {}
        self.workers: list[dict[str, Any]] = []
        #: attempts running now (the workers' running indexes), oldest first, at most
        #: RUNNING_SHOWN, and how many run in all
        self.running: list[dict[str, Any]] = []
        self.running_total = 0
        self._running_changed = False
        self.skipped = 0  # times a queue's reader fell too far behind and skipped ahead
        self.error = ""
        # when the queues' stats were last read (0: never): until then, and while
        # ``error`` says Redis cannot be read, a page shows no numbers as if they were known
        self.stats_ms = 0
        # what changed since the last delta()
        self._touched: set[int] = set()
        self._new_failures: list[dict[str, Any]] = []
        self._workers_changed = False
        self._latency: dict[str, Any] = {"p50": None, "p99": None, "samples": 0}
        self._latency_dirty = False
        self._last_queues: dict[str, Any] = {}
        # Workflows (their own events, keyed by workflow id: each is written at least
        # once, and an end can be read before its start): those started and not ended,
        # and those ended (so that a start read after its end, or an end read twice,
        # counts nothing), each bounded, the oldest forgotten.
        self._workflows_running: OrderedDict[str, int] = OrderedDict()
        self._workflows_ended: OrderedDict[str, str] = OrderedDict()
        self.workflow_ends = dict.fromkeys(WORKFLOW_END, 0)

    # -- feeding ---------------------------------------------------------------

    def feed(self, events: Iterable[Event]) -> int:
        fed = 0
        totals, pending = self.totals, self._pending
        for event in events:
            fed += 1
            kind = event.kind
            second = event.time_ms // 1000
            if kind == ENQUEUED:
                totals["enqueued"] += 1
                self._queue_second(event.queue, second)[0] += 1
                pending[event.id] = event.time_ms
                if len(pending) > PENDING_IDS:
                    pending.popitem(last=False)
            elif kind == STARTED:
                totals["started"] += 1
                enqueued = pending.pop(event.id, None)
                if enqueued is not None:
                    self._samples.append((second, max(0, event.time_ms - enqueued)))
                    self._latency_dirty = True
            elif kind == SUCCEEDED:
                totals["succeeded"] += 1
                self._queue_second(event.queue, second)[1] += 1
                self._series(second)[0] += 1
            elif kind in FAILURE_KINDS:
                totals[kind] += 1
                if kind != RETRIED:
                    self._queue_second(event.queue, second)[1] += 1
                self._series(second)[1] += 1
                failure = {"cursor": f"{event.queue}/{event.cursor}", "id": event.id,
                           "queue": event.queue, "task": event.task, "kind": kind,
                           "error": event.error_type or "", "time_ms": event.time_ms,
                           "attempt": event.attempt}
                self.failures.append(failure)
                self._new_failures.append(failure)
            elif kind == WORKFLOW_STARTED:
                if event.id not in self._workflows_ended:
                    self._remember(self._workflows_running, event.id, event.time_ms)
            elif kind in WORKFLOW_STATE_OF_END:
                self._workflows_running.pop(event.id, None)
                if event.id not in self._workflows_ended:
                    state = WORKFLOW_STATE_OF_END[kind]
                    self._remember(self._workflows_ended, event.id, state)
                    self.workflow_ends[state] += 1
        return fed

    @staticmethod
    def _remember(ids: OrderedDict[str, Any], key: str, value: Any) -> None:
        ids[key] = value
        if len(ids) > WORKFLOWS_KEPT:
            ids.popitem(last=False)

    def workflows(self) -> dict[str, int]:
        """Workflows among the events read (since the page's first look, which reads
        the last 15 minutes): running (started, no end read yet), and how many ended
        succeeded, failed or cancelled."""
        return {"running": len(self._workflows_running), **self.workflow_ends}

    def _series(self, second: int) -> list[int]:
        self._touched.add(second)
        counts = self.series.get(second)
        if counts is None:
            counts = self.series[second] = [0, 0]
        return counts

    def _queue_second(self, queue: str, second: int) -> list[int]:
        seconds = self.per_queue.get(queue)
        if seconds is None:
            seconds = self.per_queue[queue] = {}
        counts = seconds.get(second)
        if counts is None:
            counts = seconds[second] = [0, 0]
        return counts

    def set_stats(self, stats: dict[str, dict[str, Any]], now: int | None = None) -> None:
        self.stats = stats
        self.stats_ms = now_ms() if now is None else now

    def set_workers(self, workers: list[Any], now: int) -> None:
        self.workers = [{"name": w.name, "host": w.host, "pid": w.pid,
                         "queues": list(w.queues), "running": w.running,
                         "concurrency": w.concurrency, "processed": w.processed,
                         "load": round(w.running / w.concurrency, 3) if w.concurrency else 0,
                         "heartbeat_ms": w.heartbeat_ms,
                         "heartbeat_age_s": round(max(0, now - w.heartbeat_ms) / 1000, 1)}
                        for w in workers]
        self._workers_changed = True

    def set_running(self, running: list[Any], progress: list[Any]) -> None:
        """``running``: Running entries (``client.running()``), oldest first; ``progress``:
        the latest Progress (or None) of each of the first RUNNING_SHOWN of them."""
        shown = [{"id": r.id, "task": r.task, "queue": r.queue, "worker": r.worker,
                  "attempt": r.attempt, "started_ms": r.started_ms,
                  "progress": p.to_dict() if p is not None else None}
                 for r, p in zip(running[:RUNNING_SHOWN], progress, strict=False)]
        if shown != self.running or len(running) != self.running_total:
            self.running, self.running_total = shown, len(running)
            self._running_changed = True

    # -- reading ---------------------------------------------------------------

    def trim(self, now: int) -> None:
        oldest = now // 1000 - WINDOW_S
        for second in [s for s in self.series if s < oldest]:
            del self.series[second]
        rate_oldest = now // 1000 - RATE_WINDOW_S - 2
        for seconds in self.per_queue.values():
            for second in [s for s in seconds if s < rate_oldest]:
                del seconds[second]

    def latency(self, now: int) -> dict[str, Any]:
        if self._latency_dirty:
            oldest = now // 1000 - LATENCY_WINDOW_S
            values = sorted(ms for second, ms in self._samples if second >= oldest)
            self._latency = {"p50": _percentile(values, 0.5), "p99": _percentile(values, 0.99),
                             "samples": len(values)}
            self._latency_dirty = False
        return self._latency

    def queues(self, now: int) -> dict[str, dict[str, Any]]:
        """Per queue: the stats (ready, in flight, scheduled, dead letters, consumers,
        oldest ready age) and the enqueue and completion rates (per second, the average
        of the last RATE_WINDOW_S whole seconds)."""
        last = now // 1000 - 1  # the current second is not whole yet
        out: dict[str, dict[str, Any]] = {}
        for name in sorted(set(self.stats) | set(self.per_queue)):
            seconds = self.per_queue.get(name, {})
            enq = done = 0
            for second, (e, d) in seconds.items():
                if last - RATE_WINDOW_S < second <= last:
                    enq += e
                    done += d
            out[name] = {**self.stats.get(name, {}),
                         "enqueue_rate": round(enq / RATE_WINDOW_S, 1),
                         "completion_rate": round(done / RATE_WINDOW_S, 1)}
        return out

    def snapshot(self, now: int | None = None) -> dict[str, Any]:
        now = now_ms() if now is None else now
        self.trim(now)
        queues = self.queues(now)
        return {"t": "snapshot", "now": now, "window_s": WINDOW_S, "queues": queues,
                "series": sorted([s, *c] for s, c in self.series.items()),
                "latency": self.latency(now), "workers": self.workers,
                "running": self.running, "running_total": self.running_total,
                "failures": list(self.failures), "totals": dict(self.totals),
                "workflows": self.workflows(), "skipped": self.skipped, "error": self.error,
                "stats_ms": self.stats_ms}

    def delta(self, now: int | None = None) -> dict[str, Any]:
        """What changed since the last delta: the seconds of the chart touched (their
        whole counts: applying a delta twice changes nothing), the queues when any number
        changed, latency, totals, new failures, the workers when read again."""
        now = now_ms() if now is None else now
        self.trim(now)
        out: dict[str, Any] = {"t": "delta", "now": now, "totals": dict(self.totals),
                               "workflows": self.workflows(),
                               "latency": self.latency(now), "skipped": self.skipped,
                               "error": self.error, "stats_ms": self.stats_ms}
        if self._touched:
            out["series"] = sorted([s, *self.series[s]] for s in self._touched
                                   if s in self.series)
            self._touched = set()
        queues = self.queues(now)
        if queues != self._last_queues:
            out["queues"] = self._last_queues = queues
        if self._new_failures:
            out["failures"], self._new_failures = self._new_failures, []
        if self._workers_changed:
            out["workers"] = self.workers
            self._workers_changed = False
        if self._running_changed:
            out["running"], out["running_total"] = self.running, self.running_total
            self._running_changed = False
        return out


def _stats_dict(stats: Any, serving: Any) -> dict[str, Any]:
    """A queue's stats, with ``workers``: the live workers serving it (``serving``, queue
    -> count), and ``unserved``: messages wait and none serves it."""
    workers = serving[stats.queue]
    return {"ready": stats.ready, "in_flight": stats.in_flight, "scheduled": stats.scheduled,
            "dead_letters": stats.dead_letters, "consumers": stats.consumers,
            "oldest_ready_age_ms": stats.oldest_ready_age_ms, "workers": workers,
            "unserved": bool((stats.ready or stats.scheduled) and not workers)}


def _backfill_cursor(now: int) -> str:
    return f"{now - WINDOW_S * 1000}-0"


class Aggregator:
    """A Tally fed from an event loop, fanned out to subscribers (see the module doc)."""

    def __init__(self, client: Client | Callable[[], Client],
                 queues: Callable[[Iterable[str]], Iterable[str]], *, interval: float = 0.5,
                 stats_interval: float = 1.0, linger_s: float = 30.0) -> None:
        self._client = client
        self._queues = queues
        self.interval = interval
        self.stats_interval = stats_interval
        self.linger_s = linger_s
        self.tally = Tally()
        self.cursors: dict[str, str] = {}
        self.subscribers: set[asyncio.Queue[dict[str, Any]]] = set()
        self.task: asyncio.Task[None] | None = None
        self.ticks = 0
        self.on_stop: Callable[[Aggregator], object] | None = None

    @property
    def client(self) -> Client:
        return self._client if isinstance(self._client, Client) else self._client()

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        """A queue of messages: a snapshot now, then one delta per tick."""
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=8)
        inbox.put_nowait(self.tally.snapshot())
        self.subscribers.add(inbox)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run(),
                                                               name="blitzq-dashboard")
        return inbox

    def unsubscribe(self, inbox: asyncio.Queue[dict[str, Any]]) -> None:
        self.subscribers.discard(inbox)

    async def close(self) -> None:
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def publish(self, message: dict[str, Any]) -> None:
        for inbox in list(self.subscribers):
            if inbox.full():  # a slow reader: drop what it has not read, start it afresh
                while not inbox.empty():
                    inbox.get_nowait()
                inbox.put_nowait(self.tally.snapshot())
            else:
                inbox.put_nowait(message)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_stats = 0.0
        idle_since: float | None = None
        try:
            while True:
                started = loop.time()
                if self.subscribers:
                    idle_since = None
                elif idle_since is None:
                    idle_since = started
                elif started - idle_since >= self.linger_s:
                    return
                try:
                    if started >= next_stats:
                        await self.read_stats()
                        next_stats = started + self.stats_interval
                    await self.read_events()
                    self.tally.error = ""
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - Redis down: say so, try again
                    self.tally.error = f"{type(exc).__name__}: {exc}"[:300]
                    log.warning("dashboard: cannot read the queues: %s", self.tally.error)
                self.ticks += 1
                if self.subscribers:
                    self.publish(self.tally.delta())
                await asyncio.sleep(max(0.0, self.interval - (loop.time() - started)))
        finally:
            if self.on_stop is not None:
                self.on_stop(self)

    async def read_stats(self) -> None:
        client = self.client
        workers = await client.aworkers()
        serving = workers_per_queue(workers)
        # Every queue named, served or seen (Redis keeps the queues ever written to).
        names = list(self._queues([*serving, *await client.aseen_queues()]))
        stats = await asyncio.gather(*(client.aqueue_stats(name) for name in names))
        self.tally.set_stats({s.queue: _stats_dict(s, serving) for s in stats})
        self.tally.set_workers(workers, now_ms())
        running = await client.arunning(names, workers=workers)
        shown = [(r.queue, r.id) for r in running[:RUNNING_SHOWN]]
        self.tally.set_running(running, await progress.aread_many(client.broker, shown))
        for name in names:
            self.cursors.setdefault(name, "")

    async def read_events(self) -> None:
        await asyncio.gather(*(self._read_queue(name) for name in list(self.cursors)))

    async def _read_queue(self, queue: str) -> None:
        client = self.client
        cursor = self.cursors[queue]
        pages = MAX_PAGES
        if not cursor:  # first look: the last 15 minutes
            cursor, pages = _backfill_cursor(now_ms()), BACKFILL_PAGES
        for _ in range(pages):
            events = await client.aevents(queue, after=cursor, count=PAGE)
            if events:
                self.tally.feed(events)
                cursor = events[-1].cursor
            if len(events) < PAGE:
                break
        else:  # still behind: count nothing in between, follow from the newest
            newest = await client.alast_event_cursor(queue)
            self.tally.skipped += 1
            cursor = newest
        self.cursors[queue] = cursor


class Poller:
    """A Tally refreshed on demand by a synchronous caller (the HTTP fallback)."""

    def __init__(self, min_interval: float = 0.5) -> None:
        self.tally = Tally()
        self.cursors: dict[str, str] = {}
        self.min_interval = min_interval
        self._lock = threading.Lock()
        self._last = 0.0
        self._snapshot: dict[str, Any] | None = None
        self._client: Client | None = None

    def snapshot(self, client: Client, queues: Callable[[Iterable[str]], Iterable[str]]
                 ) -> dict[str, Any]:
        with self._lock:
            if client is not self._client:  # another client (settings changed): start afresh
                self.tally, self.cursors, self._snapshot = Tally(), {}, None
                self._client = client
            if self._snapshot is not None and time.monotonic() - self._last < self.min_interval:
                return self._snapshot
            workers = client.workers()
            serving = workers_per_queue(workers)
            names = list(queues([*serving, *client.seen_queues()]))
            self.tally.set_stats({name: _stats_dict(client.queue_stats(name), serving)
                                  for name in names})
            self.tally.set_workers(workers, now_ms())
            running = client.running(names, workers=workers)
            shown = [(r.queue, r.id) for r in running[:RUNNING_SHOWN]]
            self.tally.set_running(running, progress.read_many(client.broker, shown))
            for name in names:
                self._read_queue(client, name)
            self._snapshot = self.tally.snapshot()
            self._last = time.monotonic()
            return self._snapshot

    def _read_queue(self, client: Client, queue: str) -> None:
        cursor = self.cursors.get(queue, "")
        pages = MAX_PAGES
        if not cursor:
            cursor, pages = _backfill_cursor(now_ms()), BACKFILL_PAGES
        for _ in range(pages):
            events = client.events(queue, after=cursor, count=PAGE)
            if events:
                self.tally.feed(events)
                cursor = events[-1].cursor
            if len(events) < PAGE:
                break
        else:
            newest = client.last_event_cursor(queue)
            self.tally.skipped += 1
            cursor = newest
        self.cursors[queue] = cursor


_by_loop: dict[asyncio.AbstractEventLoop, Aggregator] = {}


def for_this_loop(factory: Callable[[], Aggregator]) -> Aggregator:
    """The aggregator of the running event loop (one per process: daphne and uvicorn run
    one loop), built by ``factory`` on first use; forgotten when it stops."""
    loop = asyncio.get_running_loop()
    found = _by_loop.get(loop)
    if found is None or (found.task is not None and found.task.done()):
        found = _by_loop[loop] = factory()
        found.on_stop = lambda a: _by_loop.pop(loop, None) if _by_loop.get(loop) is a else None
    return found


async def stop_this_loop() -> None:
    """Stop the running loop's aggregator now (tests; a server's shutdown)."""
    found = _by_loop.pop(asyncio.get_running_loop(), None)
    if found is not None:
        await found.close()
