"""The start-up lines of runworker and runscheduler: the engine's banner
(engine/banner.py) with what only the settings know: where the Redis URL came from,
and where the history writer runs."""

from __future__ import annotations

import logging
from typing import Any

from .. import runtime
from ..engine.banner import announce, redis_location
from ..history import process
from ..settings import DEFAULT_REDIS_URL


def redis_source(merged: dict[str, Any]) -> str:
    """Where the Redis location comes from, as the settings say (runtime.redis_location's
    order: CACHE_ALIAS, BLITZQ["REDIS_URL"], $REDIS_URL, the default)."""
    if runtime.broker_override is not None or merged["BROKER"] == "memory":
        return "BLITZQ['BROKER'] 'memory'" if merged["BROKER"] == "memory" else \
            "a test broker (blitzq_django.testing)"
    source = runtime.redis_source(merged)  # the one classification (checks use it too)
    if source == "cache":
        return f"settings.CACHES[{merged['CACHE_ALIAS']!r}] (BLITZQ['CACHE_ALIAS'])"
    if source == "setting":
        return ("BLITZQ['REDIS_URL'] (a callable)" if callable(merged["REDIS_URL"])
                else "BLITZQ['REDIS_URL']")
    if source == "env":
        return "the REDIS_URL environment variable"
    return (f"the default {DEFAULT_REDIS_URL}: neither BLITZQ['REDIS_URL'] nor the "
            "REDIS_URL environment variable is set")


def history_writer(merged: dict[str, Any], with_history: bool) -> str:
    """Where runworker's history writer runs (history.companion's choice), or why none."""
    if merged["HISTORY"] == "off":
        return "off (BLITZQ['HISTORY'] is 'off')"
    if not merged["EVENTS"]:
        return "off (BLITZQ['EVENTS'] is False)"
    if not with_history:
        return "not here (--no-history: manage.py runhistory writes it)"
    if (merged["HISTORY_WRITER"] == "process" and merged["BROKER"] != "memory"
            and process.can_run()):
        return f"writer process (HISTORY {merged['HISTORY']!r})"
    return f"writer thread (HISTORY {merged['HISTORY']!r})"


def worker(client: Any, config: Any, merged: dict[str, Any], options: dict[str, Any]
           ) -> None:
    """runworker's banner (engine/banner.py), with where Redis and history come from."""
    also = ["scheduler:   on (--with-scheduler)"] if options.get("with_scheduler") else []
    announce(client, config, processes=options["processes"], verbosity=options["verbosity"],
             redis_source=redis_source(merged),
             history=history_writer(merged, options["history"]), also=also)


def scheduler(client: Any, scheduler: Any, merged: dict[str, Any]) -> None:
    """runscheduler's line (the scheduler then lists the schedules it found)."""
    promoting = ("promotes delayed messages" if scheduler.promote
                 else "promotes nothing (--no-promote)")
    redis, source = redis_location(client), redis_source(merged)
    logging.getLogger("blitzq.scheduler").info(
        "blitzq scheduler %s starting: redis %s, from %s; %s", scheduler.name, redis, source,
        promoting, extra={"scheduler": scheduler.name, "redis": redis, "redis_source": source})
