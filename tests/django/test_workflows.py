"""Workflows of @blitzq_task tasks (def and async def): .s/.si, chain/group/chord from
blitzq_django, enqueue_on_commit, drained by the test helper's worker."""

from __future__ import annotations

import pytest
from django.db import transaction

import blitzq_django
from blitzq_django import blitzq_task, chain, chord, group
from blitzq_django.testing import Blitzq

pytestmark = pytest.mark.django_db(transaction=True)


@blitzq_task
def wf_add(a: int, b: int) -> int:
    return a + b


@blitzq_task
async def wf_double(x: int) -> int:
    return 2 * x


@blitzq_task
def wf_total(values: list[int]) -> int:
    return sum(values)


def test_def_and_async_def_tasks_make_signatures(blitzq: Blitzq) -> None:
    flow = chord(group(chain(wf_add.s(i, 1), wf_double.s()) for i in range(5)),
                 wf_total.s())
    handle = flow.enqueue()
    blitzq.drain()
    assert handle.result(timeout=5) == sum(2 * (i + 1) for i in range(5))
    assert wf_add.si(1, 2).immutable and not wf_double.s().immutable


def test_the_module_and_the_package_name_the_same(blitzq: Blitzq) -> None:
    from blitzq_django import workflows
    assert workflows.chain is blitzq_django.chain is chain
    assert workflows.WorkflowFailed is blitzq_django.WorkflowFailed


def test_enqueue_on_commit(blitzq: Blitzq) -> None:
    with transaction.atomic():
        handle = chain(wf_add.s(1, 2), wf_double.s()).enqueue_on_commit()
        assert handle.state() == ""  # not before the commit
    assert handle.state() == "running"
    blitzq.drain()
    assert handle.result(timeout=5) == 6
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled = chain(wf_add.s(1, 2)).enqueue_on_commit()
        raise RuntimeError("rolled back")
    assert rolled.state() == ""
    outside = chain(wf_add.s(2, 2)).enqueue_on_commit()  # autocommit: at once
    assert outside.state() == "running"


def test_a_bad_argument_fails_at_enqueue_on_commit(blitzq: Blitzq) -> None:
    with pytest.raises(TypeError), transaction.atomic():
        chain(wf_add.s(1, 2, 3)).enqueue_on_commit()


