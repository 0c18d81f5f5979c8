"""A workflow's page in a real browser: from a step's task record to its workflow, the
tree of steps with their states, durations, results and errors (shown as text, never
run), the workflow list, and Cancel."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from blitzq_django import conf, history
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import Client
from blitzq_django.history.writer import wait_caught_up
from blitzq_django.models import TaskRecord
from blitzq_django.workflows import chain, chord, group
from tests.django.conftest import running_worker

from .conftest import screenshots_dir, skip_without_browser

skip_without_browser()

from playwright.sync_api import Page, expect  # noqa: E402 - after the skip check

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
WORKFLOWS = "/admin/blitzq_django/workflowrecord/"


@blitzq_task(name="shop.wf.price")
def price(sku: str) -> int:
    return len(sku) * 100


@blitzq_task(name="shop.wf.label")
def label(*_: Any) -> str:
    return XSS


@blitzq_task(name="shop.wf.invoice")
def invoice(prices: list[int]) -> int:
    return sum(prices)


@blitzq_task(name="shop.wf.ship", retries=0)
def ship(total: int) -> None:
    raise RuntimeError(XSS)


@pytest.fixture
def blitzq(settings: Any, redis_url: str, namespace: str) -> Iterator[Client]:
    conf.reset()
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "QUEUES": ["default"]}
    yield conf.get_client()
    conf.reset()


def log_in(page: Page, username: str, *codenames: str) -> None:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="blitzq_django", codename__in=codenames))
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


def test_from_a_step_to_its_workflow_tree(page: Page, blitzq: Client) -> None:
    # a chain of a chord (prices of a basket, a label, then the invoice) and shipping,
    # which fails
    flow = chain(chord(group(price.s("apple"), price.s("kiwi"), label.si()),
                       invoice.si([500, 400])), ship.s())
    handle = flow.enqueue()
    with running_worker(blitzq), pytest.raises(Exception, match="RuntimeError"):
        handle.result(timeout=20)
    writer = history.writer_for(conf.get_settings(), ["default"])
    assert writer is not None and wait_caught_up(writer, 30)
    # nodes in pre-order: 0 the chain, 1 the chord, 2 its group, 3-5 the group's steps,
    # 6 the invoice, 7 shipping
    step = TaskRecord.objects.get(task_id=f"{handle.id}.6")  # the invoice

    log_in(page, "operator", "view_taskrecord", "view_workflowrecord")
    page.goto(f"/admin/blitzq_django/taskrecord/{step.pk}/change/")
    page.click("#blitzq-workflow-link")
    page.wait_for_url(f"**/workflowrecord/tree/?id={handle.id}")
    expect(page.locator("#blitzq-workflow-state")).to_have_text("failed")
    expect(page.locator("#blitzq-workflow-progress")).to_have_text("5 of 5")
    tree = page.locator("#blitzq-workflow-tree")
    nodes = tree.locator("li.blitzq-node")
    assert [nodes.nth(i).get_attribute("data-state") for i in range(nodes.count())] == [
        "failed", "succeeded", "succeeded", "succeeded", "succeeded", "succeeded",
        "succeeded", "dead_lettered"]
    apple = tree.locator(f"li[data-id='{handle.id}.3']")
    expect(apple.locator(".blitzq-node-head").first).to_contain_text("shop.wf.price")
    expect(apple.locator(".blitzq-step-result")).to_have_text("500")
    assert apple.locator(".blitzq-took").inner_text().endswith("ms")
    # results and errors are text: nothing of them runs
    expect(tree.locator(f"li[data-id='{handle.id}.5'] .blitzq-step-result")).to_contain_text(
        "<script>window.__xss=1</script>")
    failed = tree.locator(f"li[data-id='{handle.id}.7']")
    expect(failed.locator(".blitzq-step-error")).to_contain_text(
        "RuntimeError: <script>window.__xss=1</script>")
    assert page.evaluate("window.__xss") is None and page.locator("img[src=x]").count() == 0
    # every step links to its record; the invoice's back to where we came from
    failed.locator("a.blitzq-step-record").click()
    page.wait_for_url("**/taskrecord/*/change/")
    expect(page.locator("body")).to_contain_text(f"{handle.id}.7")
    page.goto(f"/admin/blitzq_django/workflowrecord/tree/?id={handle.id}")
    page.screenshot(path=str(screenshots_dir() / "admin-workflow.png"), full_page=True)
    # the list of workflows, filtered by state, links to the tree
    page.goto(WORKFLOWS)
    page.locator("#changelist-filter details[data-filter-title='state'] a",
                 has_text="failed").first.click()
    page.wait_for_url("**state__exact=failed**")
    page.locator("#result_list a", has_text=handle.id).click()
    page.wait_for_url(f"**/workflowrecord/tree/?id={handle.id}")


def test_cancel_a_running_workflow(page: Page, blitzq: Client) -> None:
    handle = chain(price.s("pear"), invoice.s()).enqueue()  # no worker: it waits
    log_in(page, "operator", "view_workflowrecord", "cancel_workflowrecord")
    page.goto(f"{WORKFLOWS}tree/?id={handle.id}")
    expect(page.locator("#blitzq-workflow-state")).to_have_text("running")
    page.click("#blitzq-workflow-cancel")
    expect(page.locator(".messagelist")).to_contain_text(f"Workflow {handle.id}: cancelled.")
    expect(page.locator("#blitzq-workflow-state")).to_have_text("cancelled")
    assert page.locator("#blitzq-workflow-cancel").count() == 0
    assert blitzq.workflows.state(handle.id) == "cancelled"


def test_the_dashboard_counts_running_and_failed_workflows(page: Page, blitzq: Client) -> None:
    log_in(page, "ops", "view_queueoverview")
    page.goto("/admin/blitzq_django/queueoverview/dashboard/")  # WSGI: the page polls
    expect(page.locator("#bq-workflows-running")).to_have_text("0")
    expect(page.locator("#bq-workflows-failed")).to_have_text("0")
    good = chain(price.s("fig"), invoice.si([1, 2])).enqueue()
    bad = chain(price.s("plum"), ship.s()).enqueue()
    expect(page.locator("#bq-workflows-running")).to_have_text("2")
    with running_worker(blitzq):
        assert good.result(timeout=20) == 3
        with pytest.raises(Exception, match="RuntimeError"):
            bad.result(timeout=20)
        expect(page.locator("#bq-workflows-running")).to_have_text("0", timeout=15_000)
        expect(page.locator("#bq-workflows-failed")).to_have_text("1")
    assert page.locator("#bq-workflows-link").count() == 0  # no view_workflowrecord
