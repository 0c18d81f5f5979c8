"""The names projects import from ``blitzq_django.conf``, where they live now.

::

    from blitzq_django.conf import get_client      # the process's engine Client
    from blitzq_django import conf
    conf.get_settings()["DEFAULT_QUEUE"]           # the merged settings.BLITZQ

Kept so that these import paths go on working; new code imports from the module that
owns the name:

- ``blitzq_django.settings``: ``get_settings``, ``user_settings``, ``problems``,
  ``Problem``, ``reset``, ``DEFAULTS`` (the table: ``settings/schema.py``);
- ``blitzq_django.runtime``: ``get_client``, ``build_client``, ``check_connection``,
  ``redis_location``, ``broker_override`` ...;
- ``blitzq_django.registry``: ``registry``, ``DjangoRegistry``.

``conf.broker_override = broker`` still sets the runtime's (``blitzq_django.testing``
does, for the length of a test).
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from . import runtime
from .registry import DjangoRegistry, registry
from .runtime import (
    build_client,
    check_connection,
    events_cap,
    events_maxlen,
    get_client,
    history_on,
    redis_location,
    redis_source,
)
from .settings import (
    DEFAULT_REDIS_URL,
    DEFAULTS,
    Problem,
    default_queue,
    get_settings,
    problems,
    redact_names,
    reset,
    url_problem,
    user_settings,
)
from .settings.problems import redis_option_names
from .settings.schema import LIMITS, SETTINGS, TYPES

#: Names whose value lives in ``runtime`` and may be set through this module.
_FORWARDED = frozenset({"broker_override"})


class _Conf(ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name in _FORWARDED:
            return getattr(runtime, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FORWARDED:
            setattr(runtime, name, value)
        else:
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Conf

__all__ = [
    "DEFAULTS",
    "DEFAULT_REDIS_URL",
    "LIMITS",
    "SETTINGS",
    "TYPES",
    "DjangoRegistry",
    "Problem",
    "build_client",
    "check_connection",
    "default_queue",
    "events_cap",
    "events_maxlen",
    "get_client",
    "get_settings",
    "history_on",
    "problems",
    "redact_names",
    "redis_location",
    "redis_option_names",
    "redis_source",
    "registry",
    "reset",
    "url_problem",
    "user_settings",
]
