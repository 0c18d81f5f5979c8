#!/usr/bin/env python3
"""Refresh the files a page shows: each ``<!-- include: PATH -->`` followed by a fenced
block gets PATH's current content (docs/deployment.md shows docs/deploy/*).

    python3 scripts/docs_include.py                 # docs/deployment.md
    python3 scripts/docs_include.py docs/page.md    # other pages

tests/docs/test_deploy_files.py fails when a page shows an old copy.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = re.compile(r"(?P<head><!--\s*include:\s*(?P<path>\S+)\s*-->\s*\n```[\w-]*\n)"
                     r"(?P<body>.*?)(?P<tail>```)", re.DOTALL)


def refresh(page: Path) -> bool:
    text = page.read_text(encoding="utf-8")
    new = INCLUDE.sub(lambda m: m.group("head") + (ROOT / m.group("path")).read_text(
        encoding="utf-8") + m.group("tail"), text)
    if new != text:
        page.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str]) -> int:
    pages = [Path(a) for a in argv] or [ROOT / "docs" / "deployment.md"]
    for page in pages:
        print(f"{page}: {'refreshed' if refresh(page) else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
