"""The public surface: the names a user imports, that each resolves, and what importing costs.

A change to ``__all__`` is a change of the public API: make it here on purpose, and in the
docs (the import lines of docs/, README.md and testproject/ are checked below too).
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import blitzq_django
import blitzq_django.engine

ROOT = Path(__file__).resolve().parents[1]

TOP_LEVEL = [
    "Blitzq", "BlitzqError", "BlitzqTestMixin", "Cancellation", "ConfigurationError",
    "DEFAULT_REDACT", "Record", "ResultTimeout", "Retry", "RetryPolicy", "TaskCancelled",
    "TaskContext", "TaskExpired", "TaskFailed", "TaskHandle", "TimeLimitExceeded",
    "WorkflowCancelled", "WorkflowFailed", "WorkflowHandle", "__version__", "blitzq_task",
    "chain", "chord", "current_task", "enqueue_on_commit", "get_client", "get_handle", "group",
    "task_cancelled", "task_dead_lettered", "task_enqueued", "task_failed", "task_retried",
    "task_started", "task_succeeded", "workflow_finished", "workflow_started",
]

ENGINE = [
    "BlitzqError", "Broker", "BrokerError", "BrokerUnavailable", "CallOptions", "Cancellation",
    "Canvas", "Chain", "Chord", "Client", "ConfigurationError", "DeadLetter", "Group",
    "MemoryBroker", "Message",
    "MessageDecodeError", "MessageEncodeError", "MessageError", "MessageTooLarge", "NotReplicated",
    "QueueBusy",
    "Record", "RedisBroker", "ResultTimeout", "ResultTooLarge", "Retry", "RetryPolicy",
    "Signature", "Task",
    "TaskCancelled", "TaskContext", "TaskExpired", "TaskFailed", "TaskHandle",
    "TaskNotRegistered", "TaskRegistry", "TaskSpec", "TimeLimitExceeded", "Worker",
    "WorkerConfig", "WorkflowCancelled", "WorkflowFailed", "WorkflowHandle", "WorkflowInfo",
    "WorkflowNode", "WorkflowProgress", "chain", "chord", "current_task", "group",
]


@pytest.mark.parametrize(("module", "expected"), [
    (blitzq_django, TOP_LEVEL),
    (blitzq_django.engine, ENGINE),
], ids=["blitzq_django", "blitzq_django.engine"])
def test_all_is_exactly_the_public_api(module: object, expected: list[str]) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert sorted(names, key=str.lower) == sorted(expected, key=str.lower)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("module", [blitzq_django, blitzq_django.engine],
                         ids=["blitzq_django", "blitzq_django.engine"])
def test_every_name_in_all_resolves(module: object) -> None:
    for name in module.__all__:  # type: ignore[attr-defined]
        assert getattr(module, name) is not None, name


def test_the_top_level_names_are_the_objects_of_their_home_modules() -> None:
    for name in blitzq_django.__all__:
        if name == "__version__":
            continue
        home = importlib.import_module(blitzq_django._EXPORTS[name])
        assert getattr(blitzq_django, name) is getattr(home, name), name
    assert blitzq_django.TaskHandle is blitzq_django.engine.TaskHandle
    assert blitzq_django.BlitzqError is blitzq_django.engine.BlitzqError


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        blitzq_django.nope  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        from blitzq_django import nope  # type: ignore[attr-defined]  # noqa: F401


def _loaded_after(statement: str) -> list[str]:
    """The modules of Django, Redis and this package that ``statement`` loads, in a
    fresh interpreter."""
    code = (f"import sys\n{statement}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('django', 'redis', 'blitzq_django', 'channels', 'msgpack')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return eval(done.stdout)  # noqa: S307 - a list of module names we printed


def test_importing_the_package_loads_nothing_else() -> None:
    # Settings, apps and tasks modules import blitzq_django before Django is set up, and
    # the CLI before it knows what it will run: the names resolve on first use.
    assert _loaded_after("import blitzq_django") == ["blitzq_django"]
    assert _loaded_after("from blitzq_django import __version__") == ["blitzq_django"]


def test_the_engine_imports_no_django() -> None:
    loaded = _loaded_after("import blitzq_django.engine")
    assert not [m for m in loaded if m.split(".")[0] in ("django", "channels")]


# -- what the docs teach -----------------------------------------------------------------

_IMPORT = re.compile(r"^\s*from (blitzq_django[\w.]*) import ([\w, ]+?)(?:\s*#.*)?$",
                     re.MULTILINE)


def _taught_imports() -> list[tuple[str, str, str]]:
    """(file, module, name) of every ``from blitzq_django... import name`` in the docs, the
    README and the example project."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "testproject").rglob("*.py"))]
    found = []
    for path in files:
        for module, names in _IMPORT.findall(path.read_text()):
            for name in names.split(","):
                name = name.split(" as ")[0].strip()
                if name:
                    found.append((str(path.relative_to(ROOT)), module, name))
    return found


def test_the_docs_teach_imports() -> None:
    assert len(_taught_imports()) > 20


@pytest.mark.parametrize(("where", "module", "name"), _taught_imports())
def test_every_import_the_docs_teach_works(where: str, module: str, name: str) -> None:
    imported = importlib.import_module(module)
    if not hasattr(imported, name):  # a submodule: from blitzq_django import conf
        importlib.import_module(f"{module}.{name}")
