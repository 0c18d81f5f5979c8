"""A workflow's tree as the admin draws it: each node a ``Step`` (kind, state, times,
result or error, the link to its task record), built from Redis's ``WorkflowInfo``
completed by the steps' TaskRecord rows (``from_info``), or from the rows alone once Redis
has forgotten the workflow (``from_rows``); ``draw`` makes the nested lists, escaped
(``format_html``), results redacted (BLITZQ["REDACT"]).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import redaction
from ..engine.core.workflow import WorkflowNode
from ..models import TaskRecord
from ..web.common import duration, pretty

#: A task record's admin URL ("" when the user may not see records).
UrlOf = Callable[[TaskRecord], str]

#: Task states of a step that are final (its record's).
FINAL_STEP_STATES = frozenset({"succeeded", "failed", "dead_lettered", "cancelled",
                               "expired"})


@dataclass
class Step:
    """One node of the tree as the page draws it."""

    kind: str  # task | chain | group | chord (or "step": a place the history cannot name)
    path: str
    state: str
    task: str = ""
    message_id: str = ""
    queue: str = ""
    record_url: str = ""
    started_ms: int | None = None
    finished_ms: int | None = None
    attempt: int | None = None
    has_result: bool = False
    result: Any = None
    error_type: str = ""
    error_message: str = ""
    on_error: bool = False
    children: list[Step] = field(default_factory=list)

    @property
    def took_ms(self) -> int | None:
        if self.started_ms is None or self.finished_ms is None:
            return None
        return max(0, self.finished_ms - self.started_ms)


def _ms(when: dt.datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def from_info(node: WorkflowNode, rows: dict[str, TaskRecord], url_of: UrlOf,
               on_error: bool = False) -> Step:
    step = Step(kind=node.kind, path=node.path, state=node.state, task=node.task or "",
                message_id=node.message_id or "", queue=node.queue or "",
                started_ms=node.started_ms, finished_ms=node.finished_ms,
                attempt=node.attempt, error_type=node.error_type or "",
                error_message=node.error_message or "", on_error=on_error,
                children=[from_info(c, rows, url_of) for c in node.children])
    if node.kind == "task":
        row = rows.get(step.message_id)
        if node.state == "succeeded":
            step.has_result, step.result = True, node.result
        if row is not None:
            step.record_url = url_of(row)
            # The history's copy: redacted as written, and kept after Redis forgets it.
            if row.state == "succeeded" and row.result is not None:
                step.has_result, step.result = True, row.result
            if row.error_type and not step.error_type:
                step.error_type, step.error_message = row.error_type, row.error_message
            step.started_ms = step.started_ms or _ms(row.started_at)
            step.finished_ms = step.finished_ms or _ms(row.finished_at)
            step.attempt = step.attempt or row.attempt
    else:
        _span(step)
    return step


def _span(step: Step) -> None:
    """A chain's, group's or chord's times: from its first step's start to its last
    step's end, once every step under it has ended."""
    starts = [c.started_ms for c in step.children if c.started_ms is not None]
    step.started_ms = min(starts) if starts else None
    ends = [c.finished_ms for c in step.children]
    if ends and all(e is not None for e in ends):
        step.finished_ms = max(e for e in ends if e is not None)


def _path_key(path: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in path.split(".")) if path else ()
    except ValueError:
        return (10**9,)


def from_rows(kind: str, rows: Sequence[TaskRecord], url_of: UrlOf
              ) -> tuple[Step, Step | None]:
    """The tree rebuilt from the steps' records alone (Redis no longer holds the
    workflow): each record at its place; the places between them are drawn as steps of
    unknown kind (the history keeps the tasks, not the chains and groups around them)."""
    root = Step(kind=kind or "step", path="", state="")
    on_error = None
    by_path: dict[str, Step] = {"": root}

    def place(path: str) -> Step:
        found = by_path.get(path)
        if found is None:
            parent = place(path.rpartition(".")[0] if "." in path else "")
            found = by_path[path] = Step(kind="step", path=path, state="")
            parent.children.append(found)
        return found

    for row in sorted(rows, key=lambda r: _path_key(r.workflow_path)):
        step = Step(kind="task", path=row.workflow_path, state=row.state, task=row.task_name,
                    message_id=row.task_id, queue=row.queue, record_url=url_of(row),
                    started_ms=_ms(row.started_at), finished_ms=_ms(row.finished_at),
                    attempt=row.attempt, has_result=row.state == "succeeded",
                    result=row.result, error_type=row.error_type,
                    error_message=row.error_message)
        if row.workflow_node == "e":
            step.on_error, on_error = True, step
            continue
        if row.workflow_path == "":  # a workflow of one task
            root = by_path[""] = step
            continue
        # Tasks are leaves: a task's place is never another's parent, and sorted by place
        # a parent is drawn before its children.
        place(row.workflow_path.rpartition(".")[0] if "." in row.workflow_path
              else "").children.append(step)

    def finish(step: Step) -> None:
        for child in step.children:
            finish(child)
        if step.kind != "task":
            _span(step)
            states = {c.state for c in step.children}
            step.state = ("failed" if states & {"failed", "dead_lettered", "cancelled",
                                                "expired"}
                          else "succeeded" if states == {"succeeded"} else "")

    finish(root)
    return root, on_error


