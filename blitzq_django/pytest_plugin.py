"""The pytest plugin's former path, for installs whose ``pytest11`` entry point still
names it (an editable install made before the plugin moved to
``blitzq_django.testing.pytest_plugin``): the same fixtures."""

from __future__ import annotations

from .testing.pytest_plugin import blitzq, blitzq_eager

__all__ = ["blitzq", "blitzq_eager"]
