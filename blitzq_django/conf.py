"""Settings: one ``BLITZQ = {...}`` dict merged over DEFAULTS, and the process-wide client.

Nothing here reads Django settings at import time. ``get_settings()`` merges and
caches on first use; ``get_client()`` builds the engine ``Client`` once per
process (thread-safe). Both caches are dropped on ``setting_changed`` for
``BLITZQ`` or ``CACHES``, so ``override_settings`` and the pytest-django
``settings`` fixture take effect at once.

Every problem with the settings is described once, in ``problems()``: system
checks turn them into ``blitzq.E0xx`` errors, and ``get_client()`` into an
ImproperlyConfigured naming the key.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .engine import Client, MemoryBroker, RedisBroker, TaskRegistry, TaskSpec
from .engine.core import limits, rates
from .engine.core.message import DEFAULT_MAX_MESSAGE_SIZE
from .engine.core.names import name_ok
from .engine.core.record import DEFAULT_MAX_RESULT_SIZE
from .engine.core.redact import DEFAULT_REDACT
from .engine.core.suggest import closest
from .engine.errors import BlitzqError

#: Every key of ``settings.BLITZQ``, with its default. Keys not listed are refused.
DEFAULTS: dict[str, Any] = {
    # Where Redis is: a redis://, rediss:// or unix:// URL, or a zero-argument callable
    # returning one (called when the client is built: secrets stores, embedded servers).
    # None means: the REDIS_URL environment variable, else redis://localhost:6379/0.
    "REDIS_URL": None,
    # The alias of a django-redis (or Django RedisCache) cache whose LOCATION and
    # connection options to use instead of REDIS_URL.
    "CACHE_ALIAS": None,
    # "redis": reliable mode on Redis streams (at-least-once).
    # "memory": in-process only, lost on exit; for tests and notebooks, never production.
    "BROKER": "redis",
    # Delivery mode of every queue (docs/delivery-guarantees.md): "reliable" (Redis
    # streams with leases, at-least-once: a crashed worker's messages run again) or
    # "fast" (Redis lists, at-most-once: fewer Redis commands per task, but a worker
    # killed without a graceful stop loses what it had fetched and not finished).
    "MODE": "reliable",
    # Queue -> delivery mode, overriding MODE for that queue, e.g. {"bulk": "fast"}.
    # Producers and workers read the same settings, so they agree. Change a queue's mode
    # only once it is empty: its waiting messages stay where the old mode put them.
    "QUEUE_MODES": {},
    # Prefix inside every key name, so several projects can share one Redis.
    "NAMESPACE": "blitzq",
    # The queues a worker serves when it is not given --queues.
    "QUEUES": ["default"],
    # The queue of tasks that do not name one; must be one of QUEUES.
    "DEFAULT_QUEUE": "default",
    # Keep each task's final record (result or error) for RESULT_TTL seconds.
    "STORE_RESULTS": True,
    "RESULT_TTL": 86400,
    # Also write a record when a message is enqueued and each time its state changes
    # (costs a little on every enqueue).
    "TRACK_STATE": False,
    # How long an idempotency key keeps a second enqueue from adding a message (seconds).
    "IDEMPOTENCY_TTL": 86400,
    # How long a revocation is kept (seconds): cancel() of a queued or running message
    # (docs/cancel.md). A worker receiving the message within it does not run it.
    "REVOKE_TTL": 3600,
    # Encoded messages above this many bytes are refused at enqueue.
    "MAX_MESSAGE_SIZE": DEFAULT_MAX_MESSAGE_SIZE,
    # Encoded task results above this many bytes fail the attempt (ResultTooLarge).
    "MAX_RESULT_SIZE": DEFAULT_MAX_RESULT_SIZE,
    # Seconds a running message's lease lasts unless renewed; after it, another
    # worker may recover the message (the task then runs again: at-least-once).
    "VISIBILITY_TIMEOUT": 60.0,
    # Deliveries of one message (recoveries after crashes) before it is dead-lettered.
    "MAX_DELIVERIES": 5,
    # Dead letters kept per queue; the oldest are dropped beyond it.
    "DEAD_LETTER_MAX": 100_000,
    # Append every transition of a message (enqueued, started, succeeded, retried ...)
    # to its queue's events stream, atomically with the transition (docs/events.md).
    "EVENTS": True,
    # About this many events are kept per queue (the stream is capped, MAXLEN ~).
    "EVENTS_MAXLEN": 100_000,
    # Attempts one worker runs at once (runworker --concurrency overrides it).
    "CONCURRENCY": 100,
    # Threads that run `def` tasks in one worker process; None means CONCURRENCY, so
    # CONCURRENCY: 100 runs 100 `def` tasks at once (runworker --threads overrides it).
    # Each thread that uses the ORM holds a database connection: see check blitzq.W004.
    "THREADS": None,
    # Worker processes runworker starts (runworker --processes overrides it).
    "PROCESSES": 1,
    # Child processes of one worker that run `def` tasks declared executor="process"
    # (CPU-bound code, docs/executors.md); None means os.cpu_count(). Not PROCESSES, which
    # counts runworker's worker processes: each of those has a pool of this size, started
    # on its first process task (a worker that never runs one starts none).
    "PROCESS_POOL_SIZE": None,
    # Calls one such child runs before it is replaced by a fresh one (bounds leaks).
    "PROCESS_MAX_TASKS_PER_CHILD": 1000,
    # Queue -> most attempts of that queue one worker runs at once, e.g. {"reports": 2}
    # (runworker --queue-concurrency adds to it). Queues without one share CONCURRENCY;
    # a quiet queue is never starved by a busy one either way.
    "QUEUE_CONCURRENCY": {},
    # Task name glob -> queue, first match wins (e.g. {"reports.*": "slow"}). A message
    # goes to: the call's queue= option, else ROUTES, else the task's queue=, else
    # DEFAULT_QUEUE. runworker serves routed queues by default.
    "ROUTES": {},
    # Seconds a stopping worker waits for running attempts before requeueing them.
    "SHUTDOWN_TIMEOUT": 30.0,
    # Extra keyword arguments for redis-py clients (e.g. {"ssl_cert_reqs": "required"}).
    "REDIS_OPTIONS": {},
    # Argument names (and dict keys) whose values are masked wherever task data is
    # shown: the admin, dead-letter listings. Case-insensitive, matched as substrings.
    "REDACT": list(DEFAULT_REDACT),
    # Named rate-limit buckets shared by tasks that name them with rate_key=: bucket
    # name -> rate, "N/s", "N/m" or "N/h" (e.g. {"stripe": "25/s"}). Enforced across all
    # workers; a bucket holds at most N tokens. See docs/rate-limits.md.
    "RATE_LIMITS": {},
    # Task history in the database (TaskRecord, docs/django.md): "all" (every task),
    # "failures" (tasks with a failed, retried or dead-lettered attempt) or "off". Filled
    # from the events by a writer beside runworker (or manage.py runhistory); needs EVENTS.
    "HISTORY": "all",
    # Where runworker runs the history writer: "process" (a child process it starts and
    # restarts, so the writer never takes the worker's GIL) or "thread" (in the worker's
    # own process: one process less, about a third fewer tasks/s of `def` tasks; bench/).
    "HISTORY_WRITER": "process",
    # Days a finished task's history row is kept (manage.py blitzq prune-history).
    "HISTORY_RETENTION": 14,
    # The transactional outbox (docs/django.md): runworker runs a relay thread that
    # publishes the rows of OUTBOX_DATABASES (aliases of settings.DATABASES; a durable
    # enqueue on another one is refused); False: only `manage.py runoutbox` publishes.
    "OUTBOX_RELAY": True,
    "OUTBOX_DATABASES": ["default"],
    # Seconds between two looks at an empty outbox (a commit in the relay's own process
    # wakes it at once), and rows published per Redis round trip.
    "OUTBOX_INTERVAL": 0.5,
    "OUTBOX_BATCH": 100,
    # Days an effectively-once task's TaskEffect row is kept (blitzq_django.effects.prune):
    # a redelivery, or an idempotency key reused, after it is gone runs the body again.
    "EFFECTS_RETENTION": 7,
    # Periodic tasks (docs/scheduling.md): schedule name -> {"task": "app.tasks.name",
    # "cron": "0 3 * * *" (tz: default TIME_ZONE) or "every": seconds, and optionally
    # "args", "kwargs", "queue", "missed" ("run_once", "skip", "run_all"), "catch_up",
    # "grace", "enabled" and message options (timeout, expires, retries, priority...)}.
    # Dispatched by manage.py runscheduler (or runworker --with-scheduler).
    "PERIODIC": {},
    # Who may follow a task's progress (docs/progress.md): the dotted path of a function
    # (user, task: blitzq_django.progress.Followed) -> bool. The default lets the user
    # who enqueued it (its user_id header) and staff with view_taskrecord.
    "PROGRESS_PERMISSION": "blitzq_django.progress.owner_or_viewer",
    # A token that lets a scraper read /metrics and the JSON stats with the header
    # "Authorization: Bearer <token>" (docs/metrics.md); None: sessions of staff with
    # view_queueoverview only.
    "METRICS_TOKEN": None,
    # With task history on (and Redis): events the history writer has not read yet are
    # kept beyond EVENTS_MAXLEN, up to this many per queue (a safety valve; events
    # trimmed unread at this cap are counted and shown: docs/django.md).
    "EVENTS_HARD_MAXLEN": 1_000_000,
    # The console log of runworker, runscheduler, runhistory and runoutbox when the
    # project's LOGGING gives blitzq no handler: "text" or "json" (a JSON object a line,
    # a task's fields as keys; python-json-logger). --log-format overrides it.
    "LOG_FORMAT": "text",
    # OpenTelemetry spans (docs/observability.md): one per message enqueued (its context
    # sent in the message's headers) and one per attempt. Needs opentelemetry-api (the
    # "otel" extra); the project sets the TracerProvider.
    "TRACING": False,
    # Seconds a `def` task's thread may run on after its timeout raised TimeLimitExceeded
    # in it (a blocking call Python cannot interrupt); then the worker process recycles
    # (runworker --time-limit-grace overrides it; docs/failures.md).
    "TIME_LIMIT_GRACE": 5.0,
}

DEFAULT_REDIS_URL = "redis://localhost:6379/0"
REDIS_SCHEMES = ("redis", "rediss", "unix")
BROKERS = ("redis", "memory")
DELIVERY_MODES = ("reliable", "fast")
HISTORY_MODES = ("all", "failures", "off")
HISTORY_WRITERS = ("process", "thread")
REDIS_CACHE_BACKENDS = ("django_redis.cache.RedisCache",
                        "django.core.cache.backends.redis.RedisCache")

SECRET_KEYS = frozenset({"REDIS_URL", "REDIS_OPTIONS", "METRICS_TOKEN"})
_NUMBER = (int, float)
#: key -> (accepted types, how to say it)
TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "REDIS_URL": ((str, type(None)), "a URL string, a callable returning one, or None"),
    "CACHE_ALIAS": ((str, type(None)), "a cache alias (str) or None"),
    "BROKER": ((str,), "a string"),
    "MODE": ((str,), "'reliable' or 'fast'"),
    "QUEUE_MODES": ((dict,), "a dict of queue name -> 'reliable' or 'fast'"),
    "NAMESPACE": ((str,), "a string"),
    "QUEUES": ((list, tuple), "a list of queue names"),
    "DEFAULT_QUEUE": ((str,), "a string"),
    "STORE_RESULTS": ((bool,), "True or False"),
    "RESULT_TTL": ((int,), "an integer number of seconds"),
    "TRACK_STATE": ((bool,), "True or False"),
    "IDEMPOTENCY_TTL": ((int,), "an integer number of seconds"),
    "REVOKE_TTL": ((int,), "an integer number of seconds"),
    "MAX_MESSAGE_SIZE": ((int,), "an integer number of bytes"),
    "MAX_RESULT_SIZE": ((int,), "an integer number of bytes"),
    "VISIBILITY_TIMEOUT": (_NUMBER, "a number of seconds"),
    "MAX_DELIVERIES": ((int,), "an integer"),
    "DEAD_LETTER_MAX": ((int,), "an integer"),
    "EVENTS": ((bool,), "True or False"),
    "EVENTS_MAXLEN": ((int,), "an integer"),
    "CONCURRENCY": ((int,), "an integer"),
    "THREADS": ((int, type(None)), "an integer or None"),
    "PROCESSES": ((int,), "an integer"),
    "PROCESS_POOL_SIZE": ((int, type(None)), "an integer or None"),
    "PROCESS_MAX_TASKS_PER_CHILD": ((int,), "an integer"),
    "QUEUE_CONCURRENCY": ((dict,), "a dict of queue name -> integer"),
    "ROUTES": ((dict,), "a dict of task name glob -> queue name"),
    "SHUTDOWN_TIMEOUT": (_NUMBER, "a number of seconds"),
    "REDIS_OPTIONS": ((dict,), "a dict"),
    "REDACT": ((list, tuple), "a list of argument names"),
    "RATE_LIMITS": ((dict,), "a dict of bucket name -> rate like '10/s'"),
    "HISTORY": ((str,), "'all', 'failures' or 'off'"),
    "HISTORY_RETENTION": (_NUMBER, "a number of days"),
    "HISTORY_WRITER": ((str,), "'process' or 'thread'"),
    "OUTBOX_RELAY": ((bool,), "True or False"),
    "OUTBOX_DATABASES": ((list, tuple), "a list of database aliases"),
    "OUTBOX_INTERVAL": (_NUMBER, "a number of seconds"),
    "OUTBOX_BATCH": ((int,), "an integer"),
    "EFFECTS_RETENTION": (_NUMBER, "a number of days"),
    "PERIODIC": ((dict,), "a dict of schedule name -> {'task': ..., 'cron' or 'every': ...}"),
    "PROGRESS_PERMISSION": ((str,), "a dotted path to a function (user, task) -> bool"),
    "METRICS_TOKEN": ((str, type(None)), "a string or None"),
    "EVENTS_HARD_MAXLEN": ((int,), "an integer"),
    "LOG_FORMAT": ((str,), "'text' or 'json'"),
    "TRACING": ((bool,), "True or False"),
    "TIME_LIMIT_GRACE": (_NUMBER, "a number of seconds"),
}
#: key -> the engine's rule for the value (type, range, finite): the same one the
#: engine applies when it is handed the value, so the check and the use agree.
LIMITS: dict[str, limits.Limit] = {
    "RESULT_TTL": limits.LIMITS["record_ttl"],
    "IDEMPOTENCY_TTL": limits.LIMITS["idempotency_ttl"],
    "REVOKE_TTL": limits.LIMITS["revoke_ttl"],
    "MAX_MESSAGE_SIZE": limits.LIMITS["max_message_size"],
    "MAX_RESULT_SIZE": limits.LIMITS["max_result_size"],
    # Stricter than the engine's 0.1 s (which tests need): a lease under a second
    # is recovered while a healthy worker is still running the task.
    "VISIBILITY_TIMEOUT": replace(limits.LIMITS["visibility_timeout"], low=1),
    "MAX_DELIVERIES": limits.LIMITS["max_deliveries"],
    "DEAD_LETTER_MAX": limits.LIMITS["dead_letter_max"],
    # At least 1: EVENTS = False is how events are turned off.
    "EVENTS_MAXLEN": replace(limits.LIMITS["events_maxlen"], low=1, note=""),
    "CONCURRENCY": limits.LIMITS["concurrency"],
    "THREADS": replace(limits.LIMITS["threads"], low=1, note=" (None = CONCURRENCY)"),
    "PROCESSES": limits.LIMITS["processes"],
    "PROCESS_POOL_SIZE": limits.Limit(True, 1, 1024, note=" (None = the number of CPUs)"),
    "PROCESS_MAX_TASKS_PER_CHILD": limits.Limit(True, 1, 10**9),
    "SHUTDOWN_TIMEOUT": limits.LIMITS["shutdown_timeout"],
    "OUTBOX_INTERVAL": limits.Limit(False, 0.01, 60),
    "OUTBOX_BATCH": limits.Limit(True, 1, 1000),
    "EVENTS_HARD_MAXLEN": replace(limits.LIMITS["events_maxlen"], low=1, note=""),
    "TIME_LIMIT_GRACE": limits.LIMITS["time_limit_grace"],
}

#: The one registry of this process: @blitzq_task adds to it, every client built here
#: and every worker started by runworker reads it.
class DjangoRegistry(TaskRegistry):
    """The process registry. A name it does not know may be a ``django.tasks`` function
    of the BlitzQ backend in a module not imported yet (tasks.py modules are imported
    at startup; others are not): it is imported then, once (blitzq_django.backend)."""

    def __init__(self) -> None:
        super().__init__()
        self._unresolved: set[str] = set()

    def find(self, name: str) -> TaskSpec | None:
        spec = self._specs.get(name)
        if spec is None and name not in self._unresolved:
            spec = self._resolve(name)
        return spec

    def get(self, name: str) -> TaskSpec:
        spec = self.find(name)
        return spec if spec is not None else super().get(name)

    def add(self, spec: TaskSpec) -> TaskSpec:
        return super().add(_without_context(spec))

    def _resolve(self, name: str) -> TaskSpec | None:
        from .signals import uses_django_tasks

        if not uses_django_tasks():  # settings.TASKS does not name the BlitzQ backend
            return None
        try:
            from .backend import import_task
        except ImproperlyConfigured:  # neither django.tasks nor the django-tasks backport
            spec = None
        else:
            spec = import_task(name)
        if spec is None:
            if len(self._unresolved) > 10_000:
                self._unresolved.clear()
            self._unresolved.add(name)
        return spec


def _without_context(spec: TaskSpec) -> TaskSpec:
    """A ``django.tasks`` task registered by the backend (a runner wrapping its function,
    marked ``__blitzq_django_task__``) that ``takes_context``: its runner passes the
    context first, so enqueue binds the arguments to the function's other parameters."""
    bound = getattr(spec.func, "__blitzq_django_task__", None)
    if bound is None or spec.signature is not None or not bound[0].takes_context:
        return spec
    try:
        signature = inspect.signature(bound[0].func)
    except (TypeError, ValueError):
        return spec
    return replace(spec, signature=signature.replace(
        parameters=list(signature.parameters.values())[1:]))


