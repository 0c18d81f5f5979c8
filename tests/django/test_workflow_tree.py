"""How the admin draws a workflow's tree (admin/workflows.py), without Redis: a big group
is cut to what matters, and a tree rebuilt from task records alone keeps its places."""

from __future__ import annotations

import re

from blitzq_django.admin.workflow_tree import CHILDREN_SHOWN, Step, draw, from_rows
from blitzq_django.models import TaskRecord


def test_a_big_group_shows_its_failures_and_counts_the_rest() -> None:
    members = [Step(kind="task", path=f"0.{i}", state="failed" if i % 25 == 24 else
                    "succeeded", task="t", message_id=f"w.{i + 2}") for i in range(250)]
    html = draw(Step(kind="group", path="0", state="failed", children=members))
    drawn = re.findall(r'data-id="w\.(\d+)"', html)
    assert len(drawn) == CHILDREN_SHOWN
    # all 10 failures, then the first successes, in their order
    assert [int(n) - 2 for n in drawn] == sorted(int(n) - 2 for n in drawn)
    assert {f"{i + 2}" for i in range(24, 250, 25)} <= set(drawn)
    assert "… and 150 more succeeded (not drawn)" in html


def test_a_tree_from_records_alone_keeps_every_place() -> None:
    def row(node: str, path: str, state: str = "succeeded") -> TaskRecord:
        return TaskRecord(task_id=f"w.{node}", task_name="t", queue="q", state=state,
                          workflow_id="w", workflow_node=node, workflow_path=path)

    rows = [row("6", "1", "dead_lettered"), row("3", "0.0.0"), row("4", "0.0.1"),
            row("5", "0.1"), row("e", "e")]
    root, on_error = from_rows("chain", rows, lambda r: f"/r/{r.task_id}")
    html = draw(root)
    assert re.findall(r'data-path="([\w.]*)" data-state="(\w*)"', html) == [
        ("", "failed"), ("0", "succeeded"), ("0.0", "succeeded"), ("0.0.0", "succeeded"),
        ("0.0.1", "succeeded"), ("0.1", "succeeded"), ("1", "dead_lettered")]
    assert root.kind == "chain" and root.children[0].kind == "step"
    assert on_error is not None and on_error.message_id == "w.e"
    assert 'href="/r/w.3"' in html
