"""Effectively-once database effects: ``@blitzq_task(effectively_once=True)``.

Delivery is at-least-once: a worker killed after the task's database commit and
before Redis heard of the outcome leaves the message to be redelivered, and the
body runs again. An effectively-once task runs its body inside
``transaction.atomic()`` together with the insert of a ``TaskEffect`` row whose
``key`` is unique: the message's idempotency key when it has one, else its task
id (prefixed by the task name). The row and the body's writes commit together or
not at all, so:

- a redelivered duplicate finds the row and returns the stored result without
  running the body;
- a concurrent duplicate (its lease expired while the first run is still going)
  blocks on the unique index until the first run commits (then returns its
  result) or rolls back (then runs the body itself);
- a body that raises rolls the row back with its writes, so the retry runs it again.

Only the database writes of the body, on the database ``using`` (``True``: the
default one), are covered; anything else the body does (an e-mail, an HTTP call)
can still happen twice. ``def`` tasks only: an ``async def`` body cannot run
inside one ``transaction.atomic()`` on the worker's thread.

Rows are kept ``BLITZQ["EFFECTS_RETENTION"]`` days (default 7): call
``blitzq_django.effects.prune()`` periodically (a cron job, a periodic task). A message
redelivered, or a key reused, after its row was pruned runs its body again, so the
retention must outlast redeliveries and retries (and IDEMPOTENCY_TTL when messages
carry idempotency keys).
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import inspect
import json
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.utils import timezone

from ..engine import current_task
from ..engine.core.message import pack, unpack
from ..settings import get_settings

log = logging.getLogger("blitzq")

KEY_MAX = 600  # TaskEffect.key's max_length


def effect_key(task_name: str, task_id: str, idempotency_key: str | None) -> str:
    """The TaskEffect key of a message: by idempotency key when it has one, else by id."""
    if idempotency_key is not None:
        key = f"{task_name}:key:{idempotency_key}"
        if len(key) > KEY_MAX:
            digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
            key = f"{task_name}:key#{digest}"
        return key
    return f"{task_name}:id:{task_id}"


def dump_result(value: Any) -> dict[str, Any]:
    """A JSON value holding ``value`` exactly: as is when JSON keeps it, else msgpack."""
    try:
        text = json.dumps(value, allow_nan=False)
        if json.loads(text) == value and _json_exact(value):
            return {"value": value}
    except (TypeError, ValueError):
        pass
    return {"msgpack": base64.b64encode(pack(value)).decode()}


def _json_exact(value: Any) -> bool:
    # Tuples (msgpack gives lists back too) and non-str dict keys are not kept by JSON.
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_exact(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_exact(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


def load_result(stored: Any) -> Any:
    if isinstance(stored, dict) and "msgpack" in stored:
        return unpack(base64.b64decode(stored["msgpack"]))
    if isinstance(stored, dict):
        return stored.get("value")
    return stored


def resolve_alias(option: Any, where: str) -> str:
    """The database alias of ``effectively_once=`` (True: the default database)."""
    if option is True:
        return DEFAULT_DB_ALIAS
    if isinstance(option, str) and option:
        try:
            aliases = settings.DATABASES
        except ImproperlyConfigured:  # settings not configured yet: checked at run time
            return option
        if option not in aliases:
            raise ImproperlyConfigured(f"{where}: effectively_once={option!r} names no "
                                       f"database of settings.DATABASES "
                                       f"({', '.join(sorted(aliases))})")
        return option
    raise ImproperlyConfigured(f"{where}: effectively_once must be True or a database alias, "
                               f"got {option!r}")


def wrap(func: Callable[..., Any], option: Any, where: str) -> Callable[..., Any]:
    """``func`` made effectively-once on the database ``option`` names."""
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        raise ImproperlyConfigured(f"{where}: effectively_once needs a `def` task, not an "
                                   "`async def` one (its body must run inside one "
                                   "transaction.atomic() on a worker thread)")
    using = resolve_alias(option, where)

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        ctx = current_task()
        if ctx is None:  # called directly, not by a worker: nothing to deduplicate
            return func(*args, **kwargs)
        return run_once(func, args, kwargs, key=effect_key(ctx.name, ctx.id,
                                                           ctx.idempotency_key),
                        task_name=ctx.name, task_id=ctx.id, using=using)

    run.effectively_once = using  # type: ignore[attr-defined]
    return run


def run_once(func: Callable[..., Any], args: Any, kwargs: Any, *, key: str, task_name: str,
             task_id: str, using: str) -> Any:
    from ..models import TaskEffect  # lazy: app loading

    effects = TaskEffect.objects.using(using)
    stored = effects.filter(key=key).values_list("result", flat=True).first()
    if stored is not None:
        log.info("task %s %s: its effect is already committed (key %r); not run again",
                 task_name, task_id, key)
        return load_result(stored)
    inserted = False
    try:
        with transaction.atomic(using=using):
            # First: the unique row takes the lock a concurrent duplicate waits on.
            row = effects.create(key=key, task_name=task_name, task_id=task_id,
                                 result=None)
            inserted = True
            value = func(*args, **kwargs)
            effects.filter(pk=row.pk).update(result=dump_result(value))
            return value
    except IntegrityError:
        if inserted:
            raise  # the body's own
    # A duplicate that committed while this one waited on the unique index.
    stored = effects.filter(key=key).values_list("result", flat=True).first()
    if stored is None:  # not visible (an isolation level above READ COMMITTED): retry
        raise RuntimeError(f"task {task_name} {task_id}: its effect key {key!r} is taken "
                           "by a run whose row this transaction cannot see yet")
    log.info("task %s %s: a concurrent run committed its effect first (key %r); not run "
             "again", task_name, task_id, key)
    return load_result(stored)


def retention() -> float:
    """Seconds a TaskEffect row is kept: BLITZQ["EFFECTS_RETENTION"] (days)."""
    return float(get_settings()["EFFECTS_RETENTION"]) * 86400


def prune(older_than: float | None = None, using: str = DEFAULT_DB_ALIAS) -> int:
    """Delete TaskEffect rows older than ``older_than`` seconds (default
    BLITZQ["EFFECTS_RETENTION"] days); returns how many."""
    from ..models import TaskEffect  # lazy: app loading

    seconds = retention() if older_than is None else older_than
    before = timezone.now() - dt.timedelta(seconds=seconds)
    deleted, _ = TaskEffect.objects.using(using).filter(created_at__lt=before).delete()
    return deleted


__all__ = ["effect_key", "prune", "run_once", "wrap"]