registry = DjangoRegistry()


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the settings, ready for a system check or an exception."""

    id: str  # "blitzq.E003"
    key: str  # "CONCURRENCY", or "" for the dict itself
    message: str
    hint: str = ""

    def __str__(self) -> str:
        hint = f" HINT: {self.hint}" if self.hint else ""
        return f"{self.message} ({self.id}).{hint}"


def _where(key: str) -> str:
    return f"BLITZQ[{key!r}]" if key else "settings.BLITZQ"


def user_settings() -> Any:
    from django.conf import settings

    return getattr(settings, "BLITZQ", {})


def problems(user: Any = None, caches: dict[str, Any] | None = None) -> list[Problem]:
    """Everything wrong with ``user`` (default: settings.BLITZQ); [] when all is well.

    Pure: no network. Ids are stable and documented (docs/configuration.md):
    E001 not a dict, E002 unknown key, E003 wrong type, E004 value out of range or not
    a choice, E005 bad REDIS_URL, E006 bad CACHE_ALIAS, E008 unknown REDIS_OPTIONS key,
    E009 bad RATE_LIMITS bucket name or rate, E010 bad ROUTES entry, E011 bad
    QUEUE_CONCURRENCY entry, E012 bad HISTORY, HISTORY_WRITER or HISTORY_RETENTION, E013 bad
    OUTBOX_DATABASES or EFFECTS_RETENTION, E014 bad MODE or QUEUE_MODES entry (unknown
    mode, unknown queue), E015 bad PERIODIC entry (cron, tz, every,
    arguments...: blitzq_django/periodic.py).
    """
    if user is None:
        user = user_settings()
    if not isinstance(user, dict):
        return [Problem("blitzq.E001", "", f"settings.BLITZQ must be a dict, not "
                        f"{type(user).__name__}.", "BLITZQ = {'REDIS_URL': 'redis://...'}")]
    found: list[Problem] = []
    for key in user:
        if key not in DEFAULTS:
            close = closest(key, DEFAULTS)
            hint = f"Did you mean {close[0]!r}?" if close else (
                "Known keys: " + ", ".join(sorted(DEFAULTS)) + ".")
            found.append(Problem("blitzq.E002", str(key), f"{_where(str(key))} is not a setting "
                                 "of blitzq_django.", hint))
    merged = {**DEFAULTS, **{k: v for k, v in user.items() if k in DEFAULTS}}
    for key, (types, said) in TYPES.items():
        value = merged[key]
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if key == "REDIS_URL" and callable(value):
            ok = True
        if not ok:
            # Never echo what may hold a password.
            shown = "" if key in SECRET_KEYS else f" {value!r:.60}"
            found.append(Problem("blitzq.E003", key, f"{_where(key)} must be {said}, not "
                                 f"{type(value).__name__}{shown}.",
                                 f"Default: {DEFAULTS[key]!r}."))
    if "REDACT" not in {p.key for p in found}:
        odd = [n for n in merged["REDACT"] if not isinstance(n, str) or not n.strip()]
        if odd:
            found.append(Problem("blitzq.E003", "REDACT", f"{_where('REDACT')} must be a list "
                                 f"of argument names (non-empty strings), not {odd[0]!r:.60}.",
                                 "For example ['password', 'token'] (matched case-insensitively,"
                                 " as substrings)."))
    bad_type = {p.key for p in found if p.id == "blitzq.E003"}

    def out_of_range(key: str, message: str, hint: str = "") -> None:
        if key not in bad_type:
            found.append(Problem("blitzq.E004", key, f"{_where(key)} {message}", hint))

    for key, rule in LIMITS.items():
        if merged[key] is None and type(None) in TYPES[key][0]:
            continue  # None is a choice of its own ("the default"), not a number
        wrong = limits.problem(key, merged[key], rule)
        if wrong:
            out_of_range(key, f"{wrong}.")
    if merged["BROKER"] not in BROKERS:
        out_of_range("BROKER", f"must be one of {', '.join(map(repr, BROKERS))}, "
                     f"not {merged['BROKER']!r}.")
    if "QUEUES" not in bad_type:
        queues = list(merged["QUEUES"])
        if not queues or not all(isinstance(q, str) and name_ok(q) for q in queues):
            out_of_range("QUEUES", "must be a non-empty list of queue names (letters, digits, "
                         "'-', '_', '.'; at most 100 characters).")
        elif "DEFAULT_QUEUE" not in bad_type and merged["DEFAULT_QUEUE"] not in queues:
            out_of_range("DEFAULT_QUEUE", f"{merged['DEFAULT_QUEUE']!r} is not one of "
                         f"BLITZQ['QUEUES'] {queues!r}.",
                         "Add it to QUEUES, or a worker started without --queues never "
                         "serves it.")
    if "NAMESPACE" not in bad_type and not name_ok(merged["NAMESPACE"]):
        out_of_range("NAMESPACE", f"{merged['NAMESPACE']!r} is not a valid namespace "
                     "(letters, digits, '-', '_', '.'; at most 100 characters).")
    url = merged["REDIS_URL"]
    if isinstance(url, str) and "REDIS_URL" not in bad_type:
        wrong = url_problem(url)
        if wrong:
            found.append(Problem("blitzq.E005", "REDIS_URL", f"BLITZQ['REDIS_URL'] {wrong}.",
                                 "For example redis://localhost:6379/0 or "
                                 "unix:///run/redis.sock?db=0."))
    if "REDIS_OPTIONS" not in bad_type:
        found += _redis_options_problems(merged["REDIS_OPTIONS"])
    if "RATE_LIMITS" not in bad_type:
        found += _rate_limits_problems(merged["RATE_LIMITS"])
    if "ROUTES" not in bad_type:
        found += [Problem("blitzq.E010", "ROUTES", f"BLITZQ['ROUTES'][{pattern!r}] {why}.",
                          "Keys are task name globs like 'myapp.tasks.*'; values are queue "
                          "names.")
                  for pattern, why in _routes_problems(merged["ROUTES"])]
    if "QUEUE_CONCURRENCY" not in bad_type:
        found += [Problem("blitzq.E011", "QUEUE_CONCURRENCY",
                          f"BLITZQ['QUEUE_CONCURRENCY'][{queue!r}] {why}.")
                  for queue, why in _queue_concurrency_problems(merged["QUEUE_CONCURRENCY"])]
    found += _mode_problems(merged, bad_type)
    if "HISTORY" not in bad_type and merged["HISTORY"] not in HISTORY_MODES:
        modes = ", ".join(map(repr, HISTORY_MODES))
        found.append(Problem("blitzq.E012", "HISTORY", f"BLITZQ['HISTORY'] must be one of "
                             f"{modes}, not {merged['HISTORY']!r:.40}.", "Default: 'all'."))
    if "HISTORY_WRITER" not in bad_type and merged["HISTORY_WRITER"] not in HISTORY_WRITERS:
        found.append(Problem("blitzq.E012", "HISTORY_WRITER", "BLITZQ['HISTORY_WRITER'] must "
                             f"be 'process' or 'thread', not {merged['HISTORY_WRITER']!r:.40}.",
                             "Default: 'process'."))
    retention = merged["HISTORY_RETENTION"]
    if "HISTORY_RETENTION" not in bad_type and not (
            math.isfinite(retention) and 0 < retention <= 36_500):
        found.append(Problem("blitzq.E012", "HISTORY_RETENTION", "BLITZQ['HISTORY_RETENTION'] "
                             f"must be a number of days over 0 and up to 36500, not "
                             f"{retention!r:.40}.", "Default: 14."))
    found += _outbox_effects_problems(merged, bad_type)
    if "PERIODIC" not in bad_type and merged["PERIODIC"]:
        from .periodic import periodic_problems

        found += [Problem("blitzq.E015", "PERIODIC", message, hint)
                  for message, hint in periodic_problems(merged["PERIODIC"])]
    alias = merged["CACHE_ALIAS"]
    if isinstance(alias, str):
        found += _cache_problems(alias, caches)
    found += _observability_problems(merged, bad_type)
    return found


def _observability_problems(merged: dict[str, Any], bad_type: set[str]) -> list[Problem]:
    """E004: LOG_FORMAT not a format, TRACING on without opentelemetry-api installed."""
    found = []
    if "LOG_FORMAT" not in bad_type and merged["LOG_FORMAT"] not in ("text", "json"):
        found.append(Problem("blitzq.E004", "LOG_FORMAT", "BLITZQ['LOG_FORMAT'] must be 'text' "
                             f"or 'json', not {merged['LOG_FORMAT']!r:.40}.",
                             "Default: 'text'."))
    if merged["TRACING"] is True:
        import importlib.util

        try:
            installed = importlib.util.find_spec("opentelemetry.trace") is not None
        except ImportError:  # no opentelemetry package at all
            installed = False
        if not installed:
            found.append(Problem("blitzq.E004", "TRACING", "BLITZQ['TRACING'] is True but "
                                 "opentelemetry-api is not installed.",
                                 "pip install 'blitzq-django[otel]', and set a TracerProvider "
                                 "(docs/observability.md)."))
    return found


def _outbox_effects_problems(merged: dict[str, Any], bad_type: set[str]) -> list[Problem]:
    """E013: OUTBOX_DATABASES not a non-empty list of aliases, EFFECTS_RETENTION out of range."""
    found = []
    aliases = merged["OUTBOX_DATABASES"]
    if "OUTBOX_DATABASES" not in bad_type and not (
            aliases and all(isinstance(a, str) and a for a in aliases)):
        found.append(Problem("blitzq.E013", "OUTBOX_DATABASES", "BLITZQ['OUTBOX_DATABASES'] "
                             f"must be a non-empty list of database aliases, not "
                             f"{aliases!r:.60}.", "Default: ['default']."))
    days = merged["EFFECTS_RETENTION"]
    if "EFFECTS_RETENTION" not in bad_type and not (math.isfinite(days) and 0 < days <= 36_500):
        found.append(Problem("blitzq.E013", "EFFECTS_RETENTION", "BLITZQ['EFFECTS_RETENTION'] "
                             f"must be a number of days over 0 and up to 36500, not "
                             f"{days!r:.40}.", "Default: 7."))
    return found


def _routes_problems(routes: dict[Any, Any]) -> list[tuple[Any, str]]:
    found = []
    for pattern, queue in routes.items():
        if not isinstance(pattern, str) or not pattern:
            found.append((pattern, "has a key that is not a task name glob"))
        elif not (isinstance(queue, str) and name_ok(queue)):
            found.append((pattern, f"is {queue!r}, not a queue name (letters, digits, '-', "
                                   "'_', '.'; at most 100 characters)"))
    return found


def _mode_problems(merged: dict[str, Any], bad_type: set[str]) -> list[Problem]:
    """E014: MODE or a QUEUE_MODES value not a delivery mode, or a QUEUE_MODES key that is
    not a queue of QUEUES or a ROUTES target (a typo would leave the real queue in MODE)."""
    found = []
    modes = ", ".join(map(repr, DELIVERY_MODES))
    if "MODE" not in bad_type and merged["MODE"] not in DELIVERY_MODES:
        found.append(Problem("blitzq.E014", "MODE", f"BLITZQ['MODE'] must be one of {modes}, "
                             f"not {merged['MODE']!r:.40}.", "Default: 'reliable'."))
    if "QUEUE_MODES" in bad_type:
        return found
    known = set(merged["QUEUES"]) if "QUEUES" not in bad_type else set()
    if "ROUTES" not in bad_type:
        known |= {q for q in merged["ROUTES"].values() if isinstance(q, str)}
    for queue, mode in merged["QUEUE_MODES"].items():
        where = f"BLITZQ['QUEUE_MODES'][{queue!r:.60}]"
        if not (isinstance(queue, str) and name_ok(queue)):
            found.append(Problem("blitzq.E014", "QUEUE_MODES", f"{where}: the key is not a "
                                 "queue name.", "Letters, digits, '-', '_', '.'; at most 100 "
                                 "characters."))
        elif queue not in known:
            found.append(Problem("blitzq.E014", "QUEUE_MODES", f"{where}: unknown queue "
                                 f"{queue!r}: not in BLITZQ['QUEUES'] nor a ROUTES target.",
                                 "Add it to QUEUES, or fix the name."))
        if mode not in DELIVERY_MODES:
            found.append(Problem("blitzq.E014", "QUEUE_MODES", f"{where} must be one of "
                                 f"{modes}, not {mode!r:.40}."))
    return found


def _queue_concurrency_problems(caps: dict[Any, Any]) -> list[tuple[Any, str]]:
    found = []
    for queue, cap in caps.items():
        if not (isinstance(queue, str) and name_ok(queue)):
            found.append((queue, "is not a queue name"))
            continue
        wrong = limits.problem("concurrency", cap)
        if wrong:
            found.append((queue, wrong))
    return found


def url_problem(url: str) -> str | None:
    """What is wrong with a Redis URL ("has scheme 'http'; ..."), or None.

    Never repeats the URL: it may hold a password.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsed lazily: a bad port raises only here
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535"
        # Some of these messages quote the netloc, which may hold user:password@.
        return "is not a valid URL" + ("" if "@" in str(exc) else f": {exc}")
    if parts.scheme not in REDIS_SCHEMES:
        return (f"has scheme {parts.scheme!r}; expected one of "
                f"{', '.join(REDIS_SCHEMES)}")
    return None


