"""Django's own tests of its task backends (``tests/tasks`` of Django's source), fetched
at a pinned version and pointed at the BlitzQ backend, for test_django_contract.py.

Nothing of them is kept in this repository: the sdist of Django |version| is downloaded
with pip (once; cached under ``$BLITZQ_CONTRACT_CACHE``, default
``~/.cache/blitzq-django/contract``), checked against its pinned SHA-256, and the test
files are extracted beside it with their configuration changed:

- the backends they name (``BACKEND`` in ``TASKS``): Django's DummyBackend becomes
  ``QueuedBackend`` and its ImmediateBackend ``RunToEndBackend`` (contract_backends.py:
  the BlitzQ backend, and a real worker for the immediate one);
- on Django 5.2, the names of the django-tasks backport: ``django.tasks`` is
  ``django_tasks`` (imports, backend paths, the logger), ``InvalidTask`` is
  ``InvalidTaskError`` and ``InvalidTaskBackend`` ``InvalidTaskBackendError``. The
  backport's own test files are not published in its sdist: these are the same tests
  of the same API (docs/django.md lists where the backport differs).

Each change is counted: an upstream version where one no longer applies fails loudly
instead of testing something else.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

DJANGO_VERSION = "6.1.3"
SDIST = f"django-{DJANGO_VERSION}.tar.gz"
SDIST_SHA256 = "b5d2d9e35295065d13b1927b3f19a59bd119f737aa6299def14ccca1ae3c8c0d"
#: The files of tests/tasks that are run (test_custom_backend.py tests backends it
#: defines itself: nothing there is ours to run).
FILES = ("__init__.py", "tasks.py", "test_tasks.py", "test_dummy_backend.py",
         "test_immediate_backend.py")

#: Backend path -> ours.
DUMMY, IMMEDIATE = ("django.tasks.backends.dummy.DummyBackend",
                    "django.tasks.backends.immediate.ImmediateBackend")
BACKENDS = {DUMMY: "tests.django.contract_backends.QueuedBackend",
            IMMEDIATE: "tests.django.contract_backends.RunToEndBackend"}
#: How many times each file names each backend (as a string) at DJANGO_VERSION.
NAMED = {("test_tasks.py", DUMMY): 1, ("test_tasks.py", IMMEDIATE): 1,
         ("test_dummy_backend.py", DUMMY): 4, ("test_immediate_backend.py", IMMEDIATE): 4}
#: On Django 5.2: the backport's names for Django's (regex, replacement).
BACKPORT_NAMES = ((r"\bdjango\.tasks\b", "django_tasks"),
                  (r"\bInvalidTaskBackend\b", "InvalidTaskBackendError"),
                  (r"\bInvalidTask\b", "InvalidTaskError"))

#: pip's words for "there is no network" (only then is the contract skipped).
NO_NETWORK = ("NewConnectionError", "Failed to establish a new connection",
              "Temporary failure in name resolution", "Network is unreachable",
              "ConnectTimeoutError", "Max retries exceeded", "ProxyError",
              "No route to host", "Name or service not known")


class Unavailable(Exception):  # noqa: N818 - a reason to skip, not an error
    """The upstream tests cannot be had (no network): the reason."""


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "blitzq-django" / "contract"
    return Path(os.environ.get("BLITZQ_CONTRACT_CACHE") or default)


def sdist() -> Path:
    """The pinned sdist of Django, downloaded once (pip), checked against its hash."""
    cache = cache_dir()
    target = cache / SDIST
    if target.exists() and _sha256(target) == SDIST_SHA256:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        # Django 6 requires Python 3.12: --python-version lets pip on 3.11 (the Django
        # 5.2 pass) fetch the same file; only its tests are used, never its code.
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--python-version", "3.12", "--retries", "1", "--timeout", "20",
             "--disable-pip-version-check", "-d", scratch, f"django=={DJANGO_VERSION}"],
            capture_output=True, text=True, timeout=600, check=False)
        got = Path(scratch) / SDIST
        if proc.returncode != 0 or not got.exists():
            output = proc.stdout + proc.stderr
            if any(word in output for word in NO_NETWORK):
                raise Unavailable(f"Django {DJANGO_VERSION}'s tests of its task backends "
                                  "cannot be downloaded: no network (pip: "
                                  f"{output.strip().splitlines()[-1][:200]})")
            raise RuntimeError(f"pip download of Django {DJANGO_VERSION} failed:\n{output}")
        digest = _sha256(got)
        if digest != SDIST_SHA256:
            raise RuntimeError(f"{SDIST} has SHA-256 {digest}, not the pinned "
                               f"{SDIST_SHA256}")
        os.replace(got, target)  # atomic: a parallel pass sees the whole file or none
    return target


def adapted_tests(backport: bool) -> Path:
    """A directory holding the package ``tasks`` (Django's tests/tasks, adapted): put it
    on sys.path and import ``tasks.test_tasks`` and the others."""
    archive = sdist()
    flavour = "backport" if backport else "django"
    root = cache_dir() / f"tests-{DJANGO_VERSION}-{flavour}-{_recipe_digest()}"
    if (root / "tasks" / FILES[-1]).exists():
        return root
    sources = _extract(archive)
    building = Path(tempfile.mkdtemp(dir=cache_dir()))
    (building / "tasks").mkdir()
    for name, text in sources.items():
        (building / "tasks" / name).write_text(_adapt(name, text, backport))
    try:
        os.replace(building, root)
    except OSError:  # built by a parallel pass meanwhile
        if not (root / "tasks" / FILES[-1]).exists():
            raise
    return root


def _extract(archive: Path) -> dict[str, str]:
    prefix = f"django-{DJANGO_VERSION}/tests/tasks/"
    found: dict[str, str] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            name = member.name.removeprefix(prefix)
            if member.name.startswith(prefix) and name in FILES and member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                found[name] = io.TextIOWrapper(data, encoding="utf-8").read()
    missing = sorted(set(FILES) - set(found))
    if missing:
        raise RuntimeError(f"{archive.name} has no tests/tasks/{', '.join(missing)}")
    return found


def _adapt(name: str, text: str, backport: bool) -> str:
    for path, ours in BACKENDS.items():
        count = text.count(f'"{path}"')
        if count != NAMED.get((name, path), 0):
            raise RuntimeError(f"{name} names {path} {count} times, not "
                               f"{NAMED.get((name, path), 0)}: review the adaptation")
        text = text.replace(f'"{path}"', f'"{ours}"')
    if backport:
        for pattern, replacement in BACKPORT_NAMES:
            text = re.sub(pattern, replacement, text)
    header = (f"# Django {DJANGO_VERSION}'s tests/tasks/{name}, adapted by "
              "tests/django/django_contract.py (not part of this repository).\n")
    return header + text


def _recipe_digest() -> str:
    """Changes with the adaptation, so that an edit of it rebuilds the files."""
    return hashlib.sha256(repr((FILES, BACKENDS, NAMED, BACKPORT_NAMES)).encode()).hexdigest()[:12]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
