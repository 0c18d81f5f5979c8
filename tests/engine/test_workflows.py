"""Workflows (docs/workflows.md): chains, groups, chords and their nesting; the failure
policy; the handle; inspect and cancel. Each on Redis (both modes) and in memory."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from blitzq_django.engine import Client, ConfigurationError, ResultTimeout
from blitzq_django.engine.client.workflows import chain, chord, group
from blitzq_django.engine.core import workflow as wf
from blitzq_django.engine.errors import WorkflowCancelled, WorkflowFailed

from .helpers import run_burst


@pytest.fixture
def tasks(client: Client) -> Any:
    @client.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @client.task(name="mul")
    async def mul(a: int, b: int) -> int:
        return a * b

    @client.task(name="tsum")
    def tsum(values: list[Any]) -> int:
        return sum(v for v in values if isinstance(v, int))

    @client.task(name="echo")
    def echo(*values: Any) -> Any:
        return list(values)

    @client.task(name="boom", retries=0)
    def boom(*_: Any) -> None:
        raise ValueError("boom")

    return SimpleNamespace(add=add, mul=mul, tsum=tsum, echo=echo, boom=boom)


def test_chain_passes_each_result_on(client: Client, tasks: Any) -> None:
    handle = chain(tasks.add.s(1, 2), tasks.mul.s(10), tasks.add.s(5)).enqueue()
    assert handle.state() == "running"
    assert handle.progress() == (0, 3)
    run_burst(client)
    assert handle.result(timeout=5) == 35
    assert handle.state() == "succeeded"
    assert handle.progress() == (3, 3)


def test_group_results_in_order(client: Client, tasks: Any) -> None:
    handle = group(tasks.add.s(i, i) for i in range(20)).enqueue()
    run_burst(client)
    assert handle.result(timeout=5) == [2 * i for i in range(20)]


def test_chord_calls_back_with_every_result(client: Client, tasks: Any) -> None:
    handle = chord(group(tasks.mul.s(i, 2) for i in range(10)), tasks.tsum.s()).enqueue()
    run_burst(client)
    assert handle.result(timeout=5) == sum(2 * i for i in range(10))


def test_immutable_signature_ignores_the_previous_result(client: Client, tasks: Any) -> None:
    handle = chain(tasks.add.s(1, 1), tasks.echo.si("fixed")).enqueue()
    run_burst(client)
    assert handle.result(timeout=5) == ["fixed"]


def test_nesting(client: Client, tasks: Any) -> None:
    # a chain of: a task, a group (each member gets its result), a chord in a chain,
    # and a group of chords followed by a callback
    inner = chord([tasks.add.s(1), tasks.add.s(2)], tasks.tsum.s())
    flow = chain(tasks.add.s(1, 2),                     # 3
                 group(tasks.add.s(10), chain(tasks.mul.s(2), tasks.add.s(1))),  # [13, 7]
                 tasks.tsum.s(),                        # 20
                 inner)                                 # (20+1)+(20+2) = 43
    handle = flow.enqueue()
    run_burst(client)
    assert handle.result(timeout=5) == 43
    chords = chord(group(chord([tasks.add.s(i, 1) for i in range(3)], tasks.tsum.s())
                         for _ in range(4)), tasks.tsum.s())
    handle = chords.enqueue()
    run_burst(client)
    assert handle.result(timeout=5) == 4 * (1 + 2 + 3)


def test_chord_in_a_group(client: Client, tasks: Any) -> None:
    flow = group(chord([tasks.add.s(1, 1), tasks.add.s(2, 2)], tasks.tsum.s()),
                 tasks.add.s(5, 5))
    handle = flow.enqueue()
    run_burst(client)
    assert handle.result(timeout=5) == [6, 10]


def test_a_failure_fails_the_workflow_and_runs_on_error_once(client: Client,
                                                              tasks: Any) -> None:
    handle = chain(tasks.add.s(1, 1), tasks.boom.s(), tasks.add.s(1)).enqueue(
        on_error=tasks.echo.s())
    run_burst(client)
    with pytest.raises(WorkflowFailed) as failed:
        handle.result(timeout=5)
    failure = failed.value.failure
    assert failure is not None
    assert failure["task"] == "boom" and failure["state"] == "dead_lettered"
    assert failure["error_type"] == "ValueError" and failure["path"] == "1"
    info = handle.inspect()
    assert info is not None and info.state == "failed"
    states = [m.state for m in info.members()]
    assert states == ["succeeded", "dead_lettered", "pending", "succeeded"]
    assert info.on_error is not None
    assert info.on_error.result == [failure]  # echo(failure)


def test_allow_failures_passes_the_error_in_place(client: Client, tasks: Any) -> None:
    flow = chord([tasks.add.s(1, 1), tasks.boom.s(), chain(tasks.add.s(1, 1), tasks.boom.s())],
                 tasks.echo.s(), allow_failures=True)
    handle = flow.enqueue()
    run_burst(client)
    (values,) = handle.result(timeout=5)
    assert values[0] == 2
    assert values[1]["task"] == "boom" and values[1]["error_type"] == "ValueError"
    assert values[2]["task"] == "boom" and values[2]["path"] == "0.2.1"


def test_inspect_shows_the_tree(client: Client, tasks: Any) -> None:
    handle = chord([tasks.add.s(1, 1), tasks.add.s(2, 2)], tasks.tsum.s()).enqueue()
    info = handle.inspect()
    assert info is not None
    assert info.root.kind == "chord" and info.root.state == "running"
    header, callback = info.root.children
    assert header.kind == "group" and [c.state for c in header.children] == ["queued"] * 2
    assert callback.state == "pending" and callback.task == "tsum"
    assert callback.message_id == wf.member_id(handle.id, 4)
    run_burst(client)
    info = handle.inspect()
    assert info is not None and info.state == "succeeded" and info.done == info.total == 3
    assert [n.path for n in info.root.walk()] == ["", "0", "0.0", "0.1", "1"]
    assert [c.result for c in info.root.children[0].children] == [2, 4]
    assert info.root.children[1].result == 6
    assert all(m.finished_ms for m in info.members())


def test_cancel_stops_what_follows(client: Client, tasks: Any) -> None:
    handle = chain(tasks.add.s(1, 1), tasks.add.s(1)).enqueue()
    assert handle.cancel() == "running"
    assert handle.cancel() == "cancelled"
    run_burst(client)
    with pytest.raises(WorkflowCancelled):
        handle.result(timeout=1)
    info = handle.inspect()
    assert info is not None
    assert [m.state for m in info.members()] == ["cancelled", "pending"]


def test_a_member_cancelled_alone_fails_the_workflow(client: Client, tasks: Any) -> None:
    handle = group(tasks.add.s(1, 1), tasks.add.s(2, 2).options(delay=60)).enqueue(
        on_error=tasks.echo.s())
    member = wf.member_id(handle.id, 2)
    assert client.cancel(member).outcome == "cancelled"
    run_burst(client)
    with pytest.raises(WorkflowFailed) as failed:
        handle.result(timeout=5)
    assert failed.value.failure is not None and failed.value.failure["state"] == "cancelled"
    info = handle.inspect()
    assert info is not None and info.on_error is not None
    assert info.on_error.state == "succeeded"


def test_enqueue_again_with_the_same_id_adds_nothing(client: Client, tasks: Any) -> None:
    flow = group(tasks.add.s(1, 1), tasks.add.s(2, 2))
    first = flow.enqueue(workflow_id="order-7")
    again = flow.enqueue(workflow_id="order-7")
    assert first.id == again.id == "order-7"
    assert client.queue_stats().ready == 2
    run_burst(client)
    assert again.result(timeout=5) == [2, 4]


def test_result_timeout_while_running(client: Client, tasks: Any) -> None:
    handle = chain(tasks.add.s(1, 1)).enqueue()
    with pytest.raises(ResultTimeout):
        handle.result(timeout=0.05)


def test_bad_shapes_are_refused_when_built(client: Client, tasks: Any) -> None:
    with pytest.raises(ConfigurationError):
        group()
    with pytest.raises(ConfigurationError):
        chain(tasks.add)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="task_id"):
        tasks.add.s(1, 2).options(task_id="x")
    with pytest.raises(TypeError):
        chain(tasks.add.s(1, 2, 3)).enqueue()  # too many arguments: checked at enqueue
    with pytest.raises(ConfigurationError):
        chain(tasks.add.s(1, 1)).enqueue(workflow_id="has space")


def test_member_headers_and_children_do_not_inherit_them(client: Client) -> None:
    seen: dict[str, Any] = {}

    @client.task(name="parent")
    def parent() -> None:
        from blitzq_django.engine import current_task
        ctx = current_task()
        assert ctx is not None
        seen["header"] = ctx.headers.get(wf.WORKFLOW_HEADER)
        seen["child"] = child.enqueue().id

    @client.task(name="child")
    def child() -> None:
        from blitzq_django.engine import current_task
        ctx = current_task()
        assert ctx is not None
        seen["child_header"] = ctx.headers.get(wf.WORKFLOW_HEADER)

    handle = chain(parent.si(), parent.si()).enqueue()
    run_burst(client)
    handle.result(timeout=5)
    assert seen["header"] == [handle.id, 2, "1"]
    assert seen["child_header"] is None
