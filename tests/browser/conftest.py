"""Headless Chromium (Playwright, sync API) against pytest-django's live_server.

Uses Debian's /usr/bin/chromium: Playwright's own browser download is never needed
(and never possible in CI). This file imports without Playwright or Chromium; the test
modules skip themselves (a skip raised while importing a conftest is an error, not a skip).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import django
import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
MISSING_CHROMIUM = ("Chromium not installed at /usr/bin/chromium "
                    "(.ci/run installs Debian's chromium)")
#: The Django whose pages the screenshots in docs/img show: the one of .venv.
DOCS_DJANGO = (5, 2)


def screenshots_dir(docs: bool = True) -> Path:
    """Where screenshots go: the docs' pictures to docs/img under DOCS_DJANGO (overwritten
    on each run); under another Django (scripts/test.py's Django 6 pass), and the pictures
    that are not the docs', to blitzq-screenshots/django-X.Y/ in the temp directory, so a
    run never changes the docs' pictures and each version's can be looked at."""
    version = django.VERSION[:2]
    if docs and version == DOCS_DJANGO:
        folder = Path(__file__).resolve().parents[2] / "docs" / "img"
    else:
        folder = Path(tempfile.gettempdir()) / "blitzq-screenshots" / "django-{}.{}".format(
            *version)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def skip_without_browser() -> None:
    """Call at the top of a browser test module, before importing playwright.

    Under CI (``CI`` set, as ``.ci/run`` runs) a missing browser fails the module
    instead: .ci/run installs Chromium, so a skip there would hide lost coverage.
    """
    missing = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        missing = f"playwright is not importable: {exc}"
    if missing is None and not CHROMIUM.exists():
        missing = MISSING_CHROMIUM
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run under CI: {missing}", pytrace=False)
    pytest.skip(missing, allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    # One browser per module: launching Chromium costs about a second on this machine.
    with pytest.MonkeyPatch.context() as mp, sync_playwright() as p:
        # Playwright's sync API keeps an asyncio event loop running on the test thread
        # (it switches into it with greenlets), so Django's async_unsafe guard sees a
        # running loop and refuses the ORM calls the tests make to create rows and users.
        # Nothing here is really async: the ORM runs on this thread between browser
        # calls. Scoped to this fixture so the rest of the suite keeps the guard.
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser, live_server: Any) -> Iterator[Page]:
    """A fresh context (no cookies) per test; every wait is bounded."""
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()
