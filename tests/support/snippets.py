"""Run the code blocks of a Markdown page, in order, exactly as written.

A page such as docs/quickstart.md is a path a user follows: commands typed in a
terminal, files written, code typed into ``manage.py shell``. ``extract(page)`` reads its
fenced blocks; ``Session.run()`` does what each says, in a work directory that starts
empty (tests/docs/test_snippets.py runs each page in a fresh one).

The convention (for page authors)
---------------------------------
A block may be preceded by a marker, an HTML comment on the line(s) just before the
fence (blank lines between are allowed); Markdown renderers do not show it, and the
marker's words say what the harness does, so a reader of the source sees it::

    <!-- snippet: file=mysite/shop/tasks.py -->
    ```python
    ...
    ```

What a block does, by its language and marker:

``sh``, ``bash``, ``shell``, ``console``
    Run with ``bash`` (``set -eo pipefail``), in the directory the previous shell block
    ended in (a ``cd`` carries over, as in a terminal), with the test's environment.
    No marker needed. Write commands without a ``$`` prompt.
``python``
    Needs a marker (a Python block does nothing by itself):
    ``file=PATH`` writes the block to PATH (relative to the current directory),
    ``file=PATH append`` adds it at the end ("add this to the end of settings.py"),
    ``shell`` runs it with ``python manage.py shell -c`` in the current directory,
    ``python`` runs it with ``python -c``.
``text``
    Output shown to the reader; never run.
anything else (``ini``, ``yaml``, ``nginx``, ``dockerfile``...)
    Needs a marker: ``file=PATH`` [``append``], or ``skip``.

Marker words (after ``snippet:``; quote values with spaces: ``expect="5 passed"``):

``skip (why)``
    Not run; the reason is mandatory and is the rest of the comment, e.g.
    ``<!-- snippet: skip (needs network: CI installs the built wheel instead) -->``.
``background``
    A shell block started and left running (a worker, a server) until the page ends;
    then its process group gets SIGTERM (SIGKILL after 20 s).
``ready=URL``
    With ``background``: wait until URL answers HTTP (any status) before going on.
``wait-log=TEXT``
    With ``background``: wait until the block's output contains TEXT.
``expect=TEXT``
    The block's output (stdout and stderr) must contain TEXT; may be repeated.
``timeout=SECONDS``
    For a block run to its end (default 180).

Every block whose language needs a marker and has none makes ``extract`` fail, naming
the page and line: a block nobody decided about is a block nobody checks.

A page may continue another: tests/docs/test_snippets.py's PAGES names, for each page,
the pages run before it in the same session (same directory, same current directory,
same background processes), e.g. a migration guide that starts from the quickstart's
``mysite``.

The session's environment is the caller's (tests/docs/test_snippets.py: the test
virtualenv's ``bin`` first on PATH, so ``python`` and ``django-admin`` are the ones with
blitzq_django installed; ``REDIS_URL`` set to a server the test started, or unset, when
blitzq_django.embedded starts one). Servers that blitzq_django.embedded started under the
work directory are stopped by ``Session.close()``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SHELL_LANGS = {"sh", "bash", "shell", "console"}
OUTPUT_LANGS = {"text"}
DEFAULT_TIMEOUT = 180.0
READY_TIMEOUT = 60.0
STOP_GRACE = 20.0

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)[^\n]*$")
MARKER = re.compile(r"<!--\s*snippet:(?P<body>.*?)-->", re.DOTALL)


class SnippetError(AssertionError):
    """A block that is malformed or that failed; the message names the page and line."""


@dataclass
class Directive:
    skip: str | None = None
    file: str | None = None
    append: bool = False
    shell: bool = False
    python: bool = False
    background: bool = False
    ready: str | None = None
    wait_log: str | None = None
    expect: list[str] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT


@dataclass
class Snippet:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    directive: Directive

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.directive.skip is None and self.lang not in OUTPUT_LANGS


def parse_marker(body: str, where: str) -> Directive:
    body = body.strip()
    if body.startswith("skip"):
        reason = body[len("skip"):].strip().strip("()").strip()
        if not reason:
            raise SnippetError(f"{where}: `snippet: skip` needs a reason: skip (why)")
        return Directive(skip=reason)
    directive = Directive()
    for word in shlex.split(body):
        key, _, value = word.partition("=")
        if key == "file" and value:
            directive.file = value
        elif key in ("append", "shell", "python", "background") and not value:
            setattr(directive, key, True)
        elif key == "ready" and value:
            directive.ready = value
        elif key == "wait-log" and value:
            directive.wait_log = value
        elif key == "expect" and value:
            directive.expect.append(value)
        elif key == "timeout" and value:
            directive.timeout = float(value)
        else:
            raise SnippetError(f"{where}: unknown snippet marker word {word!r} "
                               "(see tests/support/snippets.py)")
    return directive


def extract(page: Path) -> list[Snippet]:
    """The page's fenced blocks in order, each with its marker (checked)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    snippets: list[Snippet] = []
    i = 0
    pending: tuple[str, int] | None = None  # a marker's body and line, until a block
    while i < len(lines):
        line = lines[i]
        opened = FENCE.match(line)
        if not opened:
            found = MARKER.search(line)
            if found:
                pending = (found.group("body"), i + 1)
            elif "<!--" in line and "snippet:" in line:
                # A marker over several lines.
                end = i
                while end < len(lines) and "-->" not in lines[end]:
                    end += 1
                found = MARKER.search("\n".join(lines[i:end + 1]))
                if found:
                    pending = (found.group("body"), i + 1)
                i = end
            elif line.strip():
                pending = None  # prose between a marker and a block: the marker was stray
            i += 1
            continue
        fence, lang = opened.group("fence"), opened.group("lang").lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        where = f"{page}:{start + 1}"
        directive = parse_marker(*_body_where(pending, page)) if pending else Directive()
        pending = None
        marked = directive != Directive()
        if lang == "python" and directive.skip is None and not (
                directive.file or directive.shell or directive.python):
            raise SnippetError(f"{where}: a python block needs file=PATH, shell, python or "
                               "skip (why)")
        if lang not in SHELL_LANGS | OUTPUT_LANGS and not marked:
            raise SnippetError(f"{where}: a ```{lang or '(no language)'} block needs a snippet "
                               "marker (file=..., shell, python or skip (why)): "
                               "see tests/support/snippets.py")
        if directive.background and lang not in SHELL_LANGS:
            raise SnippetError(f"{where}: only a shell block can run in the background")
        snippets.append(Snippet(page, start + 1, lang, "\n".join(body) + "\n", directive))
    return snippets


