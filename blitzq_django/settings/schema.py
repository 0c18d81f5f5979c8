"""The one table of ``settings.BLITZQ``: one ``Setting`` record per key.

Each record holds the key's default, the types it accepts (and how to say them in an
error), the engine's rule for its value when it is a number (``limit``), and what it
means (``doc``; docs/settings.md says the same for users, and a test keeps their
defaults equal). ``problems.py`` checks every key against its record in one loop, so a
new key is one entry here, not three tables kept in step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..engine.core import limits
from ..engine.core.message import DEFAULT_MAX_MESSAGE_SIZE
from ..engine.core.record import DEFAULT_MAX_RESULT_SIZE
from ..engine.core.redact import DEFAULT_REDACT

NONE = type(None)
NUMBER = (int, float)


@dataclass(frozen=True, slots=True)
class Setting:
    """One key of ``settings.BLITZQ``."""

    default: Any
    types: tuple[type, ...]  # what isinstance accepts (bool only when listed)
    said: str  # the types in words, for the E003 message
    limit: limits.Limit | None = None  # the engine's rule for a number (E004)
    doc: str = ""


#: Every key of ``settings.BLITZQ``. Keys not listed are refused (blitzq.E002).
SETTINGS: dict[str, Setting] = {
    "REDIS_URL": Setting(
        None, (str, NONE), "a URL string, a callable returning one, or None",
        doc=('Where Redis is: a redis://, rediss:// or unix:// URL, a Sentinel set '
             '(redis+sentinel://h1:26379,h2:26379/<service>[/<db>]) or a Redis Cluster '
             '(redis+cluster://h1:6379,h2:6379), rediss+ for TLS, or a zero-argument '
             'callable returning one (called when the client is built: secrets stores, '
             'embedded servers). None means: the REDIS_URL environment variable, else '
             'redis://localhost:6379/0.')),
    "CACHE_ALIAS": Setting(
        None, (str, NONE), "a cache alias (str) or None",
        doc=('The alias of a django-redis (or Django RedisCache) cache whose LOCATION and '
             'connection options to use instead of REDIS_URL.')),
    "BROKER": Setting(
        "redis", (str,), "a string",
        doc=('"redis": reliable mode on Redis streams (at-least-once). "memory": in-process '
             'only, lost on exit; for tests and notebooks, never production.')),
    "MODE": Setting(
        "reliable", (str,), "'reliable' or 'fast'",
        doc=('Delivery mode of every queue (docs/delivery-guarantees.md): "reliable" (Redis '
             "streams with leases, at-least-once: a crashed worker's messages run again) or "
             '"fast" (Redis lists, at-most-once: fewer Redis commands per task, but a worker '
             'killed without a graceful stop loses what it had fetched and not finished).')),
    "QUEUE_MODES": Setting(
        {}, (dict,), "a dict of queue name -> 'reliable' or 'fast'",
        doc=('Queue -> delivery mode, overriding MODE for that queue, e.g. {"bulk": "fast"}. '
             "Producers and workers read the same settings, so they agree. Change a queue's "
             'mode only once it is empty: its waiting messages stay where the old mode put '
             'them.')),
    "NAMESPACE": Setting(
        "blitzq", (str,), "a string",
        doc=('Prefix inside every key name, so several projects can share one Redis.')),
    "QUEUES": Setting(
        ["default"], (list, tuple), "a list of queue names",
        doc=('The queues a worker serves when it is not given --queues.')),
    "DEFAULT_QUEUE": Setting(
        "default", (str,), "a string",
        doc=('The queue of tasks that do not name one; must be one of QUEUES.')),
    "STORE_RESULTS": Setting(
        True, (bool,), "True or False",
        doc=("Keep each task's final record (result or error) for RESULT_TTL seconds.")),
    "RESULT_TTL": Setting(
        86400, (int,), "an integer number of seconds",
        limit=limits.LIMITS["record_ttl"],
        doc="See STORE_RESULTS."),
    "TRACK_STATE": Setting(
        False, (bool,), "True or False",
        doc=('Also write a record when a message is enqueued and each time its state changes '
             '(costs a little on every enqueue).')),
    "IDEMPOTENCY_TTL": Setting(
        86400, (int,), "an integer number of seconds",
        limit=limits.LIMITS["idempotency_ttl"],
        doc=('How long an idempotency key keeps a second enqueue from adding a message '
             '(seconds).')),
    "REVOKE_TTL": Setting(
        3600, (int,), "an integer number of seconds",
        limit=limits.LIMITS["revoke_ttl"],
        doc=('How long a revocation is kept (seconds): cancel() of a queued or running '
             'message (docs/cancel.md). A worker receiving the message within it does not '
             'run it.')),
    "MAX_MESSAGE_SIZE": Setting(
        DEFAULT_MAX_MESSAGE_SIZE, (int,), "an integer number of bytes",
        limit=limits.LIMITS["max_message_size"],
        doc=('Encoded messages above this many bytes are refused at enqueue.')),
    "MAX_RESULT_SIZE": Setting(
        DEFAULT_MAX_RESULT_SIZE, (int,), "an integer number of bytes",
        limit=limits.LIMITS["max_result_size"],
        doc=('Encoded task results above this many bytes fail the attempt (ResultTooLarge).')),
    "VISIBILITY_TIMEOUT": Setting(
        60.0, NUMBER, "a number of seconds",
        # Stricter than the engine's 0.1 s (which tests need): a lease under a second
        # is recovered while a healthy worker is still running the task.
        limit=replace(limits.LIMITS["visibility_timeout"], low=1),
        doc=("Seconds a running message's lease lasts unless renewed; after it, another "
             'worker may recover the message (the task then runs again: at-least-once).')),
    "MAX_DELIVERIES": Setting(
        5, (int,), "an integer",
        limit=limits.LIMITS["max_deliveries"],
        doc=('Deliveries of one message (recoveries after crashes) before it is dead- '
             'lettered.')),
    "DEAD_LETTER_MAX": Setting(
        100_000, (int,), "an integer",
        limit=limits.LIMITS["dead_letter_max"],
        doc=('Dead letters kept per queue; the oldest are dropped beyond it.')),
    "EVENTS": Setting(
        True, (bool,), "True or False",
        doc=('Append every transition of a message (enqueued, started, succeeded, retried '
             "...) to its queue's events stream, atomically with the transition "
             '(docs/events.md).')),
    "EVENTS_MAXLEN": Setting(
        100_000, (int,), "an integer",
        # At least 1: EVENTS = False is how events are turned off.
        limit=replace(limits.LIMITS["events_maxlen"], low=1, note=""),
        doc=('About this many events are kept per queue (the stream is capped, MAXLEN ~).')),
    "CONCURRENCY": Setting(
        100, (int,), "an integer",
        limit=limits.LIMITS["concurrency"],
        doc=('Attempts one worker runs at once (runworker --concurrency overrides it).')),
    "THREADS": Setting(
        None, (int, NONE), "an integer or None",
        limit=replace(limits.LIMITS["threads"], low=1, note=" (None = CONCURRENCY)"),
        doc=('Threads that run `def` tasks in one worker process; None means CONCURRENCY, so '
             'CONCURRENCY: 100 runs 100 `def` tasks at once (runworker --threads overrides '
             'it). Each thread that uses the ORM holds a database connection: see check '
             'blitzq.W004.')),
    "PROCESSES": Setting(
        1, (int,), "an integer",
        limit=limits.LIMITS["processes"],
        doc=('Worker processes runworker starts (runworker --processes overrides it).')),
    "PROCESS_POOL_SIZE": Setting(
        None, (int, NONE), "an integer or None",
        limit=limits.Limit(True, 1, 1024, note=" (None = the number of CPUs)"),
        doc=('Child processes of one worker that run `def` tasks declared executor="process" '
             '(CPU-bound code, docs/executors.md); None means os.cpu_count(). Not PROCESSES, '
             "which counts runworker's worker processes: each of those has a pool of this "
             'size, started on its first process task (a worker that never runs one starts '
             'none).')),
    "PROCESS_MAX_TASKS_PER_CHILD": Setting(
        1000, (int,), "an integer",
        limit=limits.Limit(True, 1, 10**9),
        doc=('Calls one such child runs before it is replaced by a fresh one (bounds leaks).')),
    "QUEUE_CONCURRENCY": Setting(
        {}, (dict,), "a dict of queue name -> integer",
        doc=('Queue -> most attempts of that queue one worker runs at once, e.g. {"reports": '
             '2} (runworker --queue-concurrency adds to it). Queues without one share '
             'CONCURRENCY; a quiet queue is never starved by a busy one either way.')),
    "ROUTES": Setting(
        {}, (dict,), "a dict of task name glob -> queue name",
        doc=('Task name glob -> queue, first match wins (e.g. {"reports.*": "slow"}). A '
             "message goes to: the call's queue= option, else ROUTES, else the task's "
             'queue=, else DEFAULT_QUEUE. runworker serves routed queues by default.')),
    "SHUTDOWN_TIMEOUT": Setting(
        30.0, NUMBER, "a number of seconds",
        limit=limits.LIMITS["shutdown_timeout"],
        doc=('Seconds a stopping worker waits for running attempts before requeueing them.')),
    "REDIS_OPTIONS": Setting(
        {}, (dict,), "a dict",
        doc=('Extra keyword arguments for redis-py clients (e.g. {"ssl_cert_reqs": '
             '"required"}).')),
    "REDACT": Setting(
        list(DEFAULT_REDACT), (list, tuple), "a list of argument names",
        doc=('Argument names (and dict keys) whose values are masked wherever task data is '
             'shown: the admin, dead-letter listings. Case-insensitive, matched as '
             'substrings.')),
    "RATE_LIMITS": Setting(
        {}, (dict,), "a dict of bucket name -> rate like '10/s'",
        doc=('Named rate-limit buckets shared by tasks that name them with rate_key=: bucket '
             'name -> rate, "N/s", "N/m" or "N/h" (e.g. {"stripe": "25/s"}). Enforced across '
             'all workers; a bucket holds at most N tokens. See docs/rate-limits.md.')),
    "HISTORY": Setting(
        "all", (str,), "'all', 'failures' or 'off'",
        doc=('Task history in the database (TaskRecord, docs/django.md): "all" (every task), '
             '"failures" (tasks with a failed, retried or dead-lettered attempt) or "off". '
             'Filled from the events by a writer beside runworker (or manage.py runhistory); '
             'needs EVENTS.')),
    "HISTORY_WRITER": Setting(
        "process", (str,), "'process' or 'thread'",
        doc=('Where runworker runs the history writer: "process" (a child process it starts '
             'and restarts, so the writer never takes the worker\'s GIL) or "thread" (in the '
             "worker's own process: one process less, about a third fewer tasks/s of `def` "
             'tasks; bench/).')),
    "HISTORY_RETENTION": Setting(
        14, NUMBER, "a number of days",
        doc=("Days a finished task's history row is kept (manage.py blitzq prune-history).")),
    "OUTBOX_RELAY": Setting(
        True, (bool,), "True or False",
        doc=('The transactional outbox (docs/django.md): runworker runs a relay thread that '
             'publishes the rows of OUTBOX_DATABASES (aliases of settings.DATABASES; a '
             'durable enqueue on another one is refused); False: only `manage.py runoutbox` '
             'publishes.')),
    "OUTBOX_DATABASES": Setting(
        ["default"], (list, tuple), "a list of database aliases",
        doc="See OUTBOX_RELAY."),
    "OUTBOX_INTERVAL": Setting(
        0.5, NUMBER, "a number of seconds",
        limit=limits.Limit(False, 0.01, 60),
        doc=("Seconds between two looks at an empty outbox (a commit in the relay's own "
             'process wakes it at once), and rows published per Redis round trip.')),
    "OUTBOX_BATCH": Setting(
        100, (int,), "an integer",
        limit=limits.Limit(True, 1, 1000),
        doc="See OUTBOX_INTERVAL."),
    "EFFECTS_RETENTION": Setting(
        7, NUMBER, "a number of days",
        doc=("Days an effectively-once task's TaskEffect row is kept "
             '(blitzq_django.effects.prune): a redelivery, or an idempotency key reused, '
             'after it is gone runs the body again.')),
    "PERIODIC": Setting(
        {}, (dict,), "a dict of schedule name -> {'task': ..., 'cron' or 'every': ...}",
        doc=('Periodic tasks (docs/scheduling.md): schedule name -> {"task": '
             '"app.tasks.name", "cron": "0 3 * * *" (tz: default TIME_ZONE) or "every": '
             'seconds, and optionally "args", "kwargs", "queue", "missed" ("run_once", '
             '"skip", "run_all"), "catch_up", "grace", "enabled" and message options '
             '(timeout, expires, retries, priority...)}. Dispatched by manage.py '
             'runscheduler (or runworker --with-scheduler).')),
    "PROGRESS_PERMISSION": Setting(
        "blitzq_django.progress.owner_or_viewer", (str,),
        "a dotted path to a function (user, task) -> bool",
        doc=("Who may follow a task's progress (docs/progress.md): the dotted path of a "
             'function (user, task: blitzq_django.progress.Followed) -> bool. The default '
             'lets the user who enqueued it (its user_id header) and staff with '
             'view_taskrecord.')),
    "METRICS_TOKEN": Setting(
        None, (str, NONE), "a string or None",
        doc=('A token that lets a scraper read /metrics and the JSON stats with the header '
             '"Authorization: Bearer <token>" (docs/metrics.md); None: sessions of staff '
             'with view_queueoverview only.')),
    "EVENTS_HARD_MAXLEN": Setting(
        1_000_000, (int,), "an integer",
        limit=replace(limits.LIMITS["events_maxlen"], low=1, note=""),
        doc=('With task history on (and Redis): events the history writer has not read yet '
             'are kept beyond EVENTS_MAXLEN, up to this many per queue (a safety valve; '
             'events trimmed unread at this cap are counted and shown: docs/django.md).')),
    "LOG_FORMAT": Setting(
        "text", (str,), "'text' or 'json'",
        doc=('The console log of runworker, runscheduler, runhistory and runoutbox when the '
             'project\'s LOGGING gives blitzq no handler: "text" or "json" (a JSON object a '
             "line, a task's fields as keys; python-json-logger). --log-format overrides it.")),
    "TRACING": Setting(
        False, (bool,), "True or False",
        doc=('OpenTelemetry spans (docs/observability.md): one per message enqueued (its '
             "context sent in the message's headers) and one per attempt. Needs "
             'opentelemetry-api (the "otel" extra); the project sets the TracerProvider.')),
    "TIME_LIMIT_GRACE": Setting(
        5.0, NUMBER, "a number of seconds",
        limit=limits.LIMITS["time_limit_grace"],
        doc=("Seconds a `def` task's thread may run on after its timeout raised "
             'TimeLimitExceeded in it (a blocking call Python cannot interrupt); then the '
             'worker process recycles (runworker --time-limit-grace overrides it; '
             'docs/failures.md).')),
}

#: key -> default: what a key the project leaves out is.
DEFAULTS: dict[str, Any] = {key: setting.default for key, setting in SETTINGS.items()}
#: key -> (accepted types, how to say it)
TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    key: (setting.types, setting.said) for key, setting in SETTINGS.items()}
#: key -> the engine's rule for the value (type, range, finite): the same one the
#: engine applies when it is handed the value, so the check and the use agree.
LIMITS: dict[str, limits.Limit] = {
    key: setting.limit for key, setting in SETTINGS.items() if setting.limit is not None}

#: Keys whose values are never echoed in a message: they may hold a password.
SECRET_KEYS = frozenset({"REDIS_URL", "REDIS_OPTIONS", "METRICS_TOKEN"})

DEFAULT_REDIS_URL = "redis://localhost:6379/0"
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel",
                 "redis+cluster", "rediss+cluster")
BROKERS = ("redis", "memory")
DELIVERY_MODES = ("reliable", "fast")
HISTORY_MODES = ("all", "failures", "off")
HISTORY_WRITERS = ("process", "thread")
REDIS_CACHE_BACKENDS = ("django_redis.cache.RedisCache",
                        "django.core.cache.backends.redis.RedisCache")
