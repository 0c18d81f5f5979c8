"""``/metrics`` in the Prometheus text format, and the same numbers as JSON (docs/metrics.md).

Counters and histograms come from the events streams, folded into Redis by whichever
process is scraped (engine/metrics.py): right however many worker processes there are.
Gauges are read from Redis at each scrape (``queue_stats``, the worker registry).

The Prometheus view needs the ``metrics`` extra (``pip install blitzq-django[metrics]``,
``prometheus-client``); the JSON view does not. Both answer a staff session, or a
scraper sending ``Authorization: Bearer <BLITZQ["METRICS_TOKEN"]>``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from . import conf
from . import queues as project_queues
from .engine import metrics as engine_metrics
from .engine.client import Client
from .engine.core.registry import unserved, workers_per_queue

#: Gauges of a queue: name, QueueStats field, help.
GAUGES = (
    ("blitzq_queue_ready", "ready", "Messages ready to run"),
    ("blitzq_queue_in_flight", "in_flight", "Messages held by workers (running or prefetched)"),
    ("blitzq_queue_scheduled", "scheduled", "Delayed, ETA and retry-backoff messages"),
    ("blitzq_queue_dead_letters", "dead_letters", "Dead letters kept"),
)


def queues(client: Client, extra: Iterable[str] = ()) -> list[str]:
    """The queues shown: those the project names (blitzq_django/queues.py), every queue
    Redis has seen written to, and ``extra`` (those live workers serve)."""
    return sorted({*project_queues.shown(extra), *client.seen_queues()})


def allowed(request: HttpRequest) -> bool:
    token = conf.get_settings()["METRICS_TOKEN"]
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[len("Bearer "):].strip().encode(), token.encode())
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_staff)


def _refused(request: HttpRequest) -> HttpResponse:
    if conf.get_settings()["METRICS_TOKEN"]:
        response = HttpResponse("a bearer token or a staff session is needed\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="blitzq"'
        return response
    return HttpResponse("staff only\n", status=403, content_type="text/plain")


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
    return out


class Collector:
    """A prometheus_client collector over ``gather()``'s numbers."""

    def __init__(self, numbers: dict[str, Any]) -> None:
        self.numbers = numbers

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        queues_ = self.numbers["queues"]
        for kind in engine_metrics.COUNTED:
            family = CounterMetricFamily(f"blitzq_tasks_{kind}",
                                         f"Messages {kind.replace('_', ' ')}, from the events",
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


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format (needs prometheus-client: the ``metrics`` extra)."""
    if not allowed(request):
        return _refused(request)
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(gather(conf.get_client())))  # type: ignore[arg-type]
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


@require_GET
def stats_view(request: HttpRequest) -> HttpResponse:
    """The same numbers as JSON."""
    if not allowed(request):
        return _refused(request)
    numbers = gather(conf.get_client())
    for queue in numbers["queues"].values():
        queue.pop("_folded")
    return JsonResponse(numbers)
