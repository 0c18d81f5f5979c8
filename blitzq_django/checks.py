"""System checks (``manage.py check``). Ids are stable; see docs/configuration.md.

=============  ==============================================================
blitzq.E001    settings.BLITZQ is not a dict
blitzq.E002    unknown key in BLITZQ
blitzq.E003    a value of the wrong type (also: REDACT entries that are not names)
blitzq.E004    a value out of range, not finite (NaN, inf), or not one of the choices
blitzq.E005    REDIS_URL is unparsable (bad IPv6 host, bad port) or not a
               redis://, rediss://, unix://, redis[s]+sentinel:// (with a service)
               or redis[s]+cluster:// (database 0 only) URL
blitzq.E006    CACHE_ALIAS names no cache, or not a Redis cache
blitzq.E007    (deploy) Redis cannot be reached
blitzq.E008    a REDIS_OPTIONS key that redis-py does not take (hint: the closest one)
blitzq.E009    a RATE_LIMITS bucket name or rate that is not valid
blitzq.E010    a ROUTES key that is not a task name glob, or value not a queue name
blitzq.E011    a QUEUE_CONCURRENCY queue name or cap that is not valid
blitzq.E012    HISTORY not one of the modes, or HISTORY_RETENTION not a number of
               days over 0 and up to 36500
blitzq.E013    OUTBOX_DATABASES not a non-empty list of database aliases, or
               EFFECTS_RETENTION not a number of days over 0 and up to 36500
blitzq.E014    MODE or a QUEUE_MODES value not "reliable" or "fast", or a
               QUEUE_MODES key that is not a queue of QUEUES (or a ROUTES target)
blitzq.E015    a BLITZQ["PERIODIC"] entry that is not a valid schedule
blitzq.E016    a schedule runs a task that is not registered, or a PERIODIC name
               is declared in code (@periodic / schedule=) too
blitzq.E020    two functions are decorated under one task name (the second is
               refused: not registered, and its enqueue raises)
blitzq.E021    (deploy) the Redis server is older than 6.2
blitzq.E022    (deploy) Redis evicts any key when full (maxmemory-policy allkeys-*):
               queued messages can vanish
blitzq.E023    (django.tasks backend) TASKS uses BlitzQ without "blitzq_django" in
               INSTALLED_APPS: no runworker, BLITZQ unchecked
blitzq.W001    ``manage.py runworker`` is another app's command (e.g. channels)
blitzq.W002    a task uses a queue not in BLITZQ["QUEUES"]
blitzq.W003    (deploy) BROKER is "memory": tasks never leave the process
blitzq.W004    (deploy) THREADS x PROCESSES task threads, plus a margin for the
               web server, exceed the database's connection limit
               (PostgreSQL ``max_connections`` - ``superuser_reserved_connections``,
               MySQL ``max_connections`` - 1)
blitzq.W005    (deploy) Redis may evict keys with a TTL (maxmemory-policy volatile-*,
               or allkeys-* while no maxmemory is set): results, idempotency keys,
               unique markers and revocations can vanish early
blitzq.W006    (deploy) the maxmemory-policy cannot be read (CONFIG GET refused,
               INFO without it): eviction is not checked
blitzq.W007    THREADS x PROCESSES >= 100 with persistent database connections
               (CONN_MAX_AGE != 0, not SQLite): every task thread keeps one open
blitzq.W008    HISTORY is on but EVENTS is off: history is fed by the events streams,
               so no task history is written
blitzq.E024    (deploy) the Redis Cluster's state is not ok (slots uncovered, a
               master down without a replica to replace it)
blitzq.W012    (deploy) a Redis Cluster master, or the Sentinel-watched master, has
               no live replica: its death loses its queues until it comes back
blitzq.W013    (deploy) a master with replicas has min-replicas-to-write 0: it takes
               writes while cut off from every replica (a failover then drops them)
blitzq.W009    (deploy) a queue holds messages waiting to run and no live worker
               serves it
blitzq.W010    (deploy) NAMESPACE is the default "blitzq", shared by every project
               that does not set one (and no Redis is configured, if so)
blitzq.W011    blitzq's tables are missing from a database that can be reached:
               run manage.py migrate (runworker and the other commands refuse to
               start)
blitzq.I001    no Redis is configured (REDIS_URL, CACHE_ALIAS, $REDIS_URL): the
               default redis://localhost:6379/0 is in use
blitzq.E101    (django.tasks backend, blitzq_django/backend.py) TASKS[alias]
               ['OPTIONS'] has an unknown key or an invalid task option
blitzq.E102    (django.tasks backend) TASKS[alias]['QUEUES'] holds an invalid name
blitzq.W101    (django.tasks backend) BLITZQ["STORE_RESULTS"] is False: results
               of django.tasks are never seen to finish
=============  ==============================================================

Default checks never touch the network, but for W011, which lists the tables of each
database blitzq's models use (when it can be reached); ``manage.py check --deploy``
pings Redis (over the connection the app uses: REDIS_URL or CACHE_ALIAS), reads its
version, eviction policy and queues, and reads the database's connection limit.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.management import get_commands
from django.db import connections

from . import queues, schema
from .engine.brokers.capabilities import TOPOLOGY_FACTS
from .engine.core.registry import unserved
from .engine.errors import BlitzqError
from .registry import declared_queues, duplicate_tasks, registry
from .runtime import check_connection, get_client, redis_source
from .settings import DEFAULT_REDIS_URL, get_settings, problems, user_settings

TAG = "blitzq"

#: The oldest Redis the engine supports (recover.lua needs XPENDING ... IDLE, from 6.2).
REDIS_MIN_VERSION = (6, 2)
#: Task threads at which persistent connections are worth a warning (blitzq.W007):
#: PostgreSQL's default max_connections.
PERSISTENT_THREADS_WARNING = 100


@checks.register(TAG)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [checks.Error(p.message, hint=p.hint or None, obj="settings.BLITZQ", id=p.id)
            for p in problems()]


@checks.register(TAG)
def check_runworker_command(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    owner = get_commands().get("runworker")
    if owner in (None, "blitzq_django"):
        return []
    return [checks.Warning(
        f"'manage.py runworker' runs the {owner!r} app's command, not blitzq_django's.",
        hint=f"List 'blitzq_django' before {owner!r} in INSTALLED_APPS (the first app "
             "listed wins a command name).",
        obj="settings.INSTALLED_APPS", id="blitzq.W001")]


@checks.register(TAG)
def check_task_queues(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if problems():
        return []  # check_settings reports those; QUEUES may be unusable
    served = set(get_settings()["QUEUES"])
    found = []
    for spec in registry:
        if spec.queue in declared_queues and spec.queue not in served:
            found.append(checks.Warning(
                f"Task {spec.name!r} uses queue {spec.queue!r}, which is not in "
                "BLITZQ['QUEUES'].",
                hint="Add it to QUEUES (runworker without --queues serves QUEUES and the "
                     "queues tasks declare, but other tools read QUEUES only).",
                obj=spec.name, id="blitzq.W002"))
    return found


@checks.register(TAG)
def check_history_needs_events(app_configs: Any = None,
                               **kwargs: Any) -> list[checks.CheckMessage]:
    if problems():
        return []
    merged = get_settings()
    if merged["HISTORY"] == "off" or merged["EVENTS"]:
        return []
    return [checks.Warning(
        f"BLITZQ['HISTORY'] is {merged['HISTORY']!r} but BLITZQ['EVENTS'] is False: the "
        "history writer reads the events streams, so no task history is written.",
        hint="Set EVENTS to True, or HISTORY to 'off' to say you want none.",
        obj="settings.BLITZQ", id="blitzq.W008")]


@checks.register(TAG)
def check_tables(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """blitzq.W011: a project that never ran migrate. A warning, not an error: migrate
    itself runs the checks first."""
    found = schema.missing_tables()
    if not found:
        return []
    return [checks.Warning(
        f"{schema.describe(found)}.",
        hint="Run `manage.py migrate`: runworker, runscheduler, runhistory and runoutbox "
             "refuse to start until then (task history, the outbox and database schedules "
             "are written there).",
        obj="blitzq_django", id="blitzq.W011")]


@checks.register(TAG)
def check_redis_configured(app_configs: Any = None,
                           **kwargs: Any) -> list[checks.CheckMessage]:
    """blitzq.I001: no Redis configured anywhere, so the default localhost is in use."""
    if problems():
        return []
    if redis_source(get_settings()) != "default":
        return []
    return [checks.Info(
        f"No Redis is configured (BLITZQ['REDIS_URL'], BLITZQ['CACHE_ALIAS'] and the "
        f"REDIS_URL environment variable are unset): blitzq uses {DEFAULT_REDIS_URL}.",
        hint="Set BLITZQ['REDIS_URL'] (or REDIS_URL in the environment) to say which Redis "
             "to use, and BLITZQ['NAMESPACE'] if other projects share it.",
        obj="settings.BLITZQ", id="blitzq.I001")]


@checks.register(TAG)
def check_task_names(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [checks.Error(
        f"Task name {name!r} is taken by {holder}; {refused} is decorated under the same "
        "name and was refused.",
        hint="Give one of them another name: @blitzq_task(name='app.tasks.other'). A "
             "worker runs the first one registered; enqueueing the refused one raises "
             "ImproperlyConfigured.",
        obj=refused, id="blitzq.E020")
        for name, holder, refused in list(duplicate_tasks) if name in registry]


@checks.register(TAG)
def check_persistent_connections(app_configs: Any = None,
                                 **kwargs: Any) -> list[checks.CheckMessage]:
    """blitzq.W007: no network, only settings."""
    if problems():
        return []

    return persistent_connections(worker_threads(get_settings()),
                                  getattr(settings, "DATABASES", {}))


def persistent_connections(threads: int,
                           databases: dict[str, dict[str, Any]]) -> list[checks.CheckMessage]:
    """blitzq.W007 for each database (not SQLite) with CONN_MAX_AGE != 0 when ``threads``
    task threads may each keep a connection open. Pure."""
    if threads < PERSISTENT_THREADS_WARNING:
        return []
    found: list[checks.CheckMessage] = []
    for alias, entry in databases.items():
        age = entry.get("CONN_MAX_AGE", 0)
        pooled = (entry.get("OPTIONS") or {}).get("pool")
        if age == 0 or pooled or "sqlite" in str(entry.get("ENGINE", "")):
            continue
        found.append(checks.Warning(
            f"runworker runs up to {threads} `def` tasks at once (THREADS or CONCURRENCY x "
            f"PROCESSES), and DATABASES[{alias!r}]['CONN_MAX_AGE'] is {age!r}: each task "
            f"thread that touched {alias!r} keeps its connection open, up to {threads} per "
            "worker host.",
            hint="Give the worker CONN_MAX_AGE = 0 (connections are closed after each task), "
                 "lower BLITZQ['THREADS'], or put a pooler (PgBouncer) in front of the "
                 "database. `manage.py check --deploy` compares with the real limit "
                 "(blitzq.W004).",
            obj=f"settings.DATABASES[{alias!r}]", id="blitzq.W007"))
    return found


def worker_threads(merged: dict[str, Any]) -> int:
    """The most `def` tasks one runworker runs at once: THREADS (None: CONCURRENCY) per
    process, times PROCESSES. Each may hold a database connection."""
    threads = merged["THREADS"] if merged["THREADS"] is not None else merged["CONCURRENCY"]
    return int(threads) * int(merged["PROCESSES"])


# -- deploy: Redis -------------------------------------------------------------------------


@checks.register(TAG, deploy=True)
def check_redis_reachable(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """blitzq.E007 / W003, then the server itself (E021, E022, W005, W006)."""
    if problems():
        return []
    merged = get_settings()
    if merged["BROKER"] == "memory":
        return [checks.Warning(
            "BLITZQ['BROKER'] is 'memory': messages never leave the process and are lost "
            "when it exits.", hint="Use BROKER 'redis' in production.",
            obj="settings.BLITZQ", id="blitzq.W003")]
    try:
        client = get_client()
        check_connection(client)
    except BlitzqError as exc:
        return [checks.Error(str(exc), hint="Start Redis, or fix BLITZQ['REDIS_URL'] / "
                             "CACHE_ALIAS.", obj="settings.BLITZQ", id="blitzq.E007")]
    except Exception as exc:  # noqa: BLE001 - a check must report, not crash
        return [checks.Error(f"cannot use Redis: {type(exc).__name__}: {exc}",
                             obj="settings.BLITZQ", id="blitzq.E007")]
    facts = client.broker.server_facts()
    return [] if facts is None else judge_redis(*facts)


@checks.register(TAG, deploy=True)
def check_queues_served(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """blitzq.W009: messages wait in a queue that no live worker serves (the queues
    named, and every queue Redis has seen written to). Quiet when Redis cannot be
    reached: E007 says so."""
    if problems() or get_settings()["BROKER"] == "memory":
        return []
    try:
        client = get_client()
        workers = client.workers()
        stats = [client.queue_stats(q) for q in queues.shown(seen=client.seen_queues())]
    except Exception:  # noqa: BLE001 - unreachable: check_redis_reachable reports it
        return []
    waiting = {s.queue: s.ready + s.scheduled for s in stats}
    return [checks.Warning(
        f"Queue {queue!r} holds {waiting[queue]} messages waiting to run and no live worker "
        "serves it.",
        hint=f"Start a worker that serves it (`manage.py runworker` serves every queue Redis "
             f"has seen when it starts; or `runworker --queues {queue}`), or drop them with "
             f"`manage.py blitzq purge {queue}`.",
        obj=queue, id="blitzq.W009") for queue in unserved(stats, workers)]


@checks.register(TAG, deploy=True)
def check_namespace(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """blitzq.W010: the default namespace, shared by every project that sets none."""
    if problems() or "NAMESPACE" in user_settings():
        return []
    merged = get_settings()
    if merged["BROKER"] == "memory":
        return []
    unconfigured = redis_source(merged) == "default"
    return [checks.Warning(
        f"BLITZQ['NAMESPACE'] is the default {merged['NAMESPACE']!r}"
        + (f", and no Redis is configured ({DEFAULT_REDIS_URL} is in use)"
           if unconfigured else "")
        + ": every project that sets no NAMESPACE shares these keys, so two of them on one "
        "Redis would take each other's messages.",
        hint="Set BLITZQ['NAMESPACE'] to this project's name (and BLITZQ['REDIS_URL']); "
             "if this Redis serves this project only, silence blitzq.W010.",
        obj="settings.BLITZQ", id="blitzq.W010")]


def redis_version(info: dict[str, Any]) -> tuple[int, ...] | None:
    """The server's version from INFO ("7.0.15" -> (7, 0, 15)), or None if absent."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(info.get("redis_version", "")))
    return tuple(int(p) for p in found.groups() if p is not None) if found else None


