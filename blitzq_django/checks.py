"""System checks (``manage.py check``). Ids are stable; see docs/configuration.md.

=============  ==============================================================
blitzq.E001    settings.BLITZQ is not a dict
blitzq.E002    unknown key in BLITZQ
blitzq.E003    a value of the wrong type (also: REDACT entries that are not names)
blitzq.E004    a value out of range, not finite (NaN, inf), or not one of the choices
blitzq.E005    REDIS_URL is unparsable (bad IPv6 host, bad port) or not a
               redis://, rediss:// or unix:// URL
blitzq.E006    CACHE_ALIAS names no cache, or not a Redis cache
blitzq.E007    (deploy) Redis cannot be reached
blitzq.E008    a REDIS_OPTIONS key that redis-py does not take (hint: the closest one)
blitzq.E009    a RATE_LIMITS bucket name or rate that is not valid
blitzq.E010    a ROUTES key that is not a task name glob, or value not a queue name
blitzq.E011    a QUEUE_CONCURRENCY queue name or cap that is not valid
blitzq.W001    ``manage.py runworker`` is another app's command (e.g. channels)
blitzq.W002    a task uses a queue not in BLITZQ["QUEUES"]
blitzq.W003    (deploy) BROKER is "memory": tasks never leave the process
=============  ==============================================================

Default checks never touch the network; ``manage.py check --deploy`` pings Redis.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from . import conf

TAG = "blitzq"


@checks.register(TAG)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [checks.Error(p.message, hint=p.hint or None, obj="settings.BLITZQ", id=p.id)
            for p in conf.problems()]


@checks.register(TAG)
def check_runworker_command(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from django.core.management import get_commands

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
    if conf.problems():
        return []  # check_settings reports those; QUEUES may be unusable
    from .decorators import declared_queues

    served = set(conf.get_settings()["QUEUES"])
    found = []
    for spec in conf.registry:
        if spec.queue in declared_queues and spec.queue not in served:
            found.append(checks.Warning(
                f"Task {spec.name!r} uses queue {spec.queue!r}, which is not in "
                "BLITZQ['QUEUES'].",
                hint="Add it to QUEUES (runworker without --queues serves QUEUES and the "
                     "queues tasks declare, but other tools read QUEUES only).",
                obj=spec.name, id="blitzq.W002"))
    return found


@checks.register(TAG, deploy=True)
def check_redis_reachable(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if conf.problems():
        return []
    merged = conf.get_settings()
    if merged["BROKER"] == "memory":
        return [checks.Warning(
            "BLITZQ['BROKER'] is 'memory': messages never leave the process and are lost "
            "when it exits.", hint="Use BROKER 'redis' in production.",
            obj="settings.BLITZQ", id="blitzq.W003")]
    from .engine.errors import BlitzqError

    try:
        conf.check_connection()
    except BlitzqError as exc:
        return [checks.Error(str(exc), hint="Start Redis, or fix BLITZQ['REDIS_URL'] / "
                             "CACHE_ALIAS.", obj="settings.BLITZQ", id="blitzq.E007")]
    except Exception as exc:  # noqa: BLE001 - a check must report, not crash
        return [checks.Error(f"cannot use Redis: {type(exc).__name__}: {exc}",
                             obj="settings.BLITZQ", id="blitzq.E007")]
    return []
