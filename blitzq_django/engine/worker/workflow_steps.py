"""What a worker does when a workflow's step ends (docs/workflows.md): before the step's
settlement is written (and its message acknowledged), its outcome is recorded in the
workflow and what follows is enqueued. A worker killed in between leaves the message
pending: it is delivered again, and recording the same outcome again changes nothing
but enqueues the same steps again, deduplicated by their fixed ids and keys. A plain
message pays one look at its headers (``is_step``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..brokers.base import Broker, Settlement
from ..client.workflows import Ended, Launcher, arecord_outcomes, ended
from ..core.ids import now_ms
from ..core.message import Message
from ..core.record import Record
from ..core.states import SettleKind
from ..core.workflow import WORKFLOW_HEADER

#: The settlements that end a message: a step's outcome is final only with these.
FINAL_KINDS = frozenset({SettleKind.DONE, SettleKind.DEAD})


def is_step(message: Message | None, settlement: Settlement) -> bool:
    """Whether this settlement ends a workflow's step (to be recorded before it)."""
    return (message is not None and bool(message.headers)
            and WORKFLOW_HEADER in message.headers and settlement.kind in FINAL_KINDS)


def step_of(message: Message, settlement: Settlement) -> Ended | None:
    """This step's outcome, to record in its workflow (None: not a step)."""
    return ended(message, settlement.state, _record(message, settlement), now_ms())


class StepRecorder:
    """Records a batch of steps' outcomes and enqueues what follows them (the flusher
    calls it before it writes their settlements)."""

    def __init__(self, broker: Broker, launcher: Launcher) -> None:
        self._broker, self._launcher = broker, launcher

    async def __call__(self, ends: Sequence[Ended]) -> None:
        await arecord_outcomes(self._broker, self._launcher, ends)


def _record(message: Message, settlement: Settlement) -> Record | None:
    if settlement.failure is not None:
        return settlement.failure  # type: ignore[no-any-return]
    if settlement.record:
        return Record.from_bytes(settlement.record)
    letter: Any = settlement.letter
    if letter is not None:
        return Record(id=message.id, task=message.task, queue=message.queue,
                      state=settlement.state, attempt=message.attempt,
                      error_type=letter.error_type, error_message=letter.error_message,
                      reason=letter.reason, finished_ms=letter.dead_ms)
    return None