def judge_redis(info: dict[str, Any], policy: str | None,
                why: str = "") -> list[checks.CheckMessage]:
    """The deploy checks of one Redis server, from what ``broker.server_facts()`` read.
    Pure."""
    found: list[checks.CheckMessage] = judge_topology(info.get(TOPOLOGY_FACTS))
    version = redis_version(info)
    if version is not None and version[:2] < REDIS_MIN_VERSION:
        found.append(checks.Error(
            f"The Redis server is version {info.get('redis_version')}; blitzq_django needs "
            f"{'.'.join(map(str, REDIS_MIN_VERSION))} or later.",
            hint="Upgrade Redis (or point REDIS_URL / CACHE_ALIAS at a newer server): older "
                 "servers lack what the engine's scripts use (XPENDING ... IDLE, which finds "
                 "the messages of crashed workers).",
            obj="settings.BLITZQ", id="blitzq.E021"))
    if policy is None:
        found.append(checks.Warning(
            f"Cannot read the Redis server's maxmemory-policy ({why or 'unknown reason'}); "
            "whether Redis may evict queued messages is not checked.",
            hint="Make sure the policy is 'noeviction' in your provider's settings, then "
                 "silence this warning with SILENCED_SYSTEM_CHECKS = ['blitzq.W006'].",
            obj="settings.BLITZQ", id="blitzq.W006"))
        return found
    if policy == "noeviction":
        return found
    unlimited = str(info.get("maxmemory", "")) == "0"
    hint = ("Set maxmemory-policy to noeviction (CONFIG SET maxmemory-policy noeviction, "
            "redis.conf, or your provider's parameter group): Redis then refuses writes when "
            "full, and enqueue raises instead of losing data. Keep a cache on another Redis.")
    if policy.startswith("allkeys-") and not unlimited:
        found.append(checks.Error(
            f"Redis's maxmemory-policy is {policy!r}: when memory is full it evicts any key, "
            "including the streams that hold queued messages, which then vanish without "
            "an error.", hint=hint, obj="settings.BLITZQ", id="blitzq.E022"))
    else:
        found.append(checks.Warning(
            f"Redis's maxmemory-policy is {policy!r}"
            + (" (no maxmemory is set now)" if unlimited else "")
            + ": when memory is full it evicts keys with a time to live: results, "
            "idempotency keys, unique markers and revocations can vanish early (a duplicate "
            "enqueue is then accepted, a cancelled task may run).",
            hint=hint, obj="settings.BLITZQ", id="blitzq.W005"))
    return found


