"""What the admin pages and the live dashboard share: the engine client, known queues,
engine errors shown as messages, and task data made fit for display (redacted, then
escaped by the templates). Here, below both, so that neither imports the other."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.contrib import messages
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.utils.html import format_html

from .. import queues, redaction
from ..engine import Client
from ..engine.core.record import Record
from ..engine.errors import BlitzqError
from ..runtime import get_client

T = TypeVar("T")

#: What a page may meet when it asks Redis: shown as an error message, never a 500.
ENGINE_ERRORS: tuple[type[BaseException], ...] = (BlitzqError, OSError, ImproperlyConfigured)


def client() -> Client:
    return get_client()


def known_queues(extra: Any = ()) -> list[str]:
    """The queues the project names (blitzq_django/queues.py) and any ``extra`` (the
    queues live workers serve, those Redis has seen): sorted, the default queue first."""
    return queues.shown(extra)


@contextmanager
def engine_errors(request: HttpRequest, what: str) -> Iterator[None]:
    """Report an engine or Redis failure as an admin error message."""
    try:
        yield
    except ENGINE_ERRORS as exc:
        messages.error(request, f"{what}: {type(exc).__name__}: {exc}")


def safely(request: HttpRequest, what: str, call: Callable[[], T], default: T) -> T:
    result = default
    with engine_errors(request, what):
        result = call()
    return result


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def pretty(value: Any) -> str:
    # format_html escapes: args, results and errors are user data.
    return format_html('<pre class="blitzq-data">{}</pre>', as_json(value))


def from_ms(ms: Any) -> dt.datetime | None:
    if not isinstance(ms, int | float) or isinstance(ms, bool) or ms <= 0:
        return None
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def duration(ms: Any) -> str:
    if not isinstance(ms, int | float) or isinstance(ms, bool) or ms < 0:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def age(ms: Any) -> str:
    """How long ago a time in ms since the epoch was: '3 s', '5 min', '2 h', '4 d'."""
    when = from_ms(ms)
    if when is None:
        return ""
    seconds = max(0.0, (dt.datetime.now(dt.UTC) - when).total_seconds())
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def record_context(record: Record | None) -> dict[str, Any] | None:
    """An engine record (inspect()) for display: the result redacted."""
    if record is None:
        return None
    return {"state": record.state, "is_final": record.is_final, "task": record.task,
            "queue": record.queue, "attempt": record.attempt,
            "result": as_json(redaction.redact_result(record.result)),
            "has_result": record.result is not None,
            "error_type": record.error_type or "", "error_message": record.error_message or "",
            "traceback": record.traceback or "", "reason": record.reason or "",
            "created": from_ms(record.created_ms), "started": from_ms(record.started_ms),
            "finished": from_ms(record.finished_ms), "worker": record.worker or ""}

