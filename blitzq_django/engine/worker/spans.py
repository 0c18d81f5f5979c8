"""The consumer span of each attempt, for a worker whose client is instrumented
(engine/tracing.py; docs/observability.md).

``trace_attempts(...)`` wraps a few methods of the worker's own executor instance
and returns the worker's ``settle`` wrapped, for the parts built after it, so a
worker without tracing runs its plain classes and not one instruction of this module:

- ``_launch``: the span starts, a child of the message's creation context, and is the
  current context while the launch runs, so the ``asyncio`` task of an ``async def``
  attempt (which copies the context it is created in) runs inside it;
- a hook around each ``def`` attempt on a task thread (the executor's
  ``around_sync_call`` hooks, which run in that thread) makes it current there too;
- ``_conclude_now``: a failed attempt's exception is recorded, status ERROR;
- ``settle``: the span ends with the state the attempt settled as (also for an attempt
  requeued at shutdown, or dropped as expired or revoked when it was about to start).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..client.context import CORRELATION_HEADER, _current
from ..core.states import HeldState, SettleKind
from ..tracing import SYSTEM, extract

if TYPE_CHECKING:
    from ..brokers.base import Settlement
    from ..tracing import Tracing
    from .execution import Executor
    from .inflight import Held, Key, Settle

MARK_RUNNING, RUNNING = SettleKind.MARK_RUNNING, HeldState.RUNNING


def trace_attempts(*, executor: Executor, tracing: Tracing, name: str,
                   settle: Settle) -> Settle:
    """Give every attempt ``executor`` runs its span (see the module docstring); returns
    ``settle`` (the worker's) ending the attempt's span first, for the other parts."""
    tracer = tracing.tracer
    #: delivery key -> (span, the context it is current in), while the attempt runs
    spans: dict[Key, tuple[trace.Span, otel_context.Context]] = {}
    launch, conclude_now = executor._launch, executor._conclude_now

    def traced_launch(held: Held) -> None:
        message = held.message
        parent = extract(message.headers) if message.headers else otel_context.Context()
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": message.queue, "messaging.message.id": message.id,
            "messaging.client.id": name,
            "messaging.message.body.size": len(held.delivery.payload or b""),
            "blitzq.task.name": message.task, "blitzq.task.attempt": message.attempt,
            "blitzq.task.delivery_count": held.delivery.delivery_count}
        correlation = message.headers.get(CORRELATION_HEADER)
        if isinstance(correlation, str):
            attributes["messaging.message.conversation_id"] = correlation
        span = tracer.start_span(f"process {message.task}", context=parent,
                                 kind=SpanKind.CONSUMER, attributes=attributes)
        current = trace.set_span_in_context(span, parent)
        spans[held.key] = (span, current)
        token = otel_context.attach(current)
        try:
            launch(held)
        finally:
            otel_context.detach(token)

    def traced_conclude_now(held: Held, error: BaseException | None, value: Any,
                            started: int) -> None:
        if error is not None and held.state is RUNNING:
            entry = spans.get(held.key)
            if entry is not None:
                span = entry[0]
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
                span.set_attribute("error.type", type(error).__qualname__)
        conclude_now(held, error, value, started)

    def ended(held: Held, settlement: Settlement) -> None:
        if settlement.kind == MARK_RUNNING:  # its running record: the attempt goes on
            return
        entry = spans.pop(held.key, None)
        if entry is not None:
            entry[0].set_attribute("blitzq.task.outcome", settlement.state)
            entry[0].end()

    def traced_settle(held: Held, settlement: Settlement) -> None:
        ended(held, settlement)
        settle(held, settlement)

    local = threading.local()

    def in_thread() -> None:
        """Around a `def` attempt, in its thread: called before it (makes its span
        current) and after it (restores the thread's context)."""
        factory = _current.get()
        held = factory()._flag if factory is not None else None
        attached = getattr(local, "attached", None)
        if attached is not None:
            local.attached = None
            otel_context.detach(attached[1])
            if attached[0] is held:
                return  # after the attempt
        entry = spans.get(held.key) if held is not None else None
        if entry is not None:
            local.attached = (held, otel_context.attach(entry[1]))

    executor._launch = traced_launch  # type: ignore[method-assign]
    executor._conclude_now = traced_conclude_now  # type: ignore[method-assign]
    executor._settle = traced_settle
    # First, so no other hook can raise before it runs after the attempt.
    executor._hooks = (in_thread, *executor._hooks)
    return traced_settle


__all__ = ["trace_attempts"]