def judge_topology(facts: dict[str, Any] | None) -> list[checks.CheckMessage]:
    """The deploy checks of a Sentinel or Cluster topology (E024, W012, W013), from the
    facts ``broker.server_facts()`` read (engine/brokers/redis/facts.py). Pure."""
    if not facts:
        return []
    found: list[checks.CheckMessage] = []
    where = "The Redis Cluster" if facts["kind"] == "cluster" else "The Sentinel master"
    if facts.get("error"):
        return [checks.Warning(f"Cannot read the Redis topology: {facts['error']}",
                               obj="settings.BLITZQ", id="blitzq.W012")]
    state = facts.get("cluster_state")
    if state is not None and state != "ok":
        found.append(checks.Error(
            f"The Redis Cluster's state is {state!r}: some slots are not served, and the "
            "queues in them can neither take nor give messages.",
            hint="Run `redis-cli --cluster check <host:port>` and fix the cluster (every "
                 "slot assigned to a live master).",
            obj="settings.BLITZQ", id="blitzq.E024"))
    alone = facts.get("masters_without_replica") or []
    if facts.get("replicas") == 0 or alone:
        which = (f"master(s) {', '.join(alone)} of the Redis Cluster have" if alone
                 else "The Sentinel-watched master has")
        found.append(checks.Warning(
            f"{which} no live replica: if it dies, nothing takes its place, and its queues "
            "stop (and lose what was not persisted) until it comes back.",
            hint="Give each master at least one replica (docs/redis.md).",
            obj="settings.BLITZQ", id="blitzq.W012"))
    replicated = facts.get("replicas", 1) and len(alone) < facts.get("masters", 1)
    if replicated and facts.get("min_replicas_to_write") == 0:
        found.append(checks.Warning(
            f"{where} takes writes with min-replicas-to-write 0: a master cut off from its "
            "replicas keeps accepting enqueues and settlements that the failover then "
            "forgets.",
            hint="Set min-replicas-to-write 1 and min-replicas-max-lag 10 on each master "
                 "(docs/redis.md), or silence blitzq.W013 if losing those writes is "
                 "acceptable.",
            obj="settings.BLITZQ", id="blitzq.W013"))
    return found


