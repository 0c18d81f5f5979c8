"""The one exception tree of the engine.

::

    BlitzqError
    ├── ConfigurationError        bad setting or option (Django re-raises as ImproperlyConfigured)
    ├── MessageError              a message cannot be built or read
    │   ├── MessageEncodeError    (also a TypeError) an argument msgpack cannot carry
    │   ├── MessageTooLarge       (also a ValueError) encoded message over max_message_size
    │   └── MessageDecodeError    bytes from the broker that are not a message
    ├── BrokerError               the broker failed to do what was asked
    │   ├── BrokerUnavailable     cannot reach Redis (names the URL, never the password)
    │   └── QueueBusy             purge refused: workers hold messages of the queue
    ├── ResultTooLarge            (also a ValueError) a task result over max_result_size
    ├── TaskNotRegistered         a task name with no registered function
    ├── ResultTimeout             (also a TimeoutError) get_result gave up waiting
    ├── TimeLimitExceeded         (also a TimeoutError) raised inside a `def` task's thread
    │                             at its timeout (the task may catch it to clean up)
    ├── TaskFailed                the task ended without a result (``handle.result()``):
    │   │                         failed or dead-lettered; ``.record`` holds the error
    │   ├── TaskCancelled         it was cancelled, before it ran or while running
    │   └── TaskExpired           it did not start before its ``expires`` time
    └── WorkflowFailed            a workflow ended without a result; ``.failure`` says
        │                         which step failed and how (docs/workflows.md)
        └── WorkflowCancelled     it was cancelled

Control flow, raised by task code rather than by the engine:

    Retry                         ask for another attempt after ``delay`` seconds
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.record import Record

#: The longest delay, timeout or backoff anything may ask for (ten years): past it a due
#: time stops being a plan and starts overflowing where Redis and msgpack keep it.
MAX_SECONDS = 10 * 365 * 86_400
MAX_RETRY_DELAY_S = MAX_SECONDS


class BlitzqError(Exception):
    """Base class of every error the engine raises on purpose."""


class ConfigurationError(BlitzqError):
    pass


class MessageError(BlitzqError):
    pass


class MessageEncodeError(MessageError, TypeError):
    pass


class MessageTooLarge(MessageError, ValueError):
    pass


class MessageDecodeError(MessageError):
    pass


class BrokerError(BlitzqError):
    pass


class BrokerUnavailable(BrokerError):
    pass


class ResultTooLarge(BlitzqError, ValueError):
    pass


class QueueBusy(BrokerError):
    pass


class TaskNotRegistered(BlitzqError, LookupError):
    pass


class ResultTimeout(BlitzqError, TimeoutError):
    pass


class TimeLimitExceeded(BlitzqError, TimeoutError):
    """Raised inside the thread of a `def` task that runs past its ``timeout``
    (engine/worker/timelimits.py). Catch it to clean up; the attempt fails with it
    whatever the task does then, and is retried per the task's policy like any
    TimeoutError. It is raised between two bytecodes: a thread blocked in one C call
    (``time.sleep``, a read without a timeout) gets it when the call returns.
    """

    def __init__(self, *args: object) -> None:
        # Raised in a thread, it is made without arguments.
        super().__init__(*(args or ("task exceeded its time limit",)))


class TaskFailed(BlitzqError):
    """The task ended without a result: failed, dead-lettered, cancelled (TaskCancelled) or
    expired (TaskExpired)."""

    def __init__(self, record: Record) -> None:
        super().__init__(f"task {record.task} {record.id} {record.state}: "
                         f"{record.error_type}: {record.error_message}")
        self.record = record


class TaskCancelled(TaskFailed):
    """The task was cancelled (``cancel()``): before it ran, or interrupted running."""

    def __init__(self, record: Record) -> None:
        super().__init__(record)
        self.args = (f"task {record.task} {record.id} was cancelled",)


class TaskExpired(TaskFailed):
    """The task did not start before its ``expires`` time: it was dropped without running."""

    def __init__(self, record: Record) -> None:
        super().__init__(record)
        self.args = (f"task {record.task} {record.id} expired before it started",)


class WorkflowFailed(BlitzqError):
    """A workflow failed (``WorkflowHandle.result()``): ``failure`` is what its failed step
    passed on (workflow, node, path, task, id, state, error_type, error_message)."""

    def __init__(self, workflow_id: str, state: str, failure: dict[str, Any] | None) -> None:
        what = ""
        if failure:
            what = (f": step {failure.get('path')!r} ({failure.get('task')}, "
                    f"{failure.get('id')}) {failure.get('state')}: "
                    f"{failure.get('error_type')}: {failure.get('error_message')}")
        super().__init__(f"workflow {workflow_id} {state}{what}")
        self.workflow_id = workflow_id
        self.state = state
        self.failure = failure


class WorkflowCancelled(WorkflowFailed):
    """The workflow was cancelled (``cancel()``)."""


class Retry(Exception):  # noqa: N818 - reads as "raise Retry(...)"
    """Raised by a task to be attempted again after ``delay`` seconds.

    It counts toward the task's retry limit, so a task cannot retry forever.
    ``delay=None`` uses the task's backoff policy.
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int | float)
                                  or not math.isfinite(delay)
                                  or delay > MAX_RETRY_DELAY_S):
            # Refused here, in the task, so the attempt fails with this message instead of
            # leaving a due time nothing can store. (A negative delay means "now".)
            raise ValueError(f"Retry(delay={delay!r}): delay must be a finite number of "
                             f"seconds up to {MAX_RETRY_DELAY_S} (or None for the task's "
                             "backoff)")
        super().__init__(reason or "retry requested")
        self.delay = delay
        self.reason = reason
