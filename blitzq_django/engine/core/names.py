"""The one rule for queue and namespace names, wherever a name enters the engine.

Names go inside the ``{hash tag}`` of every Redis key (``bq:{ns:queue}:s``), so a
brace would break the tag and a ':' would let (ns ``a``, queue ``b:c``) and
(ns ``a:b``, queue ``c``) share keys. Same rule as the Django settings check.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError

MAX_NAME_LENGTH = 100
NAME_RULE = f"1 to {MAX_NAME_LENGTH} letters, digits, '-', '_' or '.'"

# Names already seen to be valid: a queue name is checked on every decode, and there
# are few distinct ones. Capped so hostile input cannot grow it without bound.
KNOWN_NAMES: set[str] = set()  # read, never written, outside this module
_KNOWN_MAX = 10_000


def name_ok(value: Any) -> bool:
    if type(value) is str and value in KNOWN_NAMES:
        return True
    ok = (isinstance(value, str) and 0 < len(value) <= MAX_NAME_LENGTH
          and all(c.isalnum() or c in "-_." for c in value))
    if ok and len(KNOWN_NAMES) < _KNOWN_MAX:
        KNOWN_NAMES.add(value)
    return ok


def name_problem(kind: str, value: Any) -> str | None:
    """Why ``value`` is not a valid ``kind`` name ("queue", "namespace"), or None."""
    if name_ok(value):
        return None
    return f"{kind} name {value!r} is invalid: it must be {NAME_RULE}"


def check_name(kind: str, value: Any) -> str:
    """Return ``value`` if it is a valid name, else raise ConfigurationError naming it."""
    problem = name_problem(kind, value)
    if problem is not None:
        raise ConfigurationError(problem)
    return value  # type: ignore[no-any-return]
