"""Seeing workflows from Django (docs/workflows.md, "Seeing workflows"): their steps in
the task history, WorkflowRecord rows, the workflow_started / workflow_finished signals,
the admin's tree page (escaped, staff + permission), Cancel, and ``manage.py blitzq
workflow inspect|cancel`` with --json. Real Redis, a real worker, the real writer."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client as DjangoClient

from blitzq_django import conf, history, signals
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.history.writer import wait_caught_up
from blitzq_django.models import TaskRecord, WorkflowRecord
from blitzq_django.workflows import chain, chord, group

from .conftest import running_worker
from .test_blitzq_command import manage, project_env  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db(transaction=True)

XSS = "<script>alert(1)</script>"
TREE = "/admin/blitzq_django/workflowrecord/tree/"


@blitzq_task(name="tests.wf.add")
def add(x: int, y: int) -> int:
    return x + y


@blitzq_task(name="tests.wf.total")
def total(values: list[int]) -> int:
    return sum(values)


@blitzq_task(name="tests.wf.shout")
def shout(*_: Any) -> str:
    return XSS


@blitzq_task(name="tests.wf.explode", retries=0)
def explode(*_: Any) -> None:
    raise ValueError(XSS)


@blitzq_task(name="tests.wf.report")
def report(failure: dict[str, Any]) -> str:
    return str(failure["id"])


@pytest.fixture
def heard() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    out: list[tuple[str, dict[str, Any]]] = []

    def started(sender: Any, **kwargs: Any) -> None:
        out.append(("started", kwargs))

    def finished(sender: Any, **kwargs: Any) -> None:
        out.append(("finished", kwargs))

    signals.workflow_started.connect(started)
    signals.workflow_finished.connect(finished)
    yield out
    signals.workflow_started.disconnect(started)
    signals.workflow_finished.disconnect(finished)


def write_history() -> None:
    writer = history.writer_for(conf.get_settings(), ["default"])
    assert writer is not None
    assert wait_caught_up(writer, 30), "the writer did not catch up"


def ran(client: Client) -> tuple[str, str]:
    """A chord that succeeds (with a result to escape) and a chain that fails (with an
    error to escape, and on_error), both run to their end and written to the history."""
    good = chord(group(add.s(1, 2), add.s(3, 4), shout.si()), total.si([1, 2])).enqueue()
    bad = chain(add.s(1, 1), explode.s(), add.s(5)).enqueue(on_error=report.s())
    with running_worker():
        assert good.result(timeout=20) == 3
        with pytest.raises(Exception, match="ValueError"):
            bad.result(timeout=20)
        # on_error runs after the workflow failed: wait for its record too
        client.get_result(f"{bad.id}.e", queue="default", timeout=20)
    write_history()
    return good.id, bad.id


def login(*perms: str, staff: bool = True) -> DjangoClient:
    user = User.objects.create_user("staff", password="pw", is_staff=staff)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(
            content_type__app_label="blitzq_django", codename=codename))
    browser = DjangoClient()
    browser.force_login(user)
    return browser


def test_history_signals_admin_and_cli(blitzq_redis: Client,
                                      heard: list[tuple[str, dict[str, Any]]]) -> None:
    good, bad = ran(blitzq_redis)

    # -- the history: each step's row knows its workflow and its place
    steps = {r.task_id: r for r in TaskRecord.objects.filter(workflow_id=good)}
    info = blitzq_redis.workflows.inspect(good)
    assert info is not None
    expected = {n.message_id: (str(n.node), n.path) for n in info.members()}
    assert {i: (r.workflow_node, r.workflow_path) for i, r in steps.items()} == expected
    assert {r.workflow_path for r in steps.values()} == {"0.0", "0.1", "0.2", "1"}
    assert TaskRecord.objects.get(task_id=f"{bad}.e").workflow_node == "e"
    flows = {r.workflow_id: r for r in WorkflowRecord.objects.all()}
    assert (flows[good].kind, flows[good].state) == ("chord", "succeeded")
    assert (flows[bad].kind, flows[bad].state, flows[bad].error_type) == (
        "chain", "failed", "ValueError")
    assert flows[good].finished_at >= flows[good].created_at

    # -- the signals: one start and one end per workflow
    assert sorted((what, kw["workflow_id"]) for what, kw in heard) == sorted(
        [("started", good), ("finished", good), ("started", bad), ("finished", bad)])
    end = next(kw for what, kw in heard if what == "finished" and kw["workflow_id"] == bad)
    assert (end["state"], end["kind"], end["queue"], end["error_type"]) == (
        "failed", "chain", "default", "ValueError")
    assert end["duration"] is not None and end["duration"] >= 0
    write_history()  # read again: nothing new, nothing sent again
    assert len(heard) == 4

    # -- the admin: the tree, each step linked to its record, everything escaped
    browser = login("view_workflowrecord", "view_taskrecord")
    page = browser.get(TREE, {"id": good})
    assert page.status_code == 200
    html = page.content.decode()
    assert XSS not in html and "&lt;script&gt;" in html
    for task_id, row in steps.items():
        assert f'data-id="{task_id}"' in html
        assert f'href="/admin/blitzq_django/taskrecord/{row.pk}/change/"' in html
    assert 'id="blitzq-workflow-state">succeeded' in html
    assert html.count('data-state="succeeded"') == 6  # chord, group, 4 tasks
    failed = browser.get(TREE, {"id": bad}).content.decode()
    assert XSS not in failed and "ValueError: &lt;script&gt;" in failed
    assert re.findall(r'data-path="([\w.]*)" data-state="(\w+)"', failed) == [
        ("", "failed"), ("0", "succeeded"), ("1", "dead_lettered"), ("2", "pending"),
        ("e", "succeeded")]  # the chain, its steps, then on_error
    assert 'id="blitzq-workflow-on-error"' in failed
    # the workflow list links to the tree; a step's record page links to its workflow
    listing = browser.get("/admin/blitzq_django/workflowrecord/",
                          {"state__exact": "failed"}).content.decode()
    assert bad in listing and good not in listing
    assert listing.count(f"{TREE}?id={bad}") == 1 and "/change/" not in listing
    row = WorkflowRecord.objects.get(workflow_id=bad)  # its change URL: the tree
    assert browser.get(f"/admin/blitzq_django/workflowrecord/{row.pk}/change/")["Location"] \
        == f"{TREE}?id={bad}"
    record = browser.get(f"/admin/blitzq_django/taskrecord/{steps[f'{good}.2'].pk}/change/")
    assert f'{TREE}?id={good}" id="blitzq-workflow-link"' in record.content.decode()
    # the dashboard links its count of failed workflows to them
    User.objects.get().user_permissions.add(Permission.objects.get(
        content_type__app_label="blitzq_django", codename="view_queueoverview"))
    board = browser.get("/admin/blitzq_django/queueoverview/dashboard/").content.decode()
    assert ('href="/admin/blitzq_django/workflowrecord/?state__exact=failed" '
            'id="bq-workflows-link"') in board
    steps_list = browser.get("/admin/blitzq_django/taskrecord/",
                             {"in_workflow": "yes", "q": good}).content.decode()
    assert all(task_id in steps_list for task_id in steps)

    # -- Redis forgot it: the tree is drawn from the history
    plain = redis.Redis.from_url(blitzq_redis.broker.url)  # type: ignore[attr-defined]
    plain.delete(blitzq_redis.broker.keys.workflow(good))  # type: ignore[attr-defined]
    plain.close()
    gone = browser.get(TREE, {"id": good}).content.decode()
    assert 'id="blitzq-workflow-source"' in gone and XSS not in gone
    assert all(f'data-id="{task_id}"' in gone for task_id in steps)

    # -- the CLI, as users call it
    out = io.StringIO()
    call_command("blitzq", "workflow", "inspect", bad, "--json", stdout=out)
    doc = json.loads(out.getvalue())
    assert (doc["id"], doc["state"], doc["root"]["kind"]) == (bad, "failed", "chain")
    assert [c["state"] for c in doc["root"]["children"]] == ["succeeded", "dead_lettered",
                                                              "pending"]
    assert doc["failure"]["error_type"] == "ValueError"
    assert doc["on_error"]["state"] == "succeeded"
    text = io.StringIO()
    call_command("blitzq", "workflow", "inspect", bad, stdout=text)
    lines = text.getvalue().splitlines()
    assert lines[0].startswith(f"workflow {bad}  chain  failed  2/3 steps done")
    assert lines[1].startswith(f"failed by step {bad}.2 (tests.wf.explode, dead_lettered): "
                               "ValueError: <script>")  # a terminal: plain text
    assert lines[2].split() == ["STEP", "STATE", "PATH", "ID", "QUEUE", "ATTEMPT", "TOOK",
                                "OUTCOME"]
    assert lines[3].split()[:3] == ["chain", "failed", "-"]
    assert re.match(r"  tests\.wf\.explode\s+dead_lettered\s+1\s", lines[5]), lines
    assert re.match(r"on_error tests\.wf\.report\s+succeeded\s+e\s", lines[7]), lines
    # the history's steps of a workflow, in the tree's order, on_error last
    listed = io.StringIO()
    call_command("blitzq", "history", "--workflow", bad, "--json", stdout=listed)
    assert [(r["task_id"], r["workflow_path"]) for r in json.loads(listed.getvalue())["rows"]
            ] == [(f"{bad}.1", "0"), (f"{bad}.2", "1"), (f"{bad}.e", "e")]
    plain = io.StringIO()
    call_command("blitzq", "history", "--workflow", bad, stdout=plain)
    assert plain.getvalue().splitlines()[1].endswith(f"workflow {bad} at 1")
    with pytest.raises(CommandError) as missing:
        call_command("blitzq", "workflow", "inspect", good, stdout=io.StringIO())
    assert missing.value.returncode == 1
    with pytest.raises(CommandError) as finished:
        call_command("blitzq", "workflow", "cancel", bad, stdout=io.StringIO())
    assert finished.value.returncode == 1 and "already finished (failed)" in str(finished.value)


def test_permissions(blitzq_redis: Client) -> None:
    flow = chain(add.s(1, 1), add.s(2)).enqueue()
    # not staff: the admin's login page; staff without the permission: 403
    assert login("view_workflowrecord", staff=False).get(TREE, {"id": flow.id}).status_code == 302
    User.objects.all().delete()
    assert login("view_taskrecord").get(TREE, {"id": flow.id}).status_code == 403
    User.objects.all().delete()
    viewer = login("view_workflowrecord")
    page = viewer.get(TREE, {"id": flow.id}).content.decode()
    assert 'data-state="queued"' in page and "blitzq-workflow-cancel" not in page
    assert "blitzq-step-record" not in page  # no view_taskrecord: no links to records
    assert viewer.post("/admin/blitzq_django/workflowrecord/cancel/",
                       {"id": flow.id}).status_code == 403
    assert viewer.get(TREE, {"id": "no-such-workflow"}).status_code == 404
    assert viewer.get(TREE, {"id": "a b"}).status_code == 404
    not_an_id = viewer.get(TREE, {"id": "order.1"})  # a message id, not a workflow's
    assert not_an_id.status_code == 404 and "not a valid workflow id" in \
        not_an_id.content.decode()
    User.objects.all().delete()
    canceller = login("view_workflowrecord", "cancel_workflowrecord")
    forged = DjangoClient(enforce_csrf_checks=True)  # a POST without the CSRF token
    forged.force_login(User.objects.get())
    assert forged.post("/admin/blitzq_django/workflowrecord/cancel/",
                       {"id": flow.id}).status_code == 403
    assert blitzq_redis.workflows.state(flow.id) == "running"
    assert canceller.get("/admin/blitzq_django/workflowrecord/cancel/").status_code == 405
    assert "blitzq-workflow-cancel" in canceller.get(TREE, {"id": flow.id}).content.decode()
    done = canceller.post("/admin/blitzq_django/workflowrecord/cancel/", {"id": flow.id},
                          follow=True)
    assert f"Workflow {flow.id}: cancelled." in done.content.decode()
    assert blitzq_redis.workflows.state(flow.id) == "cancelled"


def test_cli_cancel_and_manage_py_inspect_json(blitzq_redis: Client,
                                                project_env: dict[str, str]) -> None:  # noqa: F811
    flow = chord([add.s(1, 1), add.s(2, 2)], total.s()).enqueue()
    shown = manage("blitzq", "workflow", "inspect", flow.id, "--json", env=project_env)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert (doc["state"], doc["done"], doc["total"]) == ("running", 0, 3)
    header, callback = doc["root"]["children"]
    assert [s["state"] for s in header["children"]] == ["queued", "queued"]
    assert callback["state"] == "pending"
    out = io.StringIO()
    call_command("blitzq", "workflow", "cancel", flow.id, "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"id": flow.id, "before": "running",
                                          "cancelled": True}
    assert blitzq_redis.workflows.state(flow.id) == "cancelled"
    again = manage("blitzq", "workflow", "cancel", flow.id, env=project_env)
    assert again.returncode == 1 and "already finished (cancelled)" in again.stderr
    unknown = manage("blitzq", "workflow", "inspect", "nope", env=project_env)
    assert unknown.returncode == 1 and "nothing is known of workflow 'nope'" in unknown.stderr
    bad = manage("blitzq", "workflow", "inspect", "a b", env=project_env)
    assert bad.returncode == 2


@blitzq_task(name="tests.wf.size")
def size(blob: str) -> int:
    return len(blob)


def test_a_step_whose_message_is_not_kept_is_still_linked(blitzq_redis: Client) -> None:
    # Over 8 KiB: the enqueued event carries the message's size, not the message, so its
    # row does not know its workflow; the tree finds it by its message id.
    flow = chain(size.s("x" * 9000), add.s(1)).enqueue()
    with running_worker():
        assert flow.result(timeout=20) == 9001
    write_history()
    big = TaskRecord.objects.get(task_id=f"{flow.id}.1")
    assert big.workflow_id is None and "not kept" in str(big.args)
    html = login("view_workflowrecord", "view_taskrecord").get(
        TREE, {"id": flow.id}).content.decode()
    assert f'href="/admin/blitzq_django/taskrecord/{big.pk}/change/"' in html


def test_with_history_off_the_page_is_drawn_from_redis(settings: Any, redis_url: str,
                                                       namespace: str) -> None:
    conf.reset()
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "QUEUES": ["default"],
                       "HISTORY": "off"}
    try:
        assert history.writer_for(conf.get_settings(), ["default"]) is None
        flow = chain(add.s(1, 2), add.s(3)).enqueue()
        with running_worker():
            assert flow.result(timeout=20) == 6
        browser = login("view_workflowrecord", "view_taskrecord")
        assert flow.id not in browser.get(
            "/admin/blitzq_django/workflowrecord/").content.decode()  # no rows
        html = browser.get(TREE, {"id": flow.id}).content.decode()
        assert 'id="blitzq-workflow-state">succeeded' in html
        assert [s for _, s in re.findall(r'data-path="([\w.]*)" data-state="(\w+)"', html)
                ] == ["succeeded"] * 3
        assert "blitzq-step-record" not in html  # no records to link to
    finally:
        conf.reset()
