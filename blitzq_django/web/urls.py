"""HTTP views of blitzq_django for a project's urls.py (docs/progress.md, docs/metrics.md)::

    path("", include("blitzq_django.urls")),  # this module, under its public alias

gives ``metrics`` (Prometheus), ``blitzq/stats.json`` and
``blitzq/tasks/<id>/progress/`` (the polling fallback of progress.js).
"""

from __future__ import annotations

from django.urls import path

from .metrics import metrics_view, stats_view
from .progress import progress_view

urlpatterns = [
    path("metrics", metrics_view, name="blitzq-metrics"),
    path("blitzq/stats.json", stats_view, name="blitzq-stats"),
    path("blitzq/tasks/<str:task_id>/progress/", progress_view, name="blitzq-task-progress"),
]
