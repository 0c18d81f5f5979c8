"""docs/settings.md documents every BLITZQ key with its default."""

from __future__ import annotations

from pathlib import Path

from blitzq_django import conf

DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def _row(text: str, key: str) -> str | None:
    for line in text.splitlines():
        if line.startswith(f"| `{key}`"):
            return line
    return None


def test_every_key_is_documented_with_its_default() -> None:
    text = DOC.read_text()
    missing, wrong = [], []
    for key, default in conf.DEFAULTS.items():
        row = _row(text, key)
        if row is None:
            missing.append(key)
            continue
        shown = row.split("|")[2]
        if isinstance(default, list) and len(repr(default)) > 40:
            continue  # a long list (REDACT) is described in words
        if f"`{default!r}`" not in shown.replace('"', "'") and f"`{default!r}" not in shown:
            wrong.append((key, default, shown.strip()))
    assert not missing, f"keys missing from docs/settings.md: {missing}"
    assert not wrong, f"defaults that differ from conf.DEFAULTS: {wrong}"
