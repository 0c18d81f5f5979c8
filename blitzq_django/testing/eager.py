"""Eager mode: each enqueue runs its task at once, in the caller, retries included
(without their delays). How each attempt settles (retry or not, failed or dead-lettered,
its record, its dead letter and reason) is decided by the worker's own pure rules,
engine/worker/outcome.py, so a test sees what production would write."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..engine import Record, TaskFailed
from ..engine.brokers.base import Delivery
from ..engine.client.context import TaskContext, _current
from ..engine.core.ids import now_ms
from ..engine.core.message import Message, encode
from ..engine.core.states import RecordState
from ..engine.core.task import TaskSpec
from ..engine.worker import outcome

log = logging.getLogger("blitzq")

WORKER = "eager"  # the worker name on eager records and task contexts
_ANY_SIZE = 1 << 62  # re-encoding a message already accepted once: no size limit
SUCCEEDED = RecordState.SUCCEEDED
RETRYING = RecordState.RETRYING
DEAD_LETTERED = RecordState.DEAD_LETTERED


def settle_options(max_result_size: int, max_message_size: int) -> outcome.SettleOptions:
    """What the outcome rules need: every outcome kept (the handle's ``result()`` is how
    a test reads it), the client's size limits."""
    return outcome.SettleOptions(store_results=True, track_state=True, worker=WORKER,
                          max_result_size=max_result_size, max_message_size=max_message_size)


def run(message: Message, spec: TaskSpec, options: outcome.SettleOptions,
        keep: Callable[[Record], None]) -> BaseException | None:
    """Every attempt of ``message``, now; its final record goes to ``keep`` (before the
    dead-letter hook runs, as a worker writes it first). Returns the error to raise when
    it did not succeed (the task's own, or TaskFailed when its result could not be
    stored), else None. Failure hooks run as a worker runs them, for each failed attempt."""
    if spec.store_result is False:  # kept all the same: see settle_options()
        spec = dataclasses.replace(spec, store_result=None)
    max_attempts = spec.retry.with_overrides(message.policy).max_attempts
    while True:
        started = now_ms()

        def context(m: Message = message) -> TaskContext:
            return TaskContext(id=m.id, name=spec.name, queue=m.queue, attempt=m.attempt,
                               max_attempts=max_attempts, delivery_count=1, worker=WORKER,
                               headers=m.headers)

        token = _current.set(context)
        try:
            value = _call(spec.func, spec.is_async, message)
            error: BaseException | None = None
        except Exception as exc:
            error = exc
        finally:
            _current.reset(token)
        finished = now_ms()
        # The dead letter's payload: the message as this attempt received it.
        delivery = Delivery(message.queue, message.id, encode(message, _ANY_SIZE))
        if error is None:
            settled = outcome.succeeded(delivery, message, spec, value, started, finished,
                                        options)
            if settled.state == SUCCEEDED:
                keep(Record.from_bytes(settled.record))
                return None
            error = TaskFailed(settled.failure)  # its result could not be stored
        else:
            settled = outcome.failed(delivery, message, spec, error, started, finished,
                                     options)
        _hook(spec.on_failure, settled.failure)
        if settled.state == RETRYING:
            message = message.next_attempt(finished)  # at once: no back-off in eager mode
            continue
        keep(settled.failure)
        if settled.state == DEAD_LETTERED:
            _hook(spec.on_dead_letter, settled.letter)
        return error


def _hook(hook: Callable[[Any], Any] | None, value: Any) -> None:
    """A task's failure hook, in eager mode: its errors are logged, as a worker does."""
    if hook is None:
        return
    try:
        if asyncio.iscoroutinefunction(hook):
            _run_coroutine(hook(value))
        else:
            hook(value)
    except Exception:
        log.exception("failure hook raised (eager run)")


def _call(func: Callable[..., Any], is_async: bool, message: Message) -> Any:
    if not is_async:
        return func(*message.args, **message.kwargs)
    return _run_coroutine(func(*message.args, **message.kwargs))


def _run_coroutine(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from code on an event loop: run it to the end on a loop of its own.
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="blitzq-eager")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