@functools.cache
def redis_option_names() -> frozenset[str]:
    """Every keyword redis-py takes through ``Redis.from_url(url, **options)``, sync
    or asyncio: the clients', the pools' and the connection classes' parameters (TCP,
    SSL, unix socket), and the options a URL's query may carry."""
    import redis
    import redis.asyncio
    import redis.asyncio.connection
    import redis.connection

    names: set[str] = set()
    for module in (redis.connection, redis.asyncio.connection):
        names.update(getattr(module, "URL_QUERY_ARGUMENT_PARSERS", {}))
        classes = [module.ConnectionPool, module.Connection, module.SSLConnection,
                   module.UnixDomainSocketConnection]
        for cls in [redis.Redis, redis.asyncio.Redis, *classes]:
            for base in cls.__mro__:
                init = base.__dict__.get("__init__")
                if init is None or not base.__module__.startswith("redis"):
                    continue
                names.update(p.name for p in inspect.signature(init).parameters.values()
                             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    names.discard("self")
    return frozenset(names)


def _redis_options_problems(options: dict[Any, Any]) -> list[Problem]:
    # A typo here would otherwise be a TypeError at the first enqueue, far from its cause.
    known = redis_option_names()
    found = []
    for key in options:
        if isinstance(key, str) and key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = (f"Did you mean {close[0]!r}?" if close else
                "See the keyword arguments of redis.Redis and its connection classes.")
        found.append(Problem("blitzq.E008", "REDIS_OPTIONS", f"BLITZQ['REDIS_OPTIONS'] key "
                             f"{key!r:.60} is not an option of redis-py's client.", hint))
    # Timeouts by the rule the worker needs: finite, and a socket timeout longer than the
    # worker's blocking read (1 s), or every idle fetch would fail as a timeout.
    for key, low in (("socket_timeout", 1.0), ("socket_connect_timeout", 0.0)):
        value = options.get(key)
        if value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or not low < value <= 86400:
            found.append(Problem(
                "blitzq.E004", "REDIS_OPTIONS", f"BLITZQ['REDIS_OPTIONS'][{key!r}] must be a "
                f"finite number of seconds above {low:g} and up to 86400, not {value!r:.40}.",
                "Default: 10 for socket_timeout (longer than the worker's 1 s blocking read), "
                "5 for socket_connect_timeout."))
    return found


def _rate_limits_problems(buckets: dict[Any, Any]) -> list[Problem]:
    found = []
    for name, rate in buckets.items():
        wrong = rates.bucket_problem(name)
        if wrong is None:
            try:
                rates.as_rate(rate, f"BLITZQ['RATE_LIMITS'][{name!r}]")
            except BlitzqError as exc:
                wrong = str(exc)
        else:
            wrong = f"BLITZQ['RATE_LIMITS']: {wrong}"
        if wrong:
            found.append(Problem("blitzq.E009", "RATE_LIMITS", f"{wrong}.",
                                 "For example {'stripe': '25/s', 'geocoder': '600/m'}: a count "
                                 "over 0 per s, m or h."))
    return found


def _cache_problems(alias: str, caches: dict[str, Any] | None) -> list[Problem]:
    if caches is None:
        from django.conf import settings

        caches = getattr(settings, "CACHES", {})
    entry = caches.get(alias)
    if entry is None:
        return [Problem("blitzq.E006", "CACHE_ALIAS", f"BLITZQ['CACHE_ALIAS'] is {alias!r} but "
                        "settings.CACHES has no such alias.",
                        f"Known aliases: {', '.join(sorted(caches)) or 'none'}.")]
    if entry.get("BACKEND") not in REDIS_CACHE_BACKENDS:
        return [Problem("blitzq.E006", "CACHE_ALIAS", f"BLITZQ['CACHE_ALIAS'] {alias!r} uses "
                        f"{entry.get('BACKEND')!r}, which is not a Redis cache.",
                        "Use a django_redis.cache.RedisCache or "
                        "django.core.cache.backends.redis.RedisCache alias, or set REDIS_URL.")]
    return []


# -- the cached settings and client -----------------------------------------------------

_lock = threading.RLock()
_settings: dict[str, Any] | None = None
_client: Client | None = None


def get_settings() -> dict[str, Any]:
    """The merged settings (a fresh dict after each change).

    Raises ImproperlyConfigured listing every problem (each naming its key and id).
    """
    global _settings
    merged = _settings
    if merged is None:
        with _lock:
            if _settings is None:
                found = problems()
                if found:
                    raise ImproperlyConfigured(" ".join(str(p) for p in found))
                _settings = {**DEFAULTS, **user_settings()}
            merged = _settings
    return merged


def redis_location(merged: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(URL, redis-py options) from CACHE_ALIAS or REDIS_URL."""
    options: dict[str, Any] = {}
    alias = merged["CACHE_ALIAS"]
    if alias:
        from django.conf import settings

        entry = settings.CACHES[alias]
        location = entry.get("LOCATION")
        if isinstance(location, list | tuple):
            location = location[0]  # the primary; the rest are replicas
        url = str(location or DEFAULT_REDIS_URL).split(",")[0].strip()
        cache_options = dict(entry.get("OPTIONS") or {})
        if entry["BACKEND"].startswith("django_redis"):
            if cache_options.get("PASSWORD"):
                options["password"] = cache_options["PASSWORD"]
            options.update(cache_options.get("CONNECTION_POOL_KWARGS") or {})
        else:
            options.update({k: v for k, v in cache_options.items()
                            if k not in ("pool_class", "parser_class", "db")})
    else:
        url = merged["REDIS_URL"]
        if callable(url):
            url = url()
        url = url or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
        wrong = url_problem(url)
        if wrong:
            # The callable's or the environment's URL: checked here, when it is known.
            raise ImproperlyConfigured(f"BLITZQ['REDIS_URL'] resolved to a URL that {wrong} "
                                       "(blitzq.E005).")
    options.update(merged["REDIS_OPTIONS"])
    return url, options


def redis_source(merged: dict[str, Any]) -> str:
    """Where the Redis location comes from: "cache" (CACHE_ALIAS), "setting"
    (BLITZQ["REDIS_URL"]), "env" ($REDIS_URL) or "default" (redis://localhost:6379/0)."""
    if merged["CACHE_ALIAS"]:
        return "cache"
    if merged["REDIS_URL"]:
        return "setting"
    return "env" if os.environ.get("REDIS_URL") else "default"


def events_maxlen(merged: dict[str, Any]) -> int:
    """The brokers' events_maxlen: EVENTS_MAXLEN, or 0 (off) when EVENTS is False."""
    return merged["EVENTS_MAXLEN"] if merged["EVENTS"] else 0


def events_cap(merged: dict[str, Any]) -> int:
    """The cap the Redis scripts put on each events stream. With history on, the history
    writer trims what it has read down to EVENTS_MAXLEN itself (history/writer.py), and
    the scripts cap at EVENTS_HARD_MAXLEN: a writer that falls behind finds its events."""
    if not history_on(merged):
        return events_maxlen(merged)
    return max(merged["EVENTS_MAXLEN"], merged["EVENTS_HARD_MAXLEN"])


#: A broker every client built meanwhile uses instead of the one BROKER describes, or
#: None. blitzq_django.testing sets it for the length of a test (and calls reset()), so
#: the settings' other keys (ROUTES, DEFAULT_QUEUE ...) still apply while nothing reaches
#: Redis. Not for production code.
broker_override: Any = None


def history_on(merged: dict[str, Any]) -> bool:
    """Whether task history is kept: the events then carry the details it needs (the
    message at enqueue, the error on failures: engine/core/events.py Event.detail)."""
    return merged["HISTORY"] != "off" and bool(merged["EVENTS"])


def build_client(merged: dict[str, Any]) -> Client:
    """A new Client for these (already validated) settings, on the process registry."""
    try:
        if broker_override is not None:
            broker: Any = broker_override
        elif merged["BROKER"] == "memory":
            broker = MemoryBroker(record_ttl=merged["RESULT_TTL"],
                                       idempotency_ttl=merged["IDEMPOTENCY_TTL"],
                                       dead_letter_max=merged["DEAD_LETTER_MAX"],
                                       revoke_ttl=merged["REVOKE_TTL"],
                                       events_maxlen=events_maxlen(merged),
                                       event_details=history_on(merged),
                                       mode=merged["MODE"],
                                       queue_modes=merged["QUEUE_MODES"])
        else:
            url, options = redis_location(merged)
            broker = RedisBroker(url, namespace=merged["NAMESPACE"],
                                 record_ttl=merged["RESULT_TTL"],
                                 idempotency_ttl=merged["IDEMPOTENCY_TTL"],
                                 dead_letter_max=merged["DEAD_LETTER_MAX"],
                                 revoke_ttl=merged["REVOKE_TTL"],
                                 events_maxlen=events_cap(merged),
                                 event_details=history_on(merged),
                                 mode=merged["MODE"], queue_modes=merged["QUEUE_MODES"],
                                 redis_options=options)
        return Client(broker, registry, store_results=merged["STORE_RESULTS"],
                      track_state=merged["TRACK_STATE"],
                      max_message_size=merged["MAX_MESSAGE_SIZE"],
                      max_result_size=merged["MAX_RESULT_SIZE"],
                      default_queue=merged["DEFAULT_QUEUE"],
                      routes=merged["ROUTES"],
                      rate_limits=merged["RATE_LIMITS"],
                      schedules=_schedules(merged),
                      queue_check=_queue_check())
    except BlitzqError as exc:
        raise ImproperlyConfigured(f"settings.BLITZQ: {exc}") from exc


def _queue_check() -> Callable[[str], None]:
    from .queues import check_enqueue  # queues.py imports this module

    return check_enqueue


def _schedules(merged: dict[str, Any]) -> Any:
    from .periodic import schedules_for  # periodic imports this module

    return schedules_for(merged)


def get_client() -> Client:
    """The process-wide Client, built on first use from settings.BLITZQ.

    Raises ImproperlyConfigured naming the setting when the settings are wrong. It
    does not connect: the first enqueue does (or ``check_connection()``).
    """
    global _client
    client = _client
    if client is None:
        with _lock:
            if _client is None:
                _client = build_client(get_settings())
                from .periodic import extra_sources

                # client.schedules() (blitzq schedules) lists the database's too.
                _client.schedule_sources = extra_sources()
                if get_settings()["TRACING"]:  # OpenTelemetry (docs/observability.md)
                    from .engine.tracing import instrument

                    instrument(_client)
            client = _client
    return client


def process_pool_options(merged: dict[str, Any]) -> dict[str, Any]:
    """The Worker keywords of its process pool (executor="process" tasks): its size, the
    recycling, and Django set up in each child (``child_setup``) with stale database
    connections closed around each call, as around a request."""
    from django.db import close_old_connections

    return {"processes": merged["PROCESS_POOL_SIZE"],
            "max_tasks_per_child": merged["PROCESS_MAX_TASKS_PER_CHILD"],
            "process_initializer": child_setup,
            "process_initargs": (os.environ.get("DJANGO_SETTINGS_MODULE"),),
            "process_around_call": close_old_connections}


def child_setup(settings_module: str | None) -> None:
    """Run once in each process-pool child: ``django.setup()`` with the worker's settings
    module, so process tasks see the settings, the apps and the ORM. (Settings made with
    ``settings.configure()`` in the worker cannot be passed on: the child needs
    DJANGO_SETTINGS_MODULE.)"""
    if settings_module:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings_module)
    import django

    django.setup()


def check_connection(client: Client | None = None) -> None:
    """Ping the broker; raise engine BrokerUnavailable (URL without password) if down."""
    client = client or get_client()
    client.broker.ping()


def default_queue() -> str:
    return get_settings()["DEFAULT_QUEUE"]


def redact_names() -> tuple[str, ...]:
    """BLITZQ["REDACT"]: the argument names masked wherever task data is shown.

    Read through get_settings(), so it follows setting_changed like the rest.
    """
    return tuple(get_settings()["REDACT"])


def reset() -> None:
    """Forget the cached settings and client (closing its connections)."""
    global _settings, _client
    with _lock:
        old, _client, _settings = _client, None, None
    if old is not None:
        try:
            old.broker.close()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - closing a dead connection must not mask the change
            pass


@receiver(setting_changed)
def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("BLITZQ", "CACHES"):
        reset()
