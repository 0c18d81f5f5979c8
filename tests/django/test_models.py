"""The history model's states are the engine's record states (one vocabulary)."""

from __future__ import annotations

from blitzq_django.engine.core.states import FINAL_STATES as ENGINE_FINAL_STATES
from blitzq_django.engine.core.states import RecordState
from blitzq_django.models import FINAL_STATES, TaskState


def test_task_states_are_the_engine_record_states() -> None:
    assert [s.value for s in TaskState] == [s.value for s in RecordState]
    assert {s.value for s in FINAL_STATES} == {s.value for s in ENGINE_FINAL_STATES}
