"""Every problem with ``settings.BLITZQ``, described once: ``problems()``.

System checks turn them into ``blitzq.E0xx`` errors (checks.py), and ``get_settings()``
into an ImproperlyConfigured naming the key. One loop checks each key against its
record in ``schema.SETTINGS`` (type E003, range E004); then come the rules that read
several keys or look inside a value. A feature's own keys (HISTORY_*, OUTBOX_*,
PERIODIC ...) are checked by the feature: it hands its rule to ``add_rule()`` from
``BlitzqConfig.ready()``, so this module imports no feature.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings

from ..engine.core import limits, rates
from ..engine.core.names import name_ok
from ..engine.core.suggest import closest
from ..engine.errors import BlitzqError, ConfigurationError
from .schema import (
    BROKERS,
    DELIVERY_MODES,
    NONE,
    REDIS_CACHE_BACKENDS,
    SECRET_KEYS,
    SETTINGS,
)


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


#: A feature's rule: (merged settings, keys whose type is already wrong) -> problems.
Rule = Callable[[dict[str, Any], set[str]], list["Problem"]]
_rules: list[Rule] = []


def add_rule(rule: Rule) -> None:
    """Have ``problems()`` run ``rule`` too (a feature's own keys: apps.py adds them)."""
    if rule not in _rules:
        _rules.append(rule)


def where(key: str) -> str:
    return f"BLITZQ[{key!r}]" if key else "settings.BLITZQ"


def user_settings() -> Any:
    return getattr(django_settings, "BLITZQ", {})


def problems(user: Any = None, caches: dict[str, Any] | None = None) -> list[Problem]:
    """Everything wrong with ``user`` (default: settings.BLITZQ); [] when all is well.

    Pure: no network. Ids are stable and documented (docs/configuration.md):
    E001 not a dict, E002 unknown key, E003 wrong type, E004 value out of range or not
    a choice, E005 bad REDIS_URL, E006 bad CACHE_ALIAS, E008 unknown REDIS_OPTIONS key,
    E009 bad RATE_LIMITS bucket name or rate, E010 bad ROUTES entry, E011 bad
    QUEUE_CONCURRENCY entry, E012 bad HISTORY, HISTORY_WRITER or HISTORY_RETENTION, E013 bad
    OUTBOX_DATABASES or EFFECTS_RETENTION, E014 bad MODE or QUEUE_MODES entry (unknown
    mode, unknown queue), E004 bad REPLICA_WAIT, E015 bad PERIODIC entry (cron, tz, every,
    arguments...: blitzq_django/periodic.py).
    """
    if user is None:
        user = user_settings()
    if not isinstance(user, dict):
        return [Problem("blitzq.E001", "", f"settings.BLITZQ must be a dict, not "
                        f"{type(user).__name__}.", "BLITZQ = {'REDIS_URL': 'redis://...'}")]
    found: list[Problem] = []
    for key in user:
        if key not in SETTINGS:
            close = closest(key, SETTINGS)
            hint = f"Did you mean {close[0]!r}?" if close else (
                "Known keys: " + ", ".join(sorted(SETTINGS)) + ".")
            found.append(Problem("blitzq.E002", str(key), f"{where(str(key))} is not a setting "
                                 "of blitzq_django.", hint))
    merged = {**{k: s.default for k, s in SETTINGS.items()},
              **{k: v for k, v in user.items() if k in SETTINGS}}
    for key, setting in SETTINGS.items():
        value, types = merged[key], setting.types
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if key == "REDIS_URL" and callable(value):
            ok = True
        if not ok:
            # Never echo what may hold a password.
            shown = "" if key in SECRET_KEYS else f" {value!r:.60}"
            found.append(Problem("blitzq.E003", key, f"{where(key)} must be {setting.said}, "
                                 f"not {type(value).__name__}{shown}.",
                                 f"Default: {setting.default!r}."))
    if "REDACT" not in {p.key for p in found}:
        odd = [n for n in merged["REDACT"] if not isinstance(n, str) or not n.strip()]
        if odd:
            found.append(Problem("blitzq.E003", "REDACT", f"{where('REDACT')} must be a list "
                                 f"of argument names (non-empty strings), not {odd[0]!r:.60}.",
                                 "For example ['password', 'token'] (matched case-insensitively,"
                                 " as substrings)."))
    bad_type = {p.key for p in found if p.id == "blitzq.E003"}

    def out_of_range(key: str, message: str, hint: str = "") -> None:
        if key not in bad_type:
            found.append(Problem("blitzq.E004", key, f"{where(key)} {message}", hint))

    for key, setting in SETTINGS.items():
        if setting.limit is None or (merged[key] is None and NONE in setting.types):
            continue  # None is a choice of its own ("the default"), not a number
        wrong = limits.problem(key, merged[key], setting.limit)
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
                                 "For example redis://localhost:6379/0, "
                                 "unix:///run/redis.sock?db=0, redis+sentinel://"
                                 "h1:26379,h2:26379/mymaster/0 or redis+cluster://"
                                 "h1:6379,h2:6379."))
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
    if "REPLICA_WAIT" not in bad_type and merged["REPLICA_WAIT"] is not None:
        wrong = replica_wait_problem(merged["REPLICA_WAIT"])
        if wrong:
            out_of_range("REPLICA_WAIT", f"{wrong}.",
                         "For example {'replicas': 1, 'timeout_ms': 100}.")
    for rule in _rules:  # each feature's own rules (history, outbox, periodic...)
        found += rule(merged, bad_type)
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


def replica_wait_problem(value: dict[Any, Any]) -> str | None:
    """What is wrong with a REPLICA_WAIT dict, or None."""
    if set(value) != {"replicas", "timeout_ms"}:
        return (f"must have exactly the keys 'replicas' and 'timeout_ms', not "
                f"{sorted(map(str, value))}")
    try:
        limits.check_replica_wait((value["replicas"], value["timeout_ms"]))
    except ConfigurationError as exc:
        return str(exc).replace("replica_wait ", "")
    return None


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
    """What is wrong with a Redis URL ("has scheme 'http'; ..."), or None: a single
    server's, a Sentinel set's or a Redis Cluster's (engine/brokers/redis/topology.py).

    Never repeats the URL: it may hold a password.
    """
    # lazy: cost (redis-py, read by the first check)
    from ..engine.brokers.redis import topology

    return topology.problem(url)


@functools.cache
def redis_option_names() -> frozenset[str]:
    """Every keyword redis-py takes through ``Redis.from_url(url, **options)``, sync
    or asyncio: the clients', the pools' and the connection classes' parameters (TCP,
    SSL, unix socket), and the options a URL's query may carry."""
    # lazy: cost (redis-py's client modules, read once by the first check)
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
    # lazy: cost (redis-py, read by the first check)
    from ..engine.brokers.redis import topology

    return frozenset(names | topology.option_names())


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
        caches = getattr(django_settings, "CACHES", {})
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

