"""``/metrics`` in the Prometheus text format, and the same numbers as JSON (docs/metrics.md).

Counters and histograms come from the events streams, folded into Redis by whichever
process is scraped (engine/metrics.py): right however many worker processes there are.
Gauges are read from Redis at each scrape (``queue_stats``, the worker registry).

The Prometheus view needs the ``metrics`` extra (``pip install blitzq-django[metrics]``,
``prometheus-client``); the JSON view does not. Both answer a staff session, or a
scraper sending ``Authorization: Bearer <BLITZQ["METRICS_TOKEN"]>``. The staff session
needs the admin's model permission to see the queues (``PERMISSION``), as the Queues page
and the dashboard do: a staff account without it is refused.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from .. import queues as project_queues
from ..engine import metrics as engine_metrics
from ..engine.client import Client
from ..engine.core.registry import unserved, workers_per_queue
from ..engine.errors import BlitzqError
from ..history import health
from ..runtime import get_client, history_on
from ..settings import get_settings

#: What a scrape may meet when Redis cannot be read (as the admin pages: web/common.py).
ENGINE_ERRORS: tuple[type[BaseException], ...] = (BlitzqError, OSError)

#: Gauges of a queue: name, QueueStats field, help.
GAUGES = (
    ("blitzq_queue_ready", "ready", "Messages ready to run"),
    ("blitzq_queue_in_flight", "in_flight", "Messages held by workers (running or prefetched)"),
    ("blitzq_queue_scheduled", "scheduled", "Delayed, ETA and retry-backoff messages"),
    ("blitzq_queue_dead_letters", "dead_letters", "Dead letters kept"),
)


#: What each counter counts (HELP). "failed" is one thing everywhere (the dashboard's
#: total of the same name, the history's state): messages that failed for good without
#: being kept as dead letters; every failure is retried + failed + dead_lettered.
COUNTER_HELP = {
    "enqueued": "Messages enqueued",
    "scheduled": "Messages scheduled for later (delay, ETA, rate-limit deferral)",
    "started": "Attempts started",
    "succeeded": "Messages whose attempt succeeded",
    "failed": "Messages that failed for good and were not kept as dead letters "
              "(dead_letter=False); every failure is retried + failed + dead_lettered",
    "retried": "Attempts that raised and will run again",
    "dead_lettered": "Messages given up and kept as dead letters",
}


def queues(client: Client, extra: Iterable[str] = ()) -> list[str]:
    """The queues shown: those the project names (blitzq_django/queues.py), every queue
    Redis has seen written to, and ``extra`` (those live workers serve)."""
    return sorted({*project_queues.shown(extra), *client.seen_queues()})


#: The admin's permission to see the queues (the Queues page, the dashboard).
PERMISSION = "blitzq_django.view_queueoverview"


def allowed(request: HttpRequest) -> bool:
    token = get_settings()["METRICS_TOKEN"]
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[len("Bearer "):].strip().encode(), token.encode())
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_active
                and user.is_staff and user.has_perm(PERMISSION))


def _refused(request: HttpRequest) -> HttpResponse:
    session = f"a staff session with the {PERMISSION} permission"
    if get_settings()["METRICS_TOKEN"]:
        response = HttpResponse(f"a bearer token or {session} is needed\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="blitzq"'
        return response
    return HttpResponse(f"{session} is needed\n", status=403, content_type="text/plain")


def gather(client: Client) -> dict[str, Any]:
    """Every number of every queue, folded up to now, and the live workers."""
    live = client.workers()
    serving = workers_per_queue(live)
    out: dict[str, Any] = {"queues": {}, "workers": len(live)}
    for queue in queues(client, serving):
        folded = engine_metrics.collect(client, queue)
        stats = client.queue_stats(queue)
        out["queues"][queue] = {
            **folded.to_dict(),
            "gauges": {field: getattr(stats, field) for _, field, _ in GAUGES},
            "oldest_ready_age_ms": stats.oldest_ready_age_ms,
            # live workers serving it; unserved: messages wait and none serves it
            "workers": serving[queue],
            "unserved": bool(unserved([stats], live)),
        }
        out["queues"][queue]["_folded"] = folded
    _history(client, out["queues"])
    return out


#: The task history's counters of a queue: name, Health field, help (history/health.py).
HISTORY_COUNTERS = (
    ("blitzq_history_events_lost", "lost",
     "Events trimmed from the events stream before the history writer read them"),
    ("blitzq_history_events_unwritable", "unwritable",
     "Events the history writer could not write (refused by the database)"),
    ("blitzq_history_event_gaps", "gaps",
     "Trims of events the history writer had not read, of a size Redis before 7 cannot "
     "count"),
)


def _history(client: Client, found: dict[str, Any]) -> None:
    """Each queue's history health (with history on): {lost, unwritable, gaps, unread}."""
    if not history_on(get_settings()):
        return
    for h in health.read(client, list(found)):
        found[h.queue]["history"] = {"lost": h.lost, "unwritable": h.unwritable,
                                     "gaps": h.gaps, "unread": h.unread}