def _body_where(pending: tuple[str, int], page: Path) -> tuple[str, str]:
    body, line = pending
    return body, f"{page}:{line}"


class Session:
    """One reader following pages: a work directory, a current directory, an
    environment, and the processes left running."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.cwd = workdir
        self.env = env
        self.background: list[tuple[Snippet, subprocess.Popen[bytes], Path]] = []
        self.transcript: list[str] = []

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_page(self, page: Path) -> list[Snippet]:
        snippets = extract(page)
        for snippet in snippets:
            self.run(snippet)
        return snippets

    def run(self, snippet: Snippet) -> None:
        d = snippet.directive
        if not snippet.runs:
            return
        if d.file:
            target = self.cwd / d.file
            target.parent.mkdir(parents=True, exist_ok=True)
            if d.append and target.exists():
                before = target.read_text(encoding="utf-8")
                sep = "" if before.endswith("\n") else "\n"
                target.write_text(before + sep + "\n" + snippet.code, encoding="utf-8")
            else:
                target.write_text(snippet.code, encoding="utf-8")
            self.transcript.append(f"# {snippet.where}: wrote {d.file}")
            return
        if snippet.lang in SHELL_LANGS:
            if d.background:
                self.start(snippet)
            else:
                self.shell(snippet)
            return
        if d.shell:
            self.check(snippet, ["python", "manage.py", "shell", "-c", snippet.code])
        elif d.python:
            self.check(snippet, ["python", "-c", snippet.code])

    def shell(self, snippet: Snippet) -> None:
        with tempfile.TemporaryDirectory(prefix="blitzq-snippet-") as scratch:
            state = Path(scratch) / "pwd"
            script = (f"set -eo pipefail\ncd {shlex.quote(str(self.cwd))}\n{snippet.code}\n"
                      f"pwd > {shlex.quote(str(state))}\n")
            self.check(snippet, ["bash", "-c", script])
            if state.exists():
                self.cwd = Path(state.read_text().strip())

    def check(self, snippet: Snippet, cmd: list[str]) -> str:
        self.transcript.append(f"# {snippet.where}\n{snippet.code}")
        try:
            proc = subprocess.run(cmd, cwd=self.cwd, env=self.env, capture_output=True,
                                  text=True, errors="replace", timeout=snippet.directive.timeout)
        except subprocess.TimeoutExpired as exc:
            raise SnippetError(self.failure(snippet, f"did not end within "
                                            f"{snippet.directive.timeout:.0f} s",
                                            _text(exc.stdout) + _text(exc.stderr))) from None
        output = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise SnippetError(self.failure(snippet, f"exit status {proc.returncode}", output))
        for wanted in snippet.directive.expect:
            if wanted not in output:
                raise SnippetError(self.failure(snippet, f"output lacks {wanted!r}", output))
        return output

    def start(self, snippet: Snippet) -> None:
        self.transcript.append(f"# {snippet.where} (background)\n{snippet.code}")
        log = self.workdir / f".snippet-{len(self.background)}.log"
        script = f"cd {shlex.quote(str(self.cwd))}\n{snippet.code}"
        with open(log, "wb") as out:
            # Its own process group: the stop signal reaches what bash started too.
            proc = subprocess.Popen(["bash", "-c", script], env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.background.append((snippet, proc, log))
        d = snippet.directive
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.ready(d, log):
            if proc.poll() is not None:
                raise SnippetError(self.failure(snippet, f"exited ({proc.returncode}) before "
                                                "it was ready", log.read_text(errors="replace")))
            if time.monotonic() > deadline:
                raise SnippetError(self.failure(snippet, f"not ready within {READY_TIMEOUT:.0f} s",
                                                log.read_text(errors="replace")))
            time.sleep(0.1)  # (noqa: sleep) the poll step of a deadline-bounded wait

    @staticmethod
    def ready(d: Directive, log: Path) -> bool:
        if d.wait_log is not None and d.wait_log not in log.read_text(errors="replace"):
            return False
        if d.ready is not None:
            try:
                with urllib.request.urlopen(d.ready, timeout=2):
                    return True
            except urllib.error.HTTPError:
                return True  # it answered
            except OSError:
                return False
        return True

    def failure(self, snippet: Snippet, what: str, output: str) -> str:
        logs = "".join(f"\n--- background {s.where} output:\n{log.read_text(errors='replace')}"
                       for s, _, log in self.background if log.exists())
        return (f"{snippet.where}: {what}\n--- block:\n{snippet.code}--- output:\n"
                f"{output[-6000:]}{logs[-6000:]}")

    def close(self) -> None:
        for _, proc, _ in reversed(self.background):
            stop_group(proc)
        self.background.clear()
        for pidfile in self.workdir.glob("**/.blitzq-redis/redis.pid"):
            stop_pid(pidfile)


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # What the group's leader left behind (a daemon would have left the group anyway).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def stop_pid(pidfile: Path) -> None:
    """Stop a daemonized server by its pid file and wait until it is gone."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # (noqa: sleep) the poll step of a deadline-bounded wait
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def page_env(bin_dir: Path, redis_url: str | None) -> dict[str, str]:
    """The caller's environment for a reader: ``bin_dir`` first on PATH, none of the test
    suite's Django or database settings, REDIS_URL as given (None: unset)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "DATABASE_URL", "REDIS_URL",
                        "BLITZQ_TEST_DB", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(bin_dir.parent)
    env["PYTHONUNBUFFERED"] = "1"
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


def iter_runnable(snippets: list[Snippet]) -> Iterator[Snippet]:
    return (s for s in snippets if s.runs)
