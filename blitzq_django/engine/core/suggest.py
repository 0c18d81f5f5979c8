""""Did you mean ...?": the known name closest to a mistyped one (difflib)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: object, choices: Iterable[str], n: int = 1) -> list[str]:
    """Up to ``n`` of ``choices`` closest to ``word``: one equal but for case and
    underscores first (``redisurl`` -> ``REDIS_URL``), else difflib's close matches."""
    by_form: dict[str, str] = {}
    for choice in choices:
        by_form.setdefault(choice.casefold(), choice)
    form = str(word).casefold()
    squashed = {f.replace("_", ""): c for f, c in by_form.items()}
    same = squashed.get(form.replace("_", ""))
    if same is not None:
        return [same]
    return [by_form[f] for f in difflib.get_close_matches(form, by_form, n=n, cutoff=0.6)]


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """" Did you mean 'X'?" (or "'X' or 'Y'"), or "" when nothing is close."""
    found = closest(word, choices, n=2)
    return f" Did you mean {' or '.join(map(repr, found))}?" if found else ""
