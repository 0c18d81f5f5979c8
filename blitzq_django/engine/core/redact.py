"""Masking secrets in task arguments for display (admin, dead-letter listings).

Display only: the message in Redis, and a dead letter's payload, keep the real
values, since the task must run and a dead letter must replay with them.

A name matches an argument (or a dict key) when, lower-cased and with ``_`` and
``-`` removed, it occurs anywhere in it: ``"password"`` masks ``db_password`` and
``PasswordHash``, ``"api_key"`` masks ``apiKey``. Masking too much on a page is
harmless; showing a secret is not, so the match is deliberately broad.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

MASK = "***"

#: The default of BLITZQ["REDACT"] (and of the engine's DeadLetters).
DEFAULT_REDACT: tuple[str, ...] = (
    "password", "passwd", "pwd", "secret", "token", "api_key", "apikey", "access_token",
    "refresh_token", "access_key", "private_key", "credential", "authorization", "cookie",
    "session", "credit_card", "card_number", "cvv", "ssn",
)


def _norm(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


@functools.lru_cache(maxsize=64)
def _needles(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in map(_norm, names) if n)


def is_secret(name: object, names: Iterable[str]) -> bool:
    """True if argument or key ``name`` matches one of ``names`` (see the module doc)."""
    if not isinstance(name, str):
        return False
    return _matches(name, names if isinstance(names, tuple) else tuple(names))


@functools.lru_cache(maxsize=4096)
def _matches(name: str, names: tuple[str, ...]) -> bool:
    # Cached: the history writer asks about the same few argument names for every row.
    key = _norm(name)
    return any(n in key for n in _needles(names))


def positional_names(func: Callable[..., Any]) -> tuple[str, ...]:
    """The names of ``func``'s positional parameters, in order; () if unknown."""
    try:
        return _positional_names(func)
    except TypeError:  # unhashable callable: not cached
        return _positional_names.__wrapped__(func)


@functools.lru_cache(maxsize=1024)
def _positional_names(func: Callable[..., Any]) -> tuple[str, ...]:
    # Cached: the admin shows many rows of the same few tasks.
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # builtins and C callables may have no signature
        return ()
    out = []
    for p in parameters:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break  # *args and beyond: later positions have no name
        out.append(p.name)
    return tuple(out)


def redact_value(value: Any, names: Sequence[str]) -> Any:
    """``value`` with every dict entry whose key matches ``names`` masked, at any depth."""
    if isinstance(value, dict):
        return {k: MASK if is_secret(k, names) else redact_value(v, names)
                for k, v in value.items()}
    if isinstance(value, list | tuple):  # plain list/tuple: a subclass may not take one
        shown = [redact_value(v, names) for v in value]
        return tuple(shown) if isinstance(value, tuple) else shown
    return value


def redact(args: Sequence[Any], kwargs: dict[str, Any], names: Sequence[str],
           params: Sequence[str] | None = None) -> tuple[Any, dict[str, Any]]:
    """(args, kwargs) with secrets masked; the inputs are not changed.

    Keyword arguments are matched by name; positional ones by ``params``, the task
    function's positional parameter names (``positional_names(func)``) when known.
    Dicts inside any argument have their matching keys masked too.
    """
    params = params or ()
    shown = [MASK if i < len(params) and is_secret(params[i], names) else redact_value(v, names)
             for i, v in enumerate(args)]
    return (tuple(shown) if isinstance(args, tuple) else shown,
            redact_value(dict(kwargs), names))
