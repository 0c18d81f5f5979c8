"""Turn what one attempt did into how its delivery settles (pure, no I/O)."""

from __future__ import annotations

import math
import traceback as tb
from dataclasses import dataclass, field, replace
from typing import Any

from ..brokers.base import Delivery, Settlement
from ..core import deadletter as reasons
from ..core.deadletter import DeadLetter, malformed_id
from ..core.events import peek
from ..core.message import DEFAULT_MAX_MESSAGE_SIZE, Message, encode
from ..core.record import DEFAULT_MAX_RESULT_SIZE, Record, encode_success
from ..core.running import entry as running_entry
from ..core.states import RecordState, SettleKind
from ..core.task import TaskSpec
from ..errors import MAX_RETRY_DELAY_S, ResultTooLarge

# Bound once: one or two of them go into every settlement.
DONE, RETRY, DEAD = SettleKind.DONE, SettleKind.RETRY, SettleKind.DEAD
REQUEUE, MARK_RUNNING = SettleKind.REQUEUE, SettleKind.MARK_RUNNING
QUEUED, SCHEDULED, RUNNING = RecordState.QUEUED, RecordState.SCHEDULED, RecordState.RUNNING
RETRYING, SUCCEEDED, FAILED = RecordState.RETRYING, RecordState.SUCCEEDED, RecordState.FAILED
DEAD_LETTERED, CANCELLED = RecordState.DEAD_LETTERED, RecordState.CANCELLED
EXPIRED = RecordState.EXPIRED

#: A dead letter keeps at most this much of an entry too large to be a message: enough
#: to see what it was, not enough to fill Redis with what was refused for its size.
KEPT_PAYLOAD_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class SettleOptions:
    """How a worker settles: what it needs to know from the client, and its name."""

    store_results: bool
    track_state: bool
    worker: str
    max_result_size: int = DEFAULT_MAX_RESULT_SIZE
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    events: bool = False  # the broker writes events (core/events.py)
    #: an attempt's "started" event rides on its outcome's settlement (no running record
    #: is written at its start); the worker clears it if it went on its own (derived)
    start_with_outcome: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "start_with_outcome", self.events and not self.track_state)


def describe(error: BaseException) -> str:
    """``str(error)``, or a stand-in when even that fails: settling must never raise."""
    try:
        text = str(error)
        if isinstance(text, str):
            return text
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        pass
    try:
        return f"<unprintable {_type_name(error)}: {object.__repr__(error)}>"
    except Exception:  # noqa: BLE001
        return "<unprintable exception>"


def _type_name(error: BaseException) -> str:
    try:
        return str(type(error).__qualname__)
    except Exception:  # noqa: BLE001 - a class with a hostile metaclass
        return "BaseException"


def _trace(error: BaseException) -> str:
    try:
        return "".join(tb.format_exception(error))
    except Exception:  # noqa: BLE001
        return f"{_type_name(error)}: {describe(error)} (traceback could not be formatted)"


def _due(finished_ms: int, delay: float) -> int:
    # A Retry(delay=) or a backoff that is not a sane number still gets a due time Redis
    # and msgpack accept: the longest delay allowed.
    if not (isinstance(delay, int | float) and math.isfinite(delay)):
        delay = MAX_RETRY_DELAY_S
    return finished_ms + int(min(max(delay, 0.0), MAX_RETRY_DELAY_S) * 1000)


def _store(spec: TaskSpec | None, options: SettleOptions) -> bool:
    if spec is None or spec.store_result is None:
        return options.store_results
    return spec.store_result


def succeeded(delivery: Delivery, message: Message, spec: TaskSpec, value: Any,
              started_ms: int, finished_ms: int, options: SettleOptions) -> Settlement:
    if not _store(spec, options):
        return Settlement(delivery, DONE, message.id, state=SUCCEEDED,
                          unique_key=message.unique_key, task=message.task,
                          attempt=message.attempt, duration_ms=finished_ms - started_ms,
                          started_ms=started_ms if options.start_with_outcome else 0)
    try:
        data = encode_success(message.id, message.task, message.queue, message.attempt, value,
                              message.created_ms, started_ms, finished_ms, options.worker)
    except (TypeError, ValueError, OverflowError) as exc:
        error: BaseException = TypeError(
            f"task result of type {type(value).__qualname__} cannot be stored: {describe(exc)}")
        return failed(delivery, message, spec, error, started_ms, finished_ms, options, retry=False)
    if len(data) > options.max_result_size:
        error = ResultTooLarge(f"task result is {len(data)} bytes encoded, over max_result_size "
                               f"({options.max_result_size} bytes)")
        return failed(delivery, message, spec, error, started_ms, finished_ms, options, retry=False)
    return Settlement(delivery, DONE, message.id, data, True, state=SUCCEEDED,
                      unique_key=message.unique_key, task=message.task, attempt=message.attempt,
                      duration_ms=finished_ms - started_ms,
                      started_ms=started_ms if options.start_with_outcome else 0)