# -- drawing ---------------------------------------------------------------------------

def _state(state: str) -> SafeString:
    if not state:
        return format_html('<span class="blitzq-state blitzq-state-unknown">{}</span>', "?")
    return format_html('<span class="blitzq-state blitzq-state-{}">{}</span>',
                       state, state.replace("_", "-"))


def _head(step: Step) -> SafeString:
    if step.kind == "task":
        name = (format_html('<a class="blitzq-step-record" href="{}">{}</a>',
                            step.record_url, step.task) if step.record_url
                else format_html("<span>{}</span>", step.task))
        label = format_html('<span class="blitzq-kind">{}</span> {}',
                            "on_error" if step.on_error else "task", name)
    else:
        label = format_html('<span class="blitzq-kind">{}</span>', step.kind)
    took = duration(step.took_ms) if step.took_ms is not None else ""
    extra = format_html_join(" ", '<span class="{}">{}</span>', [
        (cls, text) for cls, text in (
            ("blitzq-took", took),
            ("blitzq-attempt", f"attempt {step.attempt}" if step.attempt
             and step.kind == "task" else ""),
            ("blitzq-step-id", step.message_id),
            ("blitzq-muted", f"at {step.path}" if step.path else "root"),
        ) if text])
    return format_html('<div class="blitzq-node-head">{} {} {}</div>', label,
                       _state(step.state), extra)


def _body(step: Step) -> SafeString:
    parts = []
    if step.error_type or step.error_message:
        parts.append(format_html('<div class="blitzq-step-error">{}: {}</div>',
                                 step.error_type or "error", step.error_message))
    if step.has_result:
        parts.append(format_html('<div class="blitzq-step-result">{}</div>',
                                 pretty(redaction.redact_result(step.result))))
    return format_html_join("", "{}", ((p,) for p in parts))


#: Children drawn under one node at most: a group of 10,000 steps shows those that did not
#: succeed first, then the others in order, up to this many, and counts the rest by state.
CHILDREN_SHOWN = 100


def shown_children(children: Sequence[Step]) -> tuple[list[Step], dict[str, int]]:
    """The children to draw (in their order) and the states of those left out."""
    if len(children) <= CHILDREN_SHOWN:
        return list(children), {}
    first = [i for i, c in enumerate(children) if c.state != "succeeded"][:CHILDREN_SHOWN]
    chosen = set(first)
    for i in range(len(children)):
        if len(chosen) >= CHILDREN_SHOWN:
            break
        chosen.add(i)
    hidden: dict[str, int] = {}
    for i, child in enumerate(children):
        if i not in chosen:
            hidden[child.state or "unknown"] = hidden.get(child.state or "unknown", 0) + 1
    return [children[i] for i in sorted(chosen)], hidden


def draw(step: Step) -> SafeString:
    """The tree under ``step`` as nested lists (escaped: format_html)."""
    children: SafeString | str = ""
    if step.children:
        shown, hidden = shown_children(step.children)
        more = (format_html('<li class="blitzq-node blitzq-more">{}</li>', "… and " + ", ".join(
            f"{n} more {state}" for state, n in sorted(hidden.items())) + " (not drawn)")
            if hidden else "")
        children = format_html('<ul class="blitzq-tree">{}{}</ul>',
                               format_html_join("", "{}", ((draw(c),) for c in shown)), more)
    return format_html('<li class="blitzq-node blitzq-node-{}" data-path="{}" '
                       'data-state="{}" data-id="{}">{}{}{}</li>',
                       step.kind, step.path, step.state, step.message_id, _head(step),
                       _body(step), children)
