"""No runtime import cycle in blitzq_django, at module or at package level.

Read from the source with ``ast`` (nothing is imported): an import at module level or
inside a function is a runtime edge; one under ``if TYPE_CHECKING:`` is not. A
function-local import counts, so deferring an import cannot hide a cycle. This checks
beyond import-linter's ``layers`` contracts, which see only the modules they list.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "blitzq_django"


def _modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "migrations" in parts:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield from _runtime_imports(ast.Module([child], []))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _runtime_imports(node)


def _target(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def edges() -> set[tuple[str, str]]:
    modules = _modules()
    found = set()
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                names = [f"{base}.{alias.name}" for alias in node.names]
            for name in names:
                target = _target(name, modules)
                if target and target != module:
                    found.add((module, target))
    return found


def cycles(graph_edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for a, b in graph_edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _package_of(module: str) -> str:
    """The top-level part of blitzq_django a module belongs to (engine: its subpackage)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "engine":
        return ".".join(parts[:3])
    return ".".join(parts[:2])


#: Cycles other parts of issue 20 remove (review §6.3 moves 7-9, history's lease); each
#: goes once its branch is merged, and this set must then be empty.
_BEING_REMOVED: set[tuple[str, ...]] = set()  # every cycle the review named is gone


def _left(found: list[list[str]]) -> list[list[str]]:
    return [c for c in found if tuple(c) not in _BEING_REMOVED]


def test_no_runtime_import_cycle_between_modules() -> None:
    assert _left(cycles(edges())) == []


def test_no_runtime_import_cycle_between_packages() -> None:
    # A package's __init__ re-exporting its own modules is not a cycle between packages.
    packages = {(_package_of(a), _package_of(b)) for a, b in edges()}
    assert _left(cycles({(a, b) for a, b in packages if a != b})) == []


def test_the_checker_sees_a_cycle() -> None:
    assert cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]


def _said_why(lines: list[str], node: ast.Import | ast.ImportFrom) -> bool:
    """A ``# lazy:`` comment on the import, or above its run of imports."""
    if any("lazy:" in line for line in lines[node.lineno - 1:node.end_lineno]):
        return True
    for line in reversed(lines[:node.lineno - 1]):
        text = line.strip()
        if text.startswith("#"):
            if "lazy:" in text:
                return True
        elif not text.startswith(("import ", "from ")):
            return False
    return False


def test_every_function_local_import_says_why() -> None:
    """Deferred only for cost (an optional or heavy dependency) or Django app loading,
    and marked ``# lazy: cost`` / ``# lazy: app loading``: never to dodge a cycle."""
    unmarked = []
    for path in _modules().values():
        source = path.read_text()
        lines = source.splitlines()
        for function in ast.walk(ast.parse(source)):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                unmarked += [f"{path.relative_to(ROOT)}:{node.lineno}"
                             for node in ast.walk(function)
                             if isinstance(node, ast.Import | ast.ImportFrom)
                             and not _said_why(lines, node)]
    assert unmarked == [], unmarked