def failed(delivery: Delivery, message: Message, spec: TaskSpec, error: BaseException,
           started_ms: int, finished_ms: int, options: SettleOptions,
           retry: bool = True) -> Settlement:
    retry_policy = spec.retry.with_overrides(message.policy)
    trace = _trace(error)
    store = _store(spec, options) or options.track_state
    event: dict[str, Any] = {"unique_key": message.unique_key, "task": message.task,
             "attempt": message.attempt, "duration_ms": finished_ms - started_ms,
             "error_type": _type_name(error),
             "started_ms": started_ms if options.start_with_outcome else 0}
    if retry and retry_policy.should_retry(message.attempt, error):
        due = _due(finished_ms, retry_policy.delay_for(message.attempt, error))
        failure = _error_record(message, RETRYING, error, trace, started_ms, finished_ms,
                                options)
        record = failure.to_bytes() if options.track_state else b""
        return Settlement(delivery, RETRY, message.id, record, False,
                          encode(message.next_attempt(due), 1 << 62), due, RETRYING,
                          failure=failure, **event)
    if not spec.dead_letter:
        failure = _error_record(message, FAILED, error, trace, started_ms, finished_ms,
                                options)
        record = failure.to_bytes() if store else b""
        return Settlement(delivery, DONE, message.id, record, bool(record), state=FAILED,
                          failure=failure, **event)
    reason = reasons.RETRIES_EXHAUSTED if retry_policy.retryable(error) else reasons.NOT_RETRYABLE
    letter = DeadLetter(id=message.id, queue=message.queue, task=message.task, reason=reason,
                        payload=delivery.payload or b"", attempt=message.attempt,
                        delivery_count=delivery.delivery_count,
                        error_type=_type_name(error), error_message=describe(error),
                        traceback=trace, dead_ms=finished_ms)
    failure = _error_record(message, DEAD_LETTERED, error, trace, started_ms, finished_ms,
                            options, reason)
    record = failure.to_bytes() if store else b""
    return Settlement(delivery, DEAD, message.id, record, bool(record), letter.to_bytes(),
                      letter.dead_ms, DEAD_LETTERED, failure=failure, letter=letter,
                      **event)


def _error_record(message: Message, state: RecordState, error: BaseException, trace: str,
                  started_ms: int, finished_ms: int, options: SettleOptions,
                  reason: str | None = None) -> Record:
    return Record(id=message.id, task=message.task, queue=message.queue, state=state,
                  attempt=message.attempt, error_type=_type_name(error),
                  error_message=describe(error), traceback=trace, reason=reason,
                  created_ms=message.created_ms, started_ms=started_ms,
                  finished_ms=finished_ms, worker=options.worker)


def rejected(delivery: Delivery, reason: str, now_ms: int, options: SettleOptions,
             message: Message | None = None, detail: str = "") -> Settlement:
    """Dead-letter a delivery that never ran: malformed, unknown task, too many deliveries."""
    payload = delivery.payload or b""
    size = None
    if len(payload) > options.max_message_size:
        payload, size = payload[:KEPT_PAYLOAD_BYTES], len(payload)
    message_id = message.id if message else malformed_id(payload, delivery.entry_id)
    letter = DeadLetter(id=message_id, queue=delivery.queue,
                        task=message.task if message else None, reason=reason,
                        payload=payload, payload_size=size,
                        attempt=message.attempt if message else 0,
                        delivery_count=delivery.delivery_count, error_message=detail or reason,
                        dead_ms=now_ms)
    record = b""
    if message is not None and (options.store_results or options.track_state):
        record = Record(id=message.id, task=message.task, queue=message.queue,
                        state=DEAD_LETTERED, attempt=message.attempt, reason=reason,
                        error_message=detail or reason, created_ms=message.created_ms,
                        finished_ms=now_ms, worker=options.worker).to_bytes()
    return Settlement(delivery, DEAD, message_id, record, bool(record), letter.to_bytes(),
                      letter.dead_ms, DEAD_LETTERED, letter=letter,
                      unique_key=message.unique_key if message else None,
                      task=message.task if message else "",
                      attempt=message.attempt if message else 0)


def running(delivery: Delivery, message: Message, started_ms: int,
            options: SettleOptions) -> Settlement:
    record = Record(id=message.id, task=message.task, queue=message.queue, state=RUNNING,
                    attempt=message.attempt, created_ms=message.created_ms,
                    started_ms=started_ms, worker=options.worker)
    return Settlement(delivery, MARK_RUNNING, message.id, record.to_bytes(), state=RUNNING,
                      task=message.task, attempt=message.attempt, started_ms=started_ms)


