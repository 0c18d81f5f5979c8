"""The API reference (docs/reference/, built by scripts/docs.py) has an entry for every
public name, option, setting, command and check id: a name added to the code without
one fails here, before the site is built."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

import blitzq_django
import blitzq_django.engine
from blitzq_django.engine.client.task import CallOptions
from blitzq_django.settings.schema import SETTINGS
from blitzq_django.tasks.decorators import TASK_OPTIONS, blitzq_task

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"

#: Where the top-level names that are not documented at their top-level path are.
SIGNALS = ("task_enqueued", "task_started", "task_succeeded", "task_failed", "task_retried",
           "task_dead_lettered", "task_cancelled", "workflow_started", "workflow_finished")


def _entries() -> set[str]:
    """The objects the reference renders (``::: path`` lines of its pages)."""
    found: set[str] = set()
    for page in REFERENCE.glob("*.md"):
        found |= set(re.findall(r"^::: ([\w.]+)$", page.read_text(), flags=re.M))
    return found


def _hooks() -> object:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" /
                                                  "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_hooks", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", [n for n in blitzq_django.__all__ if n != "__version__"])
def test_every_top_level_name_has_an_entry(name: str) -> None:
    where = f"blitzq_django.signals.{name}" if name in SIGNALS else f"blitzq_django.{name}"
    assert where in _entries(), f"{name}: add '::: {where}' to a page of docs/reference/"


@pytest.mark.parametrize("name", blitzq_django.engine.__all__)
def test_every_engine_name_has_an_entry(name: str) -> None:
    where = f"blitzq_django.engine.{name}"
    assert where in _entries(), f"{name}: add '::: {where}' to docs/reference/engine.md"


def _documented(docstring: str, section: str) -> dict[str, str]:
    """name -> "type: text" of each entry of a Google-style ``section`` of ``docstring``
    (an entry's text runs over its more indented lines)."""
    lines = docstring.expandtabs().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"{section}:")
    indent = len(lines[start]) - len(lines[start].lstrip())
    entries: dict[str, str] = {}
    name = None
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        match = re.match(rf"^ {{{indent + 4}}}(\w+) \(([^)]+)\): (.+)$", line)
        if match:
            name = match.group(1)
            entries[name] = f"{match.group(2)}: {match.group(3)}"
        elif name is not None:
            entries[name] += " " + line.strip()
    return entries


def test_every_decorator_option_has_a_type_a_default_and_a_meaning() -> None:
    entries = _documented(blitzq_task.__doc__ or "", "Keyword Args")
    assert set(entries) == set(TASK_OPTIONS), set(TASK_OPTIONS) ^ set(entries)
    for name, text in entries.items():
        assert "Default: " in text, f"@blitzq_task option {name}: say its default"


def test_every_schedule_option_has_a_type_a_default_and_a_meaning() -> None:
    from blitzq_django.engine.client.schedules import SCHEDULE_OPTIONS
    from blitzq_django.periodic import periodic

    entries = _documented(periodic.__doc__ or "", "Keyword Args")
    assert set(entries) == set(SCHEDULE_OPTIONS), set(SCHEDULE_OPTIONS) ^ set(entries)
    for name, text in entries.items():
        assert "Default: " in text, f"@periodic option {name}: say its default"


def test_every_call_option_has_a_type_and_a_meaning() -> None:
    entries = _documented(CallOptions.__doc__ or "", "Attributes")
    assert set(entries) == set(CallOptions.__dataclass_fields__), \
        set(CallOptions.__dataclass_fields__) ^ set(entries)


def test_the_settings_page_has_every_key_with_its_meaning() -> None:
    page = _hooks().settings_page()  # type: ignore[attr-defined]
    for key, setting in SETTINGS.items():
        row = next((line for line in page.splitlines() if f"`{key}`" in line), None)
        assert row is not None, key
        assert setting.doc, f"settings/schema.py: {key} has no doc"


def test_the_commands_page_has_every_command_and_option() -> None:
    hooks = _hooks()
    commands = {p.stem for p in (ROOT / "blitzq_django" / "management" / "commands")
                .glob("*.py") if not p.stem.startswith("_")}
    assert commands == set(hooks.COMMANDS)  # type: ignore[attr-defined]
    page = hooks.commands_page()  # type: ignore[attr-defined]
    for option in ("--queues", "--concurrency", "--burst", "--processes", "--json",
                   "--older-than", "--once"):
        assert f"`{option}`" in page, option
    for sub in ("stats", "workers", "inspect", "cancel", "purge", "dead-letters", "history",
                "prune-history"):
        assert f"{{#blitzq-{sub}}}" in page, sub


def test_every_check_id_is_in_the_checks_table() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "blitzq_django").rglob("*.py"))
    ids = set(re.findall(r"\"(blitzq\.[EW]\d{3})\"", source))
    assert len(ids) > 20
    table = (ROOT / "docs" / "configuration.md").read_text()
    missing = sorted(i for i in ids if f"| `{i}` |" not in table)
    assert not missing, f"check ids missing from docs/configuration.md#checks: {missing}"


# -- the user guide --------------------------------------------------------------------

#: Pages of the user guide not yet freed of internals, each with why.
GUIDE_EXCEPTIONS: dict[str, str] = {}
_INTERNALS = re.compile(r"bq:\{|\b\w+\.lua\b|\bLua\b|\binstructions per\b")


def _nav_section(title: str) -> list[str]:
    """The pages of one top-level section of mkdocs.yml's nav (read without YAML)."""
    lines = (ROOT / "mkdocs.yml").read_text().splitlines()
    start = lines.index(f"  - {title}:")
    pages = []
    for line in lines[start + 1:]:
        if not line.startswith("      "):
            break
        pages.append(line.rsplit(": ", 1)[-1].strip())
    return pages


@pytest.mark.parametrize("section", ["Get started", "User guide", "Migrating"])
def test_no_page_of_the_user_guide_needs_the_keyspace_or_lua(section: str) -> None:
    pages = _nav_section(section)
    assert pages
    found = {page: _INTERNALS.findall((ROOT / "docs" / page).read_text())
             for page in pages if page not in GUIDE_EXCEPTIONS}
    assert not {page: hits for page, hits in found.items() if hits}, \
        "move Redis keys, Lua scripts and instruction counts to docs/internals/"


def test_the_docs_use_one_import_style() -> None:
    """A name ``blitzq_django`` exports is imported from ``blitzq_django``, not from
    the module that defines it (the engine's own examples, without Django, aside)."""
    public = set(blitzq_django.__all__)
    wrong = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for module, names in re.findall(r"^\s*from (blitzq_django\.[\w.]+) import ([\w, ]+)",
                                        page.read_text(), flags=re.M):
            if module.startswith("blitzq_django.engine"):
                continue
            clash = public & {n.split(" as ")[0].strip() for n in names.split(",")}
            if clash:
                wrong.append(f"{page.relative_to(ROOT)}: from {module} import "
                             f"{', '.join(sorted(clash))}")
    assert not wrong, "write `from blitzq_django import ...`: " + "; ".join(wrong)