# -- deploy: database connections ----------------------------------------------------------


@checks.register(TAG, deploy=True)
def check_database_connections(app_configs: Any = None,
                               **kwargs: Any) -> list[checks.CheckMessage]:
    """blitzq.W004: task threads against each database's connection limit."""
    if problems():
        return []

    merged = get_settings()
    found = []
    for alias in connections:
        try:
            limit = database_limit(connections[alias])
        except Exception:  # noqa: BLE001 - unreachable database: Django's own checks say so
            continue
        if limit is not None:
            count, how = worker_connections(merged, connections[alias].settings_dict)
            warning = connection_budget(alias, count, *limit, how=how)
            if warning is not None:
                found.append(warning)
    return found


def worker_connections(merged: dict[str, Any], database: dict[str, Any]) -> tuple[int, str]:
    """(connections one runworker may hold to ``database``, how that is counted): one per
    task thread, or with Django's connection pool (PostgreSQL ``OPTIONS["pool"]``) at most
    the pool's size per process (psycopg_pool's default: 4)."""
    threads = worker_threads(merged)
    pool = (database.get("OPTIONS") or {}).get("pool")
    if not pool:
        return threads, ("THREADS or CONCURRENCY x PROCESSES: one per task thread running a "
                         "`def` task")
    size = pool if isinstance(pool, dict) else {}
    per_process = int(size.get("max_size") or size.get("min_size") or 4)
    return (min(threads, per_process * int(merged["PROCESSES"])),
            "the connection pool's size x PROCESSES")


