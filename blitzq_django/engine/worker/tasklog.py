"""The log line of each task outcome (docs/observability.md).

Loggers:

- ``blitzq.task``: every failure. WARNING for a failed attempt that will be retried,
  ERROR for a final failure, a dead letter (after its attempts, or without running:
  unknown task, malformed entry, too many deliveries) and an outcome that could not be
  settled; WARNING for a message dropped because it expired before it started. A
  failed attempt's record carries ``exc_info`` (the exception itself, so Sentry's
  logging integration and Django's ``AdminEmailHandler`` get its traceback).
- ``blitzq.task.succeeded``: one INFO line per success. Its level is WARNING unless the
  project sets one, so it is off by default. A worker reads that level when it starts
  and once a second (``successes_on``), not at each success: asking the logger costs
  a Python call, about 1 % of what a no-op task costs; reading the answer, nothing.

Every line carries the task's fields as ``extra`` attributes of the record (JSON logs
print them as keys; Sentry shows them as "extra"): ``task_name``, ``task_id``,
``queue``, ``attempt``, ``max_attempts``, ``duration_ms``, ``outcome`` (the record
state: retrying, failed, dead_lettered, succeeded, expired), ``worker``, and where they
apply ``error_type``, ``reason`` (of a dead letter), ``retry_in_s``, ``delivery_count``.

When ``sentry_sdk`` is already imported (the project initialised it), each failure is
logged inside an isolation scope tagged ``blitzq.task``, ``blitzq.task_id``,
``blitzq.queue``, ``blitzq.attempt`` and ``blitzq.outcome``, so the event Sentry's
logging integration captures carries them as tags. Nothing here imports sentry_sdk.

Logging never fails a settlement: an error raised while logging is reported by
``logging`` itself (``Handler.handleError``) or swallowed here.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..core.states import RecordState

if TYPE_CHECKING:
    from ..brokers.base import Delivery, Settlement
    from ..core.message import Message
    from ..core.task import TaskSpec
    from .inflight import Held

#: Failures of tasks (WARNING: will be retried; ERROR: final, dead-lettered).
log = logging.getLogger("blitzq.task")
#: Successes (INFO), off unless the project turns them on.
succeeded_log = logging.getLogger("blitzq.task.succeeded")
if succeeded_log.level == logging.NOTSET:
    # Off by default: a busy worker settles thousands of tasks a second, and a project
    # at INFO (runworker's default) would otherwise print each one.
    succeeded_log.setLevel(logging.WARNING)

# Bound once: a success line is written per message when they are on.
SUCCEEDED, RETRYING = RecordState.SUCCEEDED, RecordState.RETRYING
DEAD_LETTERED, EXPIRED = RecordState.DEAD_LETTERED, RecordState.EXPIRED
_FINAL: dict[str, str] = {RecordState.FAILED: "failed for good", DEAD_LETTERED: "dead-lettered"}
#: How often a worker reads the level of ``blitzq.task.succeeded`` (seconds).
SUCCESS_LEVEL_READ_S = 1.0


def successes_on() -> bool:
    """Whether success lines are on (``blitzq.task.succeeded`` at INFO or below)."""
    return succeeded_log.isEnabledFor(logging.INFO)


def _fields(message: Message, spec: TaskSpec | None, worker: str, outcome: str,
            duration_ms: int | None) -> dict[str, Any]:
    max_attempts = None
    if spec is not None:
        with contextlib.suppress(Exception):
            max_attempts = spec.retry.with_overrides(message.policy).max_attempts
    return {"task_name": message.task, "task_id": message.id, "queue": message.queue,
            "attempt": message.attempt, "max_attempts": max_attempts,
            "duration_ms": duration_ms, "outcome": outcome, "worker": worker}


def _shown(value: object) -> str:
    """Text from a message, as a log line may hold it: a task name read from Redis may
    be anything, and a line break in it would forge a log line."""
    text = str(value)
    return text if text.isprintable() else repr(text)


def _attempt(fields: dict[str, Any]) -> str:
    if fields["max_attempts"] is None:
        return f"attempt {fields['attempt']}"
    return f"attempt {fields['attempt']} of {fields['max_attempts']}"


def failed(held: Held, settlement: Settlement, error: BaseException | None, started_ms: int,
           finished_ms: int, worker: str) -> None:
    """A failed attempt (``settlement.failure`` is its record): WARNING when it will be
    retried, ERROR otherwise. ``error`` is None when the task returned a value that could
    not be stored (the record says why; nothing was raised, so there is no traceback)."""
    try:
        message, failure = held.message, settlement.failure
        fields = _fields(message, held.spec, worker, settlement.state, finished_ms - started_ms)
        fields["error_type"] = failure.error_type
        said = f"{failure.error_type}: {failure.error_message}"
        if settlement.state == RETRYING:
            level = logging.WARNING
            fields["retry_in_s"] = round(max(settlement.due_ms - finished_ms, 0) / 1000, 3)
            then = f"retrying in {fields['retry_in_s']:g} s"
        else:
            level = logging.ERROR
            then = _FINAL.get(settlement.state, settlement.state)
            if settlement.letter is not None:
                fields["reason"] = settlement.letter.reason
                then = f"{then} ({settlement.letter.reason})"
        _emit(level, "task %s [%s] failed on %s (queue %s, %d ms), %s: %s",
              (_shown(message.task), message.id, _attempt(fields), message.queue,
               fields["duration_ms"], then, said), error, fields)
    except Exception:  # noqa: BLE001 - a log line must never stop a settlement
        _internal_error()


def succeeded(held: Held, started_ms: int, finished_ms: int, worker: str) -> None:
    """INFO on ``blitzq.task.succeeded`` (called only when that logger is on)."""
    try:
        message = held.message
        fields = _fields(message, held.spec, worker, SUCCEEDED, finished_ms - started_ms)
        succeeded_log.info("task %s [%s] succeeded on %s (queue %s, %d ms)",
                           _shown(message.task), message.id, _attempt(fields), message.queue,
                           fields["duration_ms"], extra=fields)
    except Exception:  # noqa: BLE001
        _internal_error()


def rejected(delivery: Delivery, message: Message | None, spec: TaskSpec | None,
             reason: str, detail: str, worker: str) -> None:
    """ERROR: a delivery dead-lettered without running (unknown task, malformed entry,
    delivered too many times)."""
    try:
        if message is None:  # not a message at all: named by its stream entry
            fields: dict[str, Any] = {
                "task_name": None, "task_id": None, "queue": delivery.queue, "attempt": None,
                "max_attempts": None, "duration_ms": None,
                "outcome": DEAD_LETTERED, "worker": worker}
            what = f"entry {delivery.entry_id} of queue {delivery.queue}"
        else:
            fields = _fields(message, spec, worker, DEAD_LETTERED, None)
            what = (f"task {_shown(message.task)} [{message.id}] ({_attempt(fields)}, queue "
                    f"{message.queue})")
        fields["reason"] = reason
        fields["delivery_count"] = delivery.delivery_count
        _emit(logging.ERROR, "%s dead-lettered without running (%s): %s",
              (what, reason, _shown(detail or reason)), None, fields)
    except Exception:  # noqa: BLE001
        _internal_error()


def expired(held: Held, message: Message, late_ms: int, worker: str) -> None:
    """WARNING: a message dropped because it did not start before its ``expires``."""
    try:
        fields = _fields(message, held.spec, worker, EXPIRED, None)
        fields["delivery_count"] = held.delivery.delivery_count
        _emit(logging.WARNING, "task %s [%s] dropped without running (queue %s): it expired "
              "%d ms before it could start", (_shown(message.task), message.id, message.queue,
                                               late_ms), None, fields)
    except Exception:  # noqa: BLE001
        _internal_error()


def unsettleable(held: Held, error: BaseException, detail: str, worker: str) -> None:
    """ERROR: the outcome of an attempt could not be built; it is dead-lettered as text."""
    try:
        message = held.message
        fields = _fields(message, held.spec, worker, DEAD_LETTERED, None)
        fields["reason"] = "outcome could not be settled"
        _emit(logging.ERROR, "task %s [%s] (%s, queue %s): its outcome could not be built "
              "(%s): dead-lettered", (_shown(message.task), message.id, _attempt(fields),
                                      message.queue, _shown(detail)), error, fields)
    except Exception:  # noqa: BLE001
        _internal_error()


def _emit(level: int, msg: str, args: tuple[Any, ...], error: BaseException | None,
          fields: dict[str, Any]) -> None:
    if not log.isEnabledFor(level):
        return
    with _sentry_tags(fields):
        log.log(level, msg, *args, exc_info=error, extra=fields)


@contextlib.contextmanager
def _sentry_tags(fields: dict[str, Any]) -> Iterator[None]:
    """Tag what Sentry captures during the block with the task's fields, when the
    project uses sentry_sdk (already imported); else nothing."""
    sentry = sys.modules.get("sentry_sdk")
    scope_of = getattr(sentry, "isolation_scope", None) or getattr(sentry, "push_scope", None)
    if scope_of is None:
        yield
        return
    with scope_of() as scope:
        for tag, key in (("blitzq.task", "task_name"), ("blitzq.task_id", "task_id"),
                         ("blitzq.queue", "queue"), ("blitzq.attempt", "attempt"),
                         ("blitzq.outcome", "outcome")):
            if fields.get(key) is not None:
                scope.set_tag(tag, str(fields[key]))
        yield


def _internal_error() -> None:
    with contextlib.suppress(Exception):
        logging.getLogger("blitzq.worker").exception("writing a task's log line failed")


__all__ = ["SUCCESS_LEVEL_READ_S", "expired", "failed", "log", "rejected", "succeeded",
           "succeeded_log", "successes_on", "unsettleable"]
