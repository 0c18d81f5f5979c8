"""Look at the built documentation site in a real headless Chromium and keep a
screenshot in docs/img/ (``python3 scripts/docs.py screenshot`` builds the site, then
runs this with the .venv's Python: Playwright comes with the ``test`` extra, the browser
is Debian's /usr/bin/chromium, as for tests/browser/).

It fails when a page logs a JavaScript error or a request of the site fails, when the
navigation lacks one of its parts, or when the reference page lacks the rendered
entry of ``blitzq_task``.
"""

from __future__ import annotations

import functools
import http.server
import sys
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "site"
SHOT = ROOT / "docs" / "img" / "docs-site.png"
CHROMIUM = "/usr/bin/chromium"
PAGES = ("index.html", "guide/tasks.html", "migrating/celery.html", "reference/api.html",
         "reference/settings.html", "reference/commands.html")
NAV = ("Get started", "User guide", "Migrating", "Reference", "Internals")


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass


def main() -> int:
    handler = functools.partial(Quiet, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    problems: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: problems.append(f"{page.url}: {e}"))
            # A request cut short by the next page load (the search worker) is no problem;
            # the screenshot itself is missing from a site built before its first run.
            page.on("requestfailed", lambda r: problems.append(f"{r.url}: {r.failure}")
                    if r.failure != "net::ERR_ABORTED" else None)
            page.on("response", lambda r: problems.append(f"{r.url}: {r.status}")
                    if r.status >= 400 and not r.url.endswith(SHOT.name) else None)
            for path in PAGES:
                page.goto(base + path, wait_until="networkidle")
            page.goto(base + "index.html", wait_until="networkidle")
            nav = page.locator("nav.md-nav--primary").inner_text()
            problems += [f"navigation lacks {part!r}" for part in NAV if part not in nav]
            page.goto(base + "reference/api.html#blitzq_django.blitzq_task",
                      wait_until="networkidle")
            entry = page.locator("[id='blitzq_django.blitzq_task']")
            if entry.count() != 1:
                problems.append("reference/api.html has no entry for blitzq_task")
            page.screenshot(path=str(SHOT))
            browser.close()
    finally:
        server.shutdown()
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{'FAILED' if problems else 'ok'}: {len(PAGES)} pages looked at; "
          f"screenshot {SHOT.relative_to(ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