def started(delivery: Delivery, message: Message, started_ms: int, options: SettleOptions,
            index_ttl_ms: int) -> Settlement:
    """What an attempt still running past INDEX_DELAY_S writes on its own (flusher.py),
    ownership-checked like a running record: its entry in the worker's running index
    (core/running.py), kept ``index_ttl_ms``, and its "started" event unless that is
    written otherwise (events off, or with its running record under track_state)."""
    return Settlement(delivery, MARK_RUNNING, message.id,
                      body=running_entry(message.task, message.attempt, started_ms,
                                         message.created_ms),
                      due_ms=index_ttl_ms, state=RUNNING, task=message.task,
                      attempt=message.attempt,
                      started_ms=started_ms if options.start_with_outcome else 0)


def requeued(delivery: Delivery, message: Message | None, options: SettleOptions) -> Settlement:
    """Back on the queue at once (shutdown). Under track_state its record says queued again."""
    if message is None:  # not decoded: named by its head (or as its dead letter would be)
        head = peek(delivery.payload)
        return Settlement(delivery, REQUEUE,
                          head[0] if head else malformed_id(delivery.payload, delivery.entry_id),
                          body=delivery.payload or b"", state=QUEUED,
                          task=head[1] if head else "")
    record = b""
    if options.track_state:
        record = Record(id=message.id, task=message.task, queue=message.queue,
                        state=QUEUED, attempt=message.attempt,
                        created_ms=message.created_ms).to_bytes()
    return Settlement(delivery, REQUEUE, message.id, record, body=delivery.payload or b"",
                      state=QUEUED, unique_key=message.unique_key, task=message.task,
                      attempt=message.attempt)


def deferred(delivery: Delivery, message: Message, due_ms: int,
             options: SettleOptions) -> Settlement:
    """Over its rate limit: acked and back on the schedule, due at ``due_ms``, as the same
    attempt (a deferral uses no attempt). Under track_state its record says scheduled."""
    try:
        body = encode(replace(message, eta_ms=due_ms), 1 << 62)
    except Exception:  # noqa: BLE001 - it was decoded, so it encodes; if not, the bytes as is
        body = delivery.payload or b""
    record = b""
    if options.track_state:
        record = Record(id=message.id, task=message.task, queue=message.queue,
                        state=SCHEDULED, attempt=message.attempt,
                        created_ms=message.created_ms).to_bytes()
    return Settlement(delivery, RETRY, message.id, record, False, body, due_ms,
                      SCHEDULED, task=message.task, attempt=message.attempt)


def cancelled(delivery: Delivery, message: Message, spec: TaskSpec | None, finished_ms: int,
              options: SettleOptions, started_ms: int = 0) -> Settlement:
    """Cancelled (client.cancel): revoked before it started (``started_ms`` 0), or an
    ``async def`` attempt interrupted. Acked; recorded cancelled, waiters notified."""
    record = b""
    if _store(spec, options) or options.track_state:
        record = Record(id=message.id, task=message.task, queue=message.queue,
                        state=CANCELLED, attempt=message.attempt,
                        created_ms=message.created_ms, started_ms=started_ms or None,
                        finished_ms=finished_ms, worker=options.worker).to_bytes()
    return Settlement(delivery, DONE, message.id, record, bool(record), state=CANCELLED,
                      unique_key=message.unique_key, task=message.task,
                      attempt=message.attempt,
                      duration_ms=finished_ms - started_ms if started_ms else None,
                      started_ms=started_ms if options.start_with_outcome else 0)


def expired(delivery: Delivery, message: Message, spec: TaskSpec | None, now_ms: int,
            options: SettleOptions) -> Settlement:
    """Not started before its ``expires_ms``: dropped without running. Acked; recorded
    expired, waiters notified."""
    record = b""
    if _store(spec, options) or options.track_state:
        late = now_ms - (message.expires_ms or now_ms)
        record = Record(id=message.id, task=message.task, queue=message.queue,
                        state=EXPIRED, attempt=message.attempt,
                        error_message=f"not started before it expired ({late} ms ago)",
                        created_ms=message.created_ms, finished_ms=now_ms,
                        worker=options.worker).to_bytes()
    return Settlement(delivery, DONE, message.id, record, bool(record), state=EXPIRED,
                      unique_key=message.unique_key, task=message.task,
                      attempt=message.attempt)


def unsettleable(delivery: Delivery, message: Message | None, detail: str, now_ms: int,
                 options: SettleOptions) -> Settlement:
    """The last resort when the real settlement could not be built or was refused: a dead
    letter made of plain strings, so the message still ends somewhere and is not lost."""
    return rejected(delivery, reasons.UNSETTLEABLE, now_ms, options, message,
                    f"{reasons.UNSETTLEABLE}: {detail}")
