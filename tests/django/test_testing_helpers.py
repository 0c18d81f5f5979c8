"""The test helpers of blitzq_django.testing, used exactly as a project's tests use them:
the pytest fixtures of the installed plugin, and BlitzqTestMixin on a TestCase."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django.test import TestCase, TransactionTestCase

from blitzq_django import conf, transactions
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine import TaskFailed, current_task
from blitzq_django.testing import Blitzq, BlitzqTestMixin
from testproject.shop.models import Order

from ..support.waiting import wait_until

# -- the tasks of these tests --------------------------------------------------------------

calls: list[tuple[str, Any]] = []


@blitzq_task
def add(a: int, b: int) -> int:
    return a + b


@blitzq_task(queue="emails")
def send_email(to: str, *, subject: str = "") -> str:
    calls.append(("send_email", to))
    return f"sent to {to}"


@blitzq_task
def place_order(reference: str, amount_cents: int) -> int:
    """Writes a row, then enqueues a follow-up task: a chain drain() runs to the end."""
    order = Order.objects.create(reference=reference, amount_cents=amount_cents)
    send_email.enqueue(f"{reference}@example.com", subject="thanks")
    return order.pk


@blitzq_task
def mark_paid(reference: str) -> str:
    """Reads a row the test wrote (uncommitted inside TestCase) and updates it."""
    Order.objects.filter(reference=reference).update(status="paid")
    return Order.objects.get(reference=reference).status


class FlakyError(Exception):
    pass


@blitzq_task(retries=3, initial_delay=60, jitter=False)
def flaky(fail_times: int) -> int:
    """Fails its first ``fail_times`` attempts; the back-off (60 s) is never waited for."""
    attempt = current_task().attempt  # type: ignore[union-attr]
    if attempt <= fail_times:
        raise FlakyError(f"attempt {attempt}")
    return attempt


@blitzq_task(retries=2, initial_delay=60)
def always_fails() -> None:
    raise FlakyError("no luck")


@blitzq_task
async def async_double(x: int) -> int:
    return 2 * x


hooked: list[tuple[str, str]] = []


@blitzq_task(retries=1, initial_delay=60,
             on_failure=lambda record: hooked.append(("failure", record.state)),
             on_dead_letter=lambda letter: hooked.append(("dead_letter", letter.reason)))
def hooked_failure() -> None:
    raise FlakyError("hook me")


@blitzq_task(store_result=False)
def unkept(x: int) -> int:
    return x + 1


@blitzq_task(retries=1, initial_delay=60, dead_letter=False)
def gives_up() -> None:
    raise FlakyError("given up")


# -- pytest style ---------------------------------------------------------------------------


def test_plugin_is_loaded_through_its_entry_point(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("blitzq_django")


def test_enqueues_are_recorded_not_sent(blitzq: Blitzq) -> None:
    # testproject's BLITZQ says Redis; under the fixture the process client is in memory.
    assert conf.get_client().broker is blitzq.broker
    add.enqueue(1, 2)
    send_email.options(delay=3600, priority="high").enqueue("a@example.com", subject="hi")
    add.enqueue_many([(3, 4), (5, 6)])

    assert [m.task for m in blitzq.enqueued()] == [add.name, send_email.name, add.name,
                                                   add.name]
    assert [m.args for m in blitzq.enqueued(add)] == [(1, 2), (3, 4), (5, 6)]
    blitzq.assert_enqueued(add, 3, 4)
    blitzq.assert_enqueued(add)  # with any arguments
    message = blitzq.assert_enqueued(send_email, "a@example.com", subject="hi")
    assert message.queue == "emails"
    assert message.options["priority"] == "high"
    assert message.eta is not None
    assert blitzq.enqueued(queue="emails") == [message]
    blitzq.assert_not_enqueued(place_order)
    with pytest.raises(AssertionError, match=r"enqueued 3 time\(s\)"):
        blitzq.assert_enqueued(add, 7, 8)
    with pytest.raises(AssertionError, match="was not enqueued"):
        blitzq.assert_enqueued(place_order)
    with pytest.raises(AssertionError, match="expected nothing enqueued"):
        blitzq.assert_not_enqueued()
    blitzq.clear()
    blitzq.assert_not_enqueued()
    assert blitzq.drain().finished == 0  # clear() dropped the queued messages too


def test_settings_still_apply_under_the_fixture(blitzq: Blitzq, settings: Any) -> None:
    settings.BLITZQ = {"QUEUES": ["default", "math"], "ROUTES": {f"{add.name}": "math"}}
    add.enqueue(1, 1)
    assert blitzq.assert_enqueued(add, 1, 1).queue == "math"
    assert blitzq.drain().succeeded == 1


@pytest.mark.django_db
def test_drain_runs_a_chain_of_tasks(blitzq: Blitzq) -> None:
    calls.clear()
    handle = place_order.enqueue("A-1", 500)
    blitzq.assert_not_enqueued(send_email)  # not yet: nothing ran

    result = blitzq.drain()

    assert result.succeeded == 2 and result.failures == []
    assert Order.objects.get(reference="A-1").pk == handle.result()
    blitzq.assert_enqueued(send_email, "A-1@example.com", subject="thanks")
    assert calls == [("send_email", "A-1@example.com")]


def test_drain_retries_a_failing_task_without_waiting_its_back_off(blitzq: Blitzq) -> None:
    ok = flaky.enqueue(2)
    bad = always_fails.enqueue()

    result = blitzq.drain(timeout=20)

    assert ok.result() == 3
    # A final failure is dead-lettered (the default; dead_letter=False: failed).
    assert (result.succeeded, result.retried, result.dead_lettered) == (1, 2 + 2, 1)
    [failure] = result.failures
    assert (failure.task, failure.state, failure.error_type, failure.attempt) == (
        always_fails.name, "dead_lettered", "FlakyError", 3)
    with pytest.raises(TaskFailed, match="no luck"):
        bad.result()


def test_drain_can_leave_messages_that_are_not_due(blitzq: Blitzq) -> None:
    later = add.options(delay=3600).enqueue(2, 2)
    now = add.enqueue(1, 1)
    assert blitzq.drain(run_scheduled=False).succeeded == 1
    assert now.result() == 2
    assert later.inspect().state == "scheduled"  # type: ignore[union-attr]
    assert blitzq.drain().succeeded == 1
    assert later.result() == 4


def test_drain_stops_after_max_tasks(blitzq: Blitzq) -> None:
    handles = [add.enqueue(i, i) for i in range(3)]
    assert blitzq.drain(max_tasks=1).succeeded == 1
    assert blitzq.drain().succeeded == 2
    assert [h.result() for h in handles] == [0, 2, 4]


def test_drain_runs_async_tasks(blitzq: Blitzq) -> None:
    handle = async_double.enqueue(21)
    assert blitzq.drain().succeeded == 1
    assert handle.result() == 42


def test_drain_needs_an_active_helper() -> None:
    helper = Blitzq()
    with pytest.raises(RuntimeError, match="not active"):
        helper.drain()


@pytest.mark.django_db
def test_eager_runs_each_enqueue_at_once(blitzq_eager: Blitzq) -> None:
    calls.clear()
    handle = place_order.enqueue("E-1", 100)
    # Ran in the caller, with the task it enqueued, before enqueue() returned.
    assert handle.result() == Order.objects.get(reference="E-1").pk
    assert calls == [("send_email", "E-1@example.com")]
    blitzq_eager.assert_enqueued(send_email, "E-1@example.com", subject="thanks")
    assert async_double.enqueue(5).result() == 10
    assert flaky.enqueue(1).result() == 2  # retried at once, current_task() as usual
    assert blitzq_eager.drain().finished == 0  # nothing left on the queues


def test_eager_raises_failures_unless_told_otherwise(blitzq_eager: Blitzq) -> None:
    with pytest.raises(FlakyError, match="no luck"):
        always_fails.enqueue()
    blitzq_eager.propagate = False
    handle = always_fails.enqueue()
    with pytest.raises(TaskFailed, match="no luck"):
        handle.result()
    assert handle.record().attempt == 3  # its two retries ran


@pytest.mark.parametrize("eager", [False, True])
def test_failure_hooks_run_in_both_modes(blitzq: Blitzq, eager: bool) -> None:
    hooked.clear()
    blitzq.eager, blitzq.propagate = eager, False
    handle = hooked_failure.enqueue()
    if not eager:
        blitzq.drain()
    # The worker calls its hooks on its pool after the settlement is written.
    wait_until(lambda: len(hooked) == 3, timeout=10, message="the failure hooks")
    assert hooked == [("failure", "retrying"), ("failure", "dead_lettered"),
                      ("dead_letter", "retries exhausted")]
    record = handle.record()
    assert (record.state, record.attempt, record.error_type) == ("dead_lettered", 2,
                                                                 "FlakyError")
    assert "hook me" in (record.traceback or "")


@pytest.mark.parametrize("task", [always_fails, gives_up])
def test_eager_settles_as_a_worker_does(blitzq: Blitzq, task: Any) -> None:
    """Eager runs and drain() end in the same record: one set of outcome rules."""
    blitzq.propagate = False
    drained = task.enqueue()
    blitzq.drain()
    blitzq.eager = True
    eager = task.enqueue()
    fields = ("state", "attempt", "reason", "error_type", "error_message")
    assert [getattr(eager.record(), f) for f in fields] == \
        [getattr(drained.record(), f) for f in fields]


def test_eager_keeps_the_result_of_a_task_that_stores_none(blitzq_eager: Blitzq) -> None:
    assert unkept.enqueue(1).result() == 2  # the handle is how a test reads the outcome


def test_eager_keeps_idempotency_keys(blitzq_eager: Blitzq) -> None:
    first = add.options(idempotency_key="k1").enqueue(1, 2)
    second = add.options(idempotency_key="k1").enqueue(1, 2)
    assert first.id == second.id and second.result() == 3


def test_eager_can_be_switched_on_in_a_test(blitzq: Blitzq) -> None:
    queued = add.enqueue(1, 1)
    blitzq.eager = True
    assert add.enqueue(2, 2).result() == 4
    assert queued.inspect() is None  # still queued: drain() runs it
    assert blitzq.drain().succeeded == 1 and queued.result() == 2


@pytest.mark.django_db
def test_enqueue_on_commit_with_pytest_django(blitzq: Blitzq,
                                              django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        Order.objects.create(reference="C-1", amount_cents=1)
        mark_paid.enqueue_on_commit("C-1")
        blitzq.assert_not_enqueued(mark_paid)  # not before the commit
    blitzq.assert_enqueued(mark_paid, "C-1")
    assert blitzq.drain().succeeded == 1
    assert Order.objects.get(reference="C-1").status == "paid"


def test_helper_restores_the_process_client(settings: Any) -> None:
    settings.BLITZQ = {"BROKER": "memory"}
    before = conf.get_client()
    with Blitzq() as helper:
        assert conf.get_client().broker is helper.broker
    assert conf.broker_override is None
    assert conf.get_client().broker is not helper.broker
    assert type(conf.get_client().broker) is type(before.broker)


# -- TestCase style -------------------------------------------------------------------------


class OrderTasksTests(BlitzqTestMixin, TestCase):
    def test_on_commit_enqueue_is_captured(self) -> None:
        with self.captureOnCommitCallbacks() as callbacks:
            Order.objects.create(reference="T-1", amount_cents=1)
            mark_paid.enqueue_on_commit("T-1")
        self.assertEqual(len(callbacks), 1)
        self.assertTaskNotEnqueued(mark_paid)  # TestCase never commits: not run yet

    def test_on_commit_enqueue_then_drain(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            Order.objects.create(reference="T-2", amount_cents=1)
            handle = mark_paid.enqueue_on_commit("T-2")
        message = self.assertTaskEnqueued(mark_paid, "T-2")
        self.assertEqual(message.id, handle.id)
        # The worker's task thread shares this test's connection: it sees the row this
        # test wrote inside its (never committed) transaction.
        result = self.blitzq.drain()
        self.assertEqual(result.succeeded, 1)
        self.assertEqual(handle.result(), "paid")
        self.assertEqual(Order.objects.get(reference="T-2").status, "paid")

    def test_module_level_helper_functions(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            transactions.enqueue_on_commit(add, (4, 5))
        self.assertTaskEnqueued(add, 4, 5)
        with self.assertRaises(AssertionError):
            self.assertTaskEnqueued(add, 5, 4)

    def test_chain_and_retries(self) -> None:
        place_order.enqueue("T-3", 300)
        flaky.enqueue(1)
        result = self.blitzq.drain()
        self.assertEqual((result.succeeded, result.retried), (3, 1))
        self.assertTaskEnqueued(send_email, "T-3@example.com", subject="thanks")
        self.assertTrue(Order.objects.filter(reference="T-3").exists())


class EagerOrderTasksTests(BlitzqTestMixin, TestCase):
    blitzq_eager = True

    def test_on_commit_runs_at_the_commit(self) -> None:
        Order.objects.create(reference="T-4", amount_cents=1)
        with self.captureOnCommitCallbacks(execute=True):
            handle = mark_paid.enqueue_on_commit("T-4")
            self.assertIsNone(handle.inspect())  # not before the commit
        self.assertEqual(handle.result(), "paid")
        self.assertEqual(Order.objects.get(reference="T-4").status, "paid")


class OwnConnectionsTests(BlitzqTestMixin, TransactionTestCase):
    def test_drain_without_sharing_the_connection(self) -> None:
        Order.objects.create(reference="T-5", amount_cents=1)  # committed: visible
        handle = mark_paid.enqueue("T-5")
        self.assertEqual(self.blitzq.drain(share_db=False).succeeded, 1)
        self.assertEqual(handle.result(), "paid")
