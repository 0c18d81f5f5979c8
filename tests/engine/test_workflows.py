"""Workflows (docs/workflows.md): chains, groups, chords and their nesting; the failure
policy; the handle; inspect and cancel. Each on Redis (both modes) and in memory."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from blitzq_django.engine import Client, ConfigurationError, ResultTimeout
from blitzq_django.engine.client.workflows import chain, chord, group
from blitzq_django.engine.core import workflow as wf
from blitzq_django.engine.errors import WorkflowCancelled, WorkflowFailed

from ..support.waiting import await_until
from .helpers import background_worker, run_burst


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


# -- the shapes that break Celery's chords (issue 22) ----------------------------------

def test_a_member_that_retries_then_succeeds(client: Client, tasks: Any) -> None:
    tries: dict[int, int] = {}

    @client.task(name="flaky", retries=3, initial_delay=0.01, jitter=False)
    def flaky(i: int) -> int:
        tries[i] = tries.get(i, 0) + 1
        if tries[i] < 3:
            raise RuntimeError("not yet")
        return i

    handle = chord(group(flaky.s(i) for i in range(3)), tasks.echo.s()).enqueue()
    run_burst(client)
    assert handle.result(timeout=5) == [[0, 1, 2]]
    assert tries == {0: 3, 1: 3, 2: 3}
    info = handle.inspect()
    assert info is not None and [m.attempt for m in info.members()] == [3, 3, 3, 1]


def test_a_dead_lettered_member_fails_the_chord(client: Client, tasks: Any) -> None:
    ran: list[Any] = []

    @client.task(name="callback")
    def callback(values: Any) -> None:
        ran.append(values)

    handle = chord([tasks.add.s(1, 1), tasks.boom.s()], callback.s()).enqueue(
        on_error=tasks.echo.s())
    run_burst(client)
    with pytest.raises(WorkflowFailed):
        handle.result(timeout=5)
    assert ran == []
    assert len(client.dead_letters.list()) == 1


def test_results_expiring_before_the_callback(broker: Any, client: Client, tasks: Any,
                                              request: pytest.FixtureRequest) -> None:
    # Records live 1 s; the header runs, its records expire, then the callback runs (on
    # a queue of its own, served later) and still gets every result: they are kept in
    # the workflow until it has run.
    from blitzq_django.engine import MemoryBroker, RedisBroker
    from blitzq_django.engine.client.client import Client as EngineClient

    from ..support.waiting import wait_until

    if isinstance(broker, RedisBroker):
        short = RedisBroker(broker.url, namespace=broker.keys.namespace, record_ttl=1,
                            mode=broker.mode)
        request.addfinalizer(short.close)
    else:
        short = MemoryBroker(record_ttl=1)
    other = EngineClient(short, client.registry)
    flow = chord(group(tasks.add.s(i, 0).options(queue="header") for i in range(5)),
                 tasks.tsum.s().options(queue="callback"))
    handle = other.workflows.enqueue(flow)
    run_burst(other, queues=("header",))
    first = wf.member_id(handle.id, 2)
    wait_until(lambda: short.get_record("header", first) is None, 10,
               message="the header's records to expire")
    assert handle.state() == "running"
    run_burst(other, queues=("callback",))
    assert other.workflows.result(handle.id, timeout=5) == sum(range(5))


@pytest.mark.asyncio
async def test_a_member_cancelled_while_others_run(client: Client, tasks: Any) -> None:
    started: set[int] = set()

    @client.task(name="slow")
    async def slow(i: int) -> int:
        started.add(i)
        await asyncio.sleep(30)  # (noqa: sleep) a task body cancelled while it runs
        return i

    handle = await chord([slow.s(1), slow.s(2), tasks.add.s(1, 1)],
                         tasks.tsum.s()).aenqueue(on_error=tasks.echo.s())
    async with background_worker(client):
        await await_until(lambda: started == {1, 2}, 10, message="both slow members to start")
        assert (await client.acancel(wf.member_id(handle.id, 2))).outcome == "revoked"
        with pytest.raises(WorkflowFailed) as failed:
            await handle.aresult(timeout=10)
        assert failed.value.failure is not None
        assert failed.value.failure["state"] == "cancelled"
        assert await handle.acancel() == "failed"  # already final: nothing changes
        await client.acancel(wf.member_id(handle.id, 3))  # the other slow one

        async def on_error_state() -> str:
            info = await handle.ainspect()
            assert info is not None and info.on_error is not None
            return info.on_error.state

        await await_until_async(on_error_state, "succeeded", 10)
    info = await handle.ainspect()
    assert info is not None and info.members()[-2].state == "pending"  # no callback


async def await_until_async(read: Any, wanted: Any, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (found := await read()) != wanted:
        assert loop.time() < deadline, f"still {found!r} after {timeout} s, not {wanted!r}"
        await asyncio.sleep(0.02)  # (noqa: sleep) a poll under the deadline above


def test_a_step_recorded_twice_enqueues_what_follows_once(client: Client,
                                                          tasks: Any) -> None:
    # What a step that ran twice (a worker killed after recording it, a lost lease)
    # does: record the same outcome again. Nothing changes; the same next step is
    # enqueued again and deduplicated.
    from blitzq_django.engine.client.workflows import ended, record_outcome
    from blitzq_django.engine.core.message import pack

    handle = chain(tasks.add.s(1, 1), tasks.add.s(1)).enqueue()
    first = wf.member_id(handle.id, 1)
    message = next(m for m in _ready(client) if m.id == first)
    end = ended(message, "succeeded", None, 0, value=pack(2))
    assert end is not None
    for _ in range(3):
        record_outcome(client.broker, client.workflows.launcher, end)
    assert sorted(m.id for m in _ready(client)) == sorted([first,
                                                           wf.member_id(handle.id, 2)])
    assert handle.progress() == (1, 2)
    run_burst(client)
    # the first step's own run records "succeeded" again: changes nothing
    assert handle.result(timeout=5) == 3
    assert handle.progress() == (2, 2)


def _ready(client: Client) -> list[Any]:
    from .helpers import ready_message_ids
    return [_message_of(client, i) for i in ready_message_ids(client.broker, "default")]


def _message_of(client: Client, message_id: str) -> Any:
    from blitzq_django.engine.core.message import decode

    handle_id, _, at = message_id.rpartition(".")
    raw = client.broker.workflows.fields(handle_id, [f"m:{at}"])[0]
    assert raw is not None
    return decode(wf.Member.unpack(raw).payload)


def test_workflow_events(client: Client, tasks: Any) -> None:
    ok = chain(tasks.add.s(1, 1), tasks.add.s(1)).enqueue()
    bad = group(tasks.boom.s(), tasks.add.s(1, 1)).enqueue()
    run_burst(client)
    stopped = chain(tasks.add.s(1, 1)).enqueue()
    stopped.cancel()
    found = [(e.kind, e.id, e.task, e.error_type)
             for e in client.broker.events("default", "0", 10_000, None)
             if e.kind.startswith("workflow_")]
    assert ("workflow_started", ok.id, "chain", None) in found
    assert ("workflow_succeeded", ok.id, "chain", None) in found
    assert ("workflow_failed", bad.id, "group", "ValueError") in found
    assert ("workflow_cancelled", stopped.id, "chain", None) in found
    assert [k for k, i, *_ in found if i == ok.id] == ["workflow_started",
                                                       "workflow_succeeded"]
    ends = [e for e in client.broker.events("default", "0", 10_000, None)
            if e.kind == "workflow_succeeded"]
    assert ends[0].duration_ms is not None


def test_a_late_replay_does_not_send_a_finished_step_again(client: Client,
                                                           tasks: Any) -> None:
    from blitzq_django.engine.client.workflows import ended, record_outcome
    from blitzq_django.engine.core.message import pack

    handle = chain(tasks.add.s(1, 1), tasks.add.s(1)).enqueue()
    first = _ready(client)[0]
    run_burst(client)
    assert handle.result(timeout=5) == 3
    end = ended(first, "succeeded", None, 0, value=pack(2))
    assert end is not None
    # Replayed long after (its next step's idempotency key may be gone by then): the
    # next step has its outcome, so it is not launched again.
    again = client.broker.workflows.settle(*end, 0)
    assert again.status == "again" and again.launches == []
    record_outcome(client.broker, client.workflows.launcher, end)
    assert client.queue_stats().ready == 0


def _chord_shape(size: int) -> tuple[list[wf.Node], dict[int, bytes]]:
    """A chord of ``size`` members, flattened: chord 0, group 1, members, callback."""
    nodes = [wf.Node("chord", -1, 0, 2, size + 3, -1), wf.Node("group", 0, 0, size, size + 1, -1)]
    nodes += [wf.Node("task", 1, i, 0, 1, 1 + i if i else -1) for i in range(size)]
    nodes.append(wf.Node("task", 0, 1, 0, 1, 1))
    return nodes, dict.fromkeys(range(2, size + 3), b"m")


@pytest.mark.single_node("counts the commands of one server (INFO commandstats); the cost "
                         "of a member does not depend on the topology")
def test_a_members_settle_cost_does_not_grow_with_its_group(redis_broker: Any) -> None:
    # Counted in Redis: the commands workflow.lua runs to record one member (not the
    # last) of a chord of 10 and of one of 10,000.
    from .helpers import raw_redis

    r = raw_redis(redis_broker)
    store = redis_broker.workflows

    def calls() -> int:
        stats = r.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items()
                   if k.startswith("cmdstat_h"))

    counted = []
    for size in (10, 10_000):
        nodes, members = _chord_shape(size)
        workflow_id = f"cost{size}"
        store.start(workflow_id, 0, "default", nodes, members, None)
        before = calls()
        advance = store.settle(workflow_id, 2 + size // 2, "succeeded", b"\x01", b"\xc0",
                               b"\xc0", 0)
        counted.append(calls() - before)
        assert advance.status == "new" and advance.launches == []
    assert counted[0] == counted[1], counted


def test_the_last_member_launches_the_callback_with_every_value() -> None:
    from blitzq_django.engine.core.message import unpack

    h: dict[str, Any] = {}
    nodes, members = _chord_shape(10_000)
    wf.start(h, workflow_id="w", now_ms=0, home="q", nodes=nodes, members=members,
             on_error=None)
    for i in range(10_000):
        advance = wf.settle(h, at=2 + i, state="succeeded", value_=bytes([i % 100]),
                            outcome=b"", failure=b"", now_ms=0)
    (callback,) = advance.launches
    assert callback.node == 10_002 and callback.input is not None
    assert unpack(callback.input) == [i % 100 for i in range(10_000)]


def test_a_steps_delay_counts_from_when_it_is_sent(client: Client, tasks: Any) -> None:
    handle = chain(tasks.add.s(1, 1), tasks.add.s(1).options(delay=60)).enqueue()
    run_burst(client)
    info = handle.inspect()
    assert info is not None
    first, _second = info.members()
    assert first.state == "succeeded" and first.finished_ms is not None
    found = client.inspect(wf.member_id(handle.id, 2))
    assert found is not None and found.state == "scheduled"
    assert found.due_ms is not None and found.due_ms >= first.finished_ms + 59_000


def test_a_step_its_workflow_refuses_is_settled_all_the_same(
        broker: Any, client: Client, tasks: Any, caplog: pytest.LogCaptureFixture) -> None:
    # A workflow whose state is broken (here: its tree deleted by hand) refuses to record
    # its step: after a few tries the message is settled anyway (not redelivered for
    # ever), the error is logged, and the workflow waits until it is cancelled.
    from blitzq_django.engine import RedisBroker

    from .helpers import raw_redis

    handle = chain(tasks.add.s(1, 1), tasks.add.s(1)).enqueue()
    shapes = ["t:0", "t:1", "t:2"]
    if isinstance(broker, RedisBroker):
        raw_redis(broker).hdel(broker.keys.workflow(handle.id), *shapes)
    else:
        for name in shapes:
            del broker.workflows._flows[handle.id][name]
    run_burst(client)
    assert client.queue_stats().ready == 0 and client.queue_stats().in_flight == 0
    assert "settling its message without it" in caplog.text
    assert handle.state() == "running"
    assert handle.cancel() == "running"


def test_a_single_step_and_an_unknown_workflow(client: Client, tasks: Any) -> None:
    handle = tasks.add.s(2, 3).enqueue()
    run_burst(client)
    assert handle.result(timeout=5) == 5
    info = handle.inspect()
    assert info is not None and info.root.kind == "task" and info.root.path == ""
    unknown = client.workflows.handle("nope")
    assert unknown.state() == "" and unknown.inspect() is None
    assert unknown.cancel() == ""
    with pytest.raises(ResultTimeout, match="unknown"):
        unknown.result(timeout=0.05)
