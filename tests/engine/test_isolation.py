"""The engine is a library of its own: it never imports Django."""

from __future__ import annotations

import subprocess
import sys

CHECK = (
    "import sys\n"
    "import importlib, pkgutil\n"
    "import blitzq_django.engine as engine\n"
    "for info in pkgutil.walk_packages(engine.__path__, 'blitzq_django.engine.'):\n"
    "    if not info.name.endswith('__main__'):\n"
    "        importlib.import_module(info.name)\n"
    "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
    "assert not bad, bad\n"
)


def test_engine_imports_nothing_from_django() -> None:
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def test_engine_imports_nothing_from_django_with_settings_configured() -> None:
    # Even with DJANGO_SETTINGS_MODULE set (as in a Django project), nothing is pulled in.
    env = {"DJANGO_SETTINGS_MODULE": "testproject.settings", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                            timeout=60, check=False, env=env)
    assert result.returncode == 0, result.stderr
