"""Whether blitzq's tables exist: a project that never ran ``migrate`` hears so from
``manage.py check`` (blitzq.W011) and from the commands that write them (runworker,
runscheduler, runhistory, runoutbox), which refuse to start instead of failing on
"no such table" at every write.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.management.base import CommandError
from django.db import connections, router

from .settings import get_settings

APP = "blitzq_django"


def missing_tables() -> list[tuple[str, list[str]]]:
    """(database alias, blitzq tables missing there) for each database that blitzq's
    models are migrated to and that can be reached: one introspection query each. A
    database that cannot be reached (or that a test does not allow) is left out: Django
    and the command that uses it say so."""
    wanted: dict[str, set[str]] = {}
    for model in apps.get_app_config(APP).get_models():
        if not model._meta.managed:
            continue
        aliases = {router.db_for_write(model)}
        if model._meta.model_name == "outboxmessage":
            aliases |= set(_outbox_databases())
        for alias in aliases:
            if alias in connections and router.allow_migrate_model(alias, model):
                wanted.setdefault(alias, set()).add(model._meta.db_table)
    found = []
    for alias, tables in sorted(wanted.items()):
        present = _tables(connections[alias])
        if present is not None and tables - present:
            found.append((alias, sorted(tables - present)))
    return found


def _outbox_databases() -> list[str]:
    try:
        return list(get_settings()["OUTBOX_DATABASES"])
    except Exception:  # noqa: BLE001 - bad settings: check_settings reports them
        return []


def _tables(connection: Any) -> set[str] | None:
    """The tables of one database, or None when it cannot be read now."""
    opened = connection.connection is None
    try:
        with connection.cursor() as cursor:
            return set(connection.introspection.table_names(cursor))
    except Exception:  # noqa: BLE001 - unreachable, misconfigured, or not allowed here
        return None
    finally:
        if opened:
            connection.close()  # a check leaves no connection behind


def describe(found: list[tuple[str, list[str]]]) -> str:
    where = "; ".join(f"database {alias!r} lacks {', '.join(tables)}" for alias, tables
                      in found)
    return f"blitzq's tables are missing ({where}): run manage.py migrate"


def refuse_if_missing(command: str) -> None:
    """Raise CommandError (the command exits 1) when blitzq's tables are missing."""
    found = missing_tables()
    if found:
        raise CommandError(f"{command} cannot start: {describe(found)}")
