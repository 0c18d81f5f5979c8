"""The process's client: where Redis is, and the engine ``Client`` built from the settings.

``get_client()`` builds the engine ``Client`` once per process (thread-safe) from
``get_settings()``, and builds it again after the settings change (``settings.reset()``
drops it). It does not connect: the first enqueue does (or ``check_connection()``).

What a feature adds to a client, it adds through a hook handed over from
``BlitzqConfig.ready()`` (apps.py), so this module imports no feature:

- ``add_build_hook(hook)``: ``hook(client, merged)`` runs on every client built here
  (``build_client``): the schedules of ``periodic``, the queue check of ``queues``;
- ``add_process_hook(hook)``: ``hook(client, merged)`` runs on the process's client
  only (``get_client``): the extra schedule sources of ``periodic``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from . import settings
from .engine import Client, MemoryBroker, RedisBroker, TaskHandle
from .engine.errors import BlitzqError
from .registry import registry
from .settings import get_settings, url_problem
from .settings.schema import DEFAULT_REDIS_URL

#: What a feature does to a client once it is built: hook(client, merged settings).
Hook = Callable[[Client, dict[str, Any]], None]
_build_hooks: list[Hook] = []
_process_hooks: list[Hook] = []

_lock = threading.RLock()
_client: Client | None = None


def add_build_hook(hook: Hook) -> None:
    """Run ``hook(client, merged)`` on every client ``build_client`` builds."""
    if hook not in _build_hooks:
        _build_hooks.append(hook)


def add_process_hook(hook: Hook) -> None:
    """Run ``hook(client, merged)`` on the process's client (``get_client``) once built."""
    if hook not in _process_hooks:
        _process_hooks.append(hook)


def redis_location(merged: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(URL, redis-py options) from CACHE_ALIAS or REDIS_URL."""
    options: dict[str, Any] = {}
    alias = merged["CACHE_ALIAS"]
    if alias:
        entry = django_settings.CACHES[alias]
        location = entry.get("LOCATION")
        if isinstance(location, list | tuple):
            location = location[0]  # the primary; the rest are replicas
        url = str(location or DEFAULT_REDIS_URL).split(",")[0].strip()
        cache_options = dict(entry.get("OPTIONS") or {})
        if entry["BACKEND"].startswith("django_redis"):
            if cache_options.get("PASSWORD"):
                options["password"] = cache_options["PASSWORD"]
            options.update(cache_options.get("CONNECTION_POOL_KWARGS") or {})
            if cache_options.get("SENTINELS"):
                url, sentinel_kwargs = sentinel_url(url, cache_options)
                if sentinel_kwargs is not None:
                    options["sentinel_kwargs"] = sentinel_kwargs
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


def sentinel_url(location: str, cache_options: dict[str, Any]
                 ) -> tuple[str, dict[str, Any] | None]:
    """(redis+sentinel URL, sentinel_kwargs) of a django-redis SentinelClient cache:
    its LOCATION names the service as its host (``redis://[:pw@]mymaster/0``), its
    OPTIONS list the SENTINELS [(host, port)] and perhaps their SENTINEL_KWARGS."""
    parts = urlsplit(location)
    scheme = "rediss+sentinel" if parts.scheme == "rediss" else "redis+sentinel"
    hosts = ",".join(f"[{h}]:{p}" if ":" in str(h) else f"{h}:{p}"
                     for h, p in cache_options["SENTINELS"])
    userinfo = parts.netloc.rpartition("@")[0]
    db = parts.path.strip("/") or "0"
    url = f"{scheme}://{userinfo + '@' if userinfo else ''}{hosts}/{parts.hostname}/{db}"
    return url, cache_options.get("SENTINEL_KWARGS")


def redis_source(merged: dict[str, Any]) -> str:
    """Where the Redis location comes from: "cache" (CACHE_ALIAS), "setting"
    (BLITZQ["REDIS_URL"]), "env" ($REDIS_URL) or "default" (redis://localhost:6379/0)."""
    if merged["CACHE_ALIAS"]:
        return "cache"
    if merged["REDIS_URL"]:
        return "setting"
    return "env" if os.environ.get("REDIS_URL") else "default"


def replica_wait(merged: dict[str, Any]) -> tuple[int, int] | None:
    """The broker's replica_wait: REPLICA_WAIT as (replicas, timeout ms), or None."""
    wait = merged["REPLICA_WAIT"]
    return None if wait is None else (wait["replicas"], wait["timeout_ms"])


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
                                 redis_options=options,
                                 replica_wait=replica_wait(merged))
        client = Client(broker, registry, store_results=merged["STORE_RESULTS"],
                        track_state=merged["TRACK_STATE"],
                        max_message_size=merged["MAX_MESSAGE_SIZE"],
                        max_result_size=merged["MAX_RESULT_SIZE"],
                        default_queue=merged["DEFAULT_QUEUE"],
                        routes=merged["ROUTES"],
                        rate_limits=merged["RATE_LIMITS"])
        for hook in _build_hooks:
            hook(client, merged)
    except BlitzqError as exc:
        raise ImproperlyConfigured(f"settings.BLITZQ: {exc}") from exc
    return client


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
                merged = get_settings()
                client = build_client(merged)
                for hook in _process_hooks:
                    hook(client, merged)
                if merged["TRACING"]:  # OpenTelemetry (docs/observability.md)
                    # lazy: cost (opentelemetry-api, an optional dependency)
                    from .engine.tracing import instrument

                    instrument(client)
                _client = client
            client = _client
    return client



def check_connection(client: Client | None = None) -> None:
    """Ping the broker; raise engine BrokerUnavailable (URL without password) if down."""
    client = client or get_client()
    client.broker.ping()


def _drop_client() -> None:
    """Forget the process's client (closing its connections): the settings changed."""
    global _client
    with _lock:
        old, _client = _client, None
    if old is not None:
        try:
            old.broker.close()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - closing a dead connection must not mask the change
            pass


settings.on_reset(_drop_client)


def get_handle(message_id: str, *, queue: str | None = None) -> TaskHandle[Any]:
    """The handle of message ``message_id`` (Celery's ``AsyncResult(id)``): its
    ``result()``, ``record()``, ``inspect()``, ``progress()`` and ``cancel()``.

    ``queue``: the message's queue. Without it, the queue Redis keeps the message's
    record or schedule on, the default queue looked at first (one read per queue seen);
    when the message is found on none (waiting with TRACK_STATE off, or its record
    expired) it is the default queue if that is the only queue, else ``LookupError``.
    ``task.handle(id)`` needs no lookup: it knows its task's queue. From async code:
    ``await get_client().ahandle(id, queue=...)``.
    """
    return get_client().handle(message_id, queue=queue)
