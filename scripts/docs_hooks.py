"""MkDocs hooks of the documentation site (mkdocs.yml; built by scripts/docs.py).

- The reference pages that code defines are generated at each build, so they cannot
  drift: the settings table from ``blitzq_django/settings/schema.py`` (one ``Setting``
  record per key) and the management commands with their options from their argparse
  parsers (``reference/settings.md``, ``reference/commands.md``).
- A link from a page to a folder (``deploy/``), or to a file of the repository outside
  docs/ (``../blitzq_django/checks.py``), is checked to exist, then pointed at
  ``repo_url`` when the site has one (shown as its text otherwise): MkDocs only checks
  links between pages, and would call these missing.

Links between pages and their anchors are MkDocs' own checks (``validation`` in
mkdocs.yml), which ``mkdocs build --strict`` turns into errors.
"""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

log = logging.getLogger("mkdocs.plugins.blitzq")

#: Generated pages: path under docs/ -> function returning its Markdown.
GENERATED = {
    "reference/settings.md": "settings_page",
    "reference/commands.md": "commands_page",
}

#: The management commands of the package, in the order a reader meets them.
COMMANDS = ("runworker", "runscheduler", "runhistory", "runoutbox", "blitzq")


# -- the settings table ------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(value: Any) -> str:
    shown = repr(value)
    if len(shown) > 60:
        shown = f"{type(value).__name__} of {len(value)}"  # REDACT's list of names
    return f"`{_cell(shown)}`"


def settings_page() -> str:
    from blitzq_django.settings.schema import SETTINGS

    lines = [
        "# Settings reference",
        "",
        "Every key of `settings.BLITZQ`: what it accepts, its default, its range and what",
        "it does. Generated from `blitzq_django/settings/schema.py` (one `Setting` record",
        "per key, the same records `manage.py check` validates against) at each build.",
        "Every key is optional; an unknown key is `blitzq.E002`, a wrong type `blitzq.E003`,",
        "a value out of range `blitzq.E004` ([system checks](../configuration.md#checks)).",
        "The guide to them, grouped by topic: [settings.md](../settings.md).",
        "",
    ]
    for key, setting in SETTINGS.items():
        lines += [f"## `{key}` {{#{key.lower()}}}", "",
                  f"**Accepts** {setting.said}; **default** {_default(setting.default)}"
                  + (f"; **range** {setting.limit.describe()}" if setting.limit else "")
                  + ".", "", setting.doc, ""]
    return "\n".join(lines) + "\n"


# -- the management commands -------------------------------------------------------------


def _setup_django() -> None:
    """Django set up with blitzq_django installed, as a project would (the parsers of
    the commands are built by Django's command classes). No database is opened."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "blitzq_django"],
                           DATABASES={}, BLITZQ={"BROKER": "memory"}, USE_TZ=True)
    django.setup()


def _option_row(action: argparse.Action) -> str | None:
    if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
        return None
    if action.option_strings:
        names = ", ".join(f"`{name}`" for name in action.option_strings)
        if action.nargs != 0 and action.metavar is not None:
            names += f" `{action.metavar}`"
        elif action.nargs != 0:
            names += f" `{action.dest.upper()}`"
    else:
        names = f"`{action.metavar or action.dest}`"
    default = action.default
    if not action.option_strings and action.nargs not in ("?", "*"):
        shown = "required"
    elif default in (None, argparse.SUPPRESS, False) or action.nargs == 0:
        shown = ""
    else:
        shown = f"`{_cell(repr(default))}`"
    text = action.help or ""
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += f" (one of {', '.join(f'`{c}`' for c in action.choices)})"
    return f"| {names} | {shown} | {_cell(text)} |"


#: Django's own options of every command (--settings, --verbosity ...): described once.
_DJANGO_COMMON = {"--version", "--verbosity", "--settings", "--pythonpath", "--traceback",
                  "--no-color", "--force-color", "--skip-checks"}


def _parser_section(parser: argparse.ArgumentParser, title: str, level: int,
                    anchor: str) -> list[str]:
    lines = [f"{'#' * level} {title} {{#{anchor}}}", ""]
    if parser.description:
        lines += [_cell(parser.description), ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    rows = []
    subcommands: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subcommands += list(dict.fromkeys(action.choices.items()))
            continue
        if set(action.option_strings) & _DJANGO_COMMON:
            continue
        row = _option_row(action)
        if row is not None:
            rows.append(row)
    if rows:
        lines += ["| option | default | meaning |", "|---|---|---|", *rows, ""]
    seen: set[int] = set()
    for name, sub in subcommands:
        if id(sub) in seen:  # an alias of a subcommand already described
            continue
        seen.add(id(sub))
        lines += _parser_section(sub, f"`{sub.prog.split(' ', 1)[1]}`", min(level + 1, 4),
                                 f"{anchor}-{name}")
    return lines


def commands_page() -> str:
    _setup_django()
    from django.core.management import load_command_class

    lines = [
        "# Management commands reference",
        "",
        "Every `manage.py` command of blitzq_django with its options and their defaults,",
        "generated at each build from the commands' own argparse parsers (what `--help`",
        "prints). Django's options of every command (`--settings`, `--verbosity`,",
        "`--traceback` ...) are left out. The operations commands explained with",
        "examples: [cli.md](../cli.md).",
        "",
    ]
    for name in COMMANDS:
        command = load_command_class("blitzq_django", name)
        parser = command.create_parser("manage.py", name)
        if not parser.description:
            parser.description = str(command.help)
        lines += _parser_section(parser, f"`{name}`", 2, name)
    return "\n".join(lines) + "\n"


# -- MkDocs hooks ------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, function in GENERATED.items():
        content = globals()[function]()
        files.append(File.generated(config, path, content=content))
    return files


_LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>\.\./[^)\s]*)\)")


_FOLDER = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>(?!https?:|\.\./|/)[^)\s#]*/)\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Links from a page to repository files outside docs/: checked to exist, then
    pointed at the repository (``repo_url``), or shown as their text without one."""
    page_dir = (DOCS / page.file.src_uri).parent
    repo_url = (config.get("repo_url") or "").rstrip("/")

    def outside(match: re.Match[str]) -> str:
        path, _, anchor = match.group("target").partition("#")
        target = (page_dir / path).resolve()
        if target == DOCS or DOCS in target.parents:
            return match.group(0)  # a page: MkDocs checks it
        if not target.exists():
            log.warning("%s: link to %s, which does not exist", page.file.src_uri, path)
            return match.group(0)
        if repo_url:
            relative = target.relative_to(ROOT).as_posix()
            return f"[{match.group('text')}]({repo_url}/blob/main/{relative}" \
                   f"{'#' + anchor if anchor else ''})"
        return match.group("text")

    def folder(match: re.Match[str]) -> str:
        """A link to a folder of docs/ (``deploy/``): a page of GitHub's, none of the
        site's (MkDocs copies the folder's files, not an index of them)."""
        target = (page_dir / match.group("target")).resolve()
        if not target.is_dir():
            log.warning("%s: link to folder %s, which does not exist", page.file.src_uri,
                        match.group("target"))
            return match.group(0)
        if repo_url:
            return f"[{match.group('text')}]({repo_url}/tree/main/" \
                   f"{target.relative_to(ROOT).as_posix()})"
        return match.group("text")

    return _FOLDER.sub(folder, _LINK.sub(outside, markdown))
