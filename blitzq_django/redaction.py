"""BLITZQ["REDACT"] on the Django side: mask secrets in task data before it is shown.

The masking itself is the engine's (``engine.core.redact``); this module supplies the
configured names and the process registry (for the names of positional arguments).
Display only: messages and dead-letter payloads keep the real values.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .engine.client.dead_letters import shown
from .engine.core.deadletter import DeadLetter
from .engine.core.redact import DEFAULT_REDACT, positional_names, redact, redact_value
from .registry import registry
from .settings import redact_names, user_settings


def names() -> tuple[str, ...]:
    """The configured names; with broken settings, the defaults plus any given names.

    A page showing task data must not fail (or show secrets) because another key is
    wrong: the checks already report that.
    """
    try:
        return redact_names()
    except ImproperlyConfigured:
        user = user_settings()
        given = user.get("REDACT") if isinstance(user, dict) else None
        extra = [n for n in given if isinstance(n, str) and n] if isinstance(
            given, list | tuple) else []
        return (*DEFAULT_REDACT, *extra)


def params(task_name: str) -> tuple[str, ...]:
    spec = registry.find(task_name)
    return positional_names(spec.func) if spec is not None else ()


def redact_call(task_name: str, args: Any, kwargs: Any) -> tuple[Any, Any]:
    """(args, kwargs) of a call to ``task_name`` as they may be shown."""
    masked = names()
    if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
        # Not the shape of a call (a row written by hand): mask dict keys only.
        return redact_value(args, masked), redact_value(kwargs, masked)
    return redact(args, kwargs, masked, params(task_name))


def redact_result(value: Any) -> Any:
    """A result (or any value) with the matching keys of its dicts masked."""
    return redact_value(value, names())


def shown_dead_letter(letter: DeadLetter) -> dict[str, Any]:
    """engine.client.dead_letters.shown() with the configured names and the process registry."""
    return shown(letter, names(), registry)