def database_limit(connection: Any) -> tuple[int, int] | None:
    """(max_connections, connections reserved for superusers), or None for a database
    without a known limit (SQLite, other vendors)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW max_connections")
            limit = int(cursor.fetchone()[0])
            cursor.execute("SHOW superuser_reserved_connections")
            reserved = int(cursor.fetchone()[0])
        return limit, reserved
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@max_connections")
            return int(cursor.fetchone()[0]), 1  # one extra connection for SUPER
    return None


def connection_budget(alias: str, threads: int, max_connections: int,
                      reserved: int = 0, *, how: str = "THREADS or CONCURRENCY x PROCESSES: "
                      "one per task thread running a `def` task"
                      ) -> checks.CheckMessage | None:
    """blitzq.W004 when ``threads`` task threads, plus a margin for everything else
    (10% of the usable connections, at least 5: web server, migrations, shells), exceed
    what the database accepts. Pure."""
    usable = max_connections - reserved
    margin = max(5, usable // 10)
    if threads + margin <= usable:
        return None
    return checks.Warning(
        f"runworker may open {threads} connections to database {alias!r} ({how}), but it "
        f"accepts "
        f"{usable} ({max_connections} max_connections - {reserved} reserved), and the web "
        f"server and other clients need some too (a margin of {margin} is kept).",
        hint="Lower BLITZQ['THREADS'] or PROCESSES (async def tasks need no thread), raise "
             "the database's max_connections, or put a pooler (PgBouncer) in front of it. "
             "Several worker hosts multiply the count.",
        obj=f"settings.DATABASES[{alias!r}]", id="blitzq.W004")
