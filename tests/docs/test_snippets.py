"""Pages that are paths a user follows run in CI exactly as written.

Each page of ``PAGES`` runs block by block (tests/support/snippets.py: the convention
for page authors) in an empty directory, the way a new user would follow it, twice: with
``REDIS_URL`` set to a redis-server this test starts, and with it unset, when the page's
settings fall back to the embedded server (blitzq_django.embedded, the ``embedded``
extra). Add a page to PAGES when it is written to be followed, with the pages its reader
follows first.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.redis_server import RedisServer
from ..support.snippets import Session, SnippetError, extract, page_env, parse_marker

ROOT = Path(__file__).resolve().parents[2]
#: page -> the pages a reader follows first, in the same directory and session (a
#: migration guide may start where the quickstart ends: "docs/quickstart.md" there).
#: The migration guides start from an empty directory: their readers have a project.
PAGES: dict[str, list[str]] = {
    "docs/quickstart.md": [],
    "docs/migrating/celery.md": [],
    "docs/migrating/django-tasks.md": [],
    "docs/migrating/django-rq.md": [],
    "docs/migrating/django-q2.md": [],
}
BIN = Path(sys.executable).parent


@pytest.fixture
def own_redis() -> Iterator[str]:
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("redis", ["server", "embedded"])
@pytest.mark.parametrize("page", PAGES)
def test_page_runs_as_written(page: str, redis: str, tmp_path: Path,
                              request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("own_redis") if redis == "server" else None
    with Session(tmp_path, page_env(BIN, url)) as session:
        for before in PAGES[page]:
            session.run_page(ROOT / before)
        snippets = session.run_page(ROOT / page)
    assert any(s.runs for s in snippets), f"{page} has no block that runs"


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_marked_or_runs(page: str) -> None:
    extract(ROOT / page)  # raises, naming the line, on an unmarked block


def write(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


def test_an_unmarked_python_block_is_refused(tmp_path: Path) -> None:
    page = write(tmp_path, "Intro\n\n```python\nprint(1)\n```\n")
    with pytest.raises(SnippetError, match=r"page.md:3: a python block needs"):
        extract(page)


def test_a_skip_needs_a_reason(tmp_path: Path) -> None:
    with pytest.raises(SnippetError, match="needs a reason"):
        parse_marker(" skip ", "p.md:1")


def test_a_marker_applies_to_the_next_block_only(tmp_path: Path) -> None:
    page = write(tmp_path, "<!-- snippet: skip (no network here) -->\n\n```sh\npip install x\n"
                           "```\n\n```sh\necho hi\n```\n")
    first, second = extract(page)
    assert first.directive.skip == "no network here" and not first.runs
    assert second.runs and second.code == "echo hi\n"


def test_blocks_run_in_order_and_cd_carries_over(tmp_path: Path) -> None:
    page = write(tmp_path, "```sh\nmkdir -p app && cd app\n```\n\n"
                           "<!-- snippet: file=hello.py -->\n```python\nprint('hello')\n```\n\n"
                           "<!-- snippet: expect=hello -->\n```sh\npython hello.py\n```\n")
    with Session(tmp_path, page_env(BIN, None)) as session:
        session.run_page(page)
    assert (tmp_path / "app" / "hello.py").exists()


def test_a_failing_block_names_its_line_and_output(tmp_path: Path) -> None:
    page = write(tmp_path, "```sh\necho before\n```\n\n```sh\necho oops >&2; exit 3\n```\n")
    with Session(tmp_path, page_env(BIN, None)) as session, \
            pytest.raises(SnippetError, match=r"(?s)page.md:5: exit status 3.*oops"):
        session.run_page(page)


def test_expect_checks_the_output(tmp_path: Path) -> None:
    page = write(tmp_path, "<!-- snippet: expect=goodbye -->\n```sh\necho hello\n```\n")
    with Session(tmp_path, page_env(BIN, None)) as session, \
            pytest.raises(SnippetError, match="output lacks 'goodbye'"):
        session.run_page(page)