class Collector:
    """A prometheus_client collector over ``gather()``'s numbers."""

    def __init__(self, numbers: dict[str, Any]) -> None:
        self.numbers = numbers

    def collect(self) -> Iterator[Any]:
        # lazy: cost (prometheus-client is the optional metrics extra)
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        queues_ = self.numbers["queues"]
        for kind in engine_metrics.COUNTED:
            text = COUNTER_HELP.get(kind, f"Messages {kind.replace('_', ' ')}")
            family = CounterMetricFamily(f"blitzq_tasks_{kind}", f"{text}, from the events",
                                         labels=["queue"])
            for queue, numbers in queues_.items():
                family.add_metric([queue], numbers["counters"].get(kind, 0))
            yield family
        for name, field, text in GAUGES:
            gauge = GaugeMetricFamily(name, text, labels=["queue"])
            for queue, numbers in queues_.items():
                gauge.add_metric([queue], numbers["gauges"][field])
            yield gauge
        yield GaugeMetricFamily("blitzq_workers", "Live worker processes",
                                value=self.numbers["workers"])
        for name, key, text in (
                ("blitzq_queue_workers", "workers", "Live workers serving the queue"),
                ("blitzq_queue_unserved", "unserved",
                 "1 when messages wait (ready or scheduled) and no live worker serves the "
                 "queue")):
            gauge = GaugeMetricFamily(name, text, labels=["queue"])
            for queue, numbers in queues_.items():
                gauge.add_metric([queue], int(numbers[key]))
            yield gauge
        for name, attr, text in (
                ("blitzq_task_duration_seconds", "duration", "Run time of attempts"),
                ("blitzq_queue_latency_seconds", "latency",
                 "From enqueue to the start of the first attempt")):
            hist = HistogramMetricFamily(name, text, labels=["queue"])
            for queue, numbers in queues_.items():
                h = getattr(numbers["_folded"], attr)
                buckets = [("+Inf" if bound == float("inf") else repr(bound), n)
                           for bound, n in h.cumulative()]
                hist.add_metric([queue], buckets, sum_value=h.sum_ms / 1000)
            yield hist
        with_history = {q: n["history"] for q, n in queues_.items() if "history" in n}
        if with_history:
            for name, field, text in HISTORY_COUNTERS:
                family = CounterMetricFamily(name, text, labels=["queue"])
                for queue, found in with_history.items():
                    family.add_metric([queue], found[field])
                yield family
            unread = GaugeMetricFamily("blitzq_history_unread",
                                       "Events the history writer has not read yet",
                                       labels=["queue"])
            for queue, found in with_history.items():
                if found["unread"] is not None:
                    unread.add_metric([queue], found["unread"])
            yield unread


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format (needs prometheus-client: the ``metrics`` extra)."""
    if not allowed(request):
        return _refused(request)
    # lazy: cost (prometheus-client is the optional metrics extra)
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    try:
        numbers = gather(get_client())
    except ENGINE_ERRORS as exc:
        return _unreadable(exc)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(numbers))  # type: ignore[arg-type]
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


@require_GET
def stats_view(request: HttpRequest) -> HttpResponse:
    """The same numbers as JSON."""
    if not allowed(request):
        return _refused(request)
    try:
        numbers = gather(get_client())
    except ENGINE_ERRORS as exc:
        return _unreadable(exc)
    for queue in numbers["queues"].values():
        queue.pop("_folded")
    return JsonResponse(numbers)


def _unreadable(exc: BaseException) -> HttpResponse:
    """Redis cannot be read: a 503 that says so (the scrape fails, so Prometheus' ``up``
    is 0), never numbers made up from nothing."""
    return HttpResponse(f"Redis could not be read: {type(exc).__name__}\n", status=503,
                        content_type="text/plain")
