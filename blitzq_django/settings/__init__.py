"""``settings.BLITZQ``: the one dict of blitzq's settings, merged over the defaults.

The leaf of the Django side: it imports the engine and Django only, never a feature.
Nothing here reads Django settings at import time: ``get_settings()`` merges,
validates (``problems.py``) and caches on first use. The cache is dropped on
``setting_changed`` for ``BLITZQ`` or ``CACHES`` (so ``override_settings`` and the
pytest-django ``settings`` fixture take effect at once), and so is everything built
from it: whoever caches something built from the settings (``runtime``'s client) hands
a callable to ``on_reset()``.

- ``schema.py``: one ``Setting(default, types, said, limit, doc)`` record per key.
- ``problems.py``: ``problems()``, the table's loop plus the rules across keys; a
  feature's own rules join with ``add_rule()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .problems import Problem, add_rule, problems, url_problem, user_settings
from .schema import DEFAULT_REDIS_URL, DEFAULTS, SETTINGS, Setting

_lock = threading.RLock()
_settings: dict[str, Any] | None = None
_on_reset: list[Callable[[], None]] = []


def get_settings() -> dict[str, Any]:
    """The merged settings (a fresh dict after each change).

    Raises ImproperlyConfigured listing every problem (each naming its key and id).
    """
    global _settings
    merged = _settings
    if merged is None:
        with _lock:
            if _settings is None:
                found = problems()
                if found:
                    raise ImproperlyConfigured(" ".join(str(p) for p in found))
                _settings = {**DEFAULTS, **user_settings()}
            merged = _settings
    return merged


def default_queue() -> str:
    return get_settings()["DEFAULT_QUEUE"]


def redact_names() -> tuple[str, ...]:
    """BLITZQ["REDACT"]: the argument names masked wherever task data is shown.

    Read through get_settings(), so it follows setting_changed like the rest.
    """
    return tuple(get_settings()["REDACT"])


def on_reset(drop: Callable[[], None]) -> None:
    """Have ``reset()`` call ``drop`` too: it forgets what it built from the settings."""
    if drop not in _on_reset:
        _on_reset.append(drop)


def reset() -> None:
    """Forget the cached settings, and what was built from them (the client)."""
    global _settings
    with _lock:
        _settings = None
    for drop in _on_reset:
        drop()


@receiver(setting_changed)
def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("BLITZQ", "CACHES"):
        reset()


__all__ = [
    "DEFAULTS",
    "DEFAULT_REDIS_URL",
    "SETTINGS",
    "Problem",
    "Setting",
    "add_rule",
    "default_queue",
    "get_settings",
    "on_reset",
    "problems",
    "redact_names",
    "reset",
    "url_problem",
    "user_settings",
]
