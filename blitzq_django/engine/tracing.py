"""OpenTelemetry: a producer span per message, a consumer span per attempt
(docs/observability.md). Needs ``opentelemetry-api`` (the ``otel`` extra).

Off unless a client is instrumented: ``instrument(client)`` (Django:
``BLITZQ["TRACING"] = True``). Until then nothing of this module is imported and the
only cost is one ``is None`` test per message built; a worker of an uninstrumented
client runs exactly the code it runs without OpenTelemetry installed.

Once instrumented:

- each message built (``enqueue``, ``enqueue_many``, their async twins, and every
  path built on ``Client.build``: ``django.tasks``, ``enqueue_on_commit``, the
  outbox, the scheduler) gets a PRODUCER span ``create <task>``, a child of the current
  span (a web request's, or the consumer span of the task enqueueing it), ended at
  once; its context is injected into the message's headers by the global propagator
  (W3C ``traceparent``, and ``tracestate`` / ``baggage`` when there are any). When
  nothing is current but the headers already carry a ``traceparent`` (given with
  ``options(headers=...)``, e.g. by another system), that is the parent.
- each attempt a worker runs gets a CONSUMER span ``process <task>``, a child of the
  message's creation context, current while the task runs (``async def`` tasks and
  ``def`` tasks on the worker's threads; a process-executor task runs in a child
  process the span does not reach), ended when its settlement is handed over: status
  ERROR with the exception recorded when the attempt failed.

Attributes follow the OpenTelemetry messaging semantic conventions: ``messaging.system``
"blitzq", ``messaging.operation.type`` ("create" / "process"),
``messaging.operation.name`` ("enqueue" / "process"), ``messaging.destination.name``
(the queue), ``messaging.message.id``, ``messaging.message.conversation_id`` (the
correlation id), ``messaging.message.body.size``, ``messaging.client.id`` (the worker),
``error.type``; and ``blitzq.task.name``, ``blitzq.task.attempt``,
``blitzq.task.delivery_count``, ``blitzq.task.outcome`` (the record state the attempt
settled as). Span names hold the task name rather than the queue: every task of a queue
would otherwise share one name (``process default``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context, get_current
from opentelemetry.trace import SpanKind

if TYPE_CHECKING:
    from .client import Client

SYSTEM = "blitzq"
#: The header of the W3C trace context.
TRACEPARENT = "traceparent"


def _version() -> str:
    try:
        from importlib.metadata import version  # lazy: cost (read once, when tracing is on)

        return version("blitzq-django")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "unknown"


class Tracing:
    """The spans of one client; ``client.tracing`` once instrumented."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        #: A proxy until the application sets its TracerProvider: spans made before are
        #: no-ops, those after go to the provider set then.
        self.tracer = trace.get_tracer("blitzq_django", _version(),
                                       tracer_provider=tracer_provider)

    def created(self, task: str, queue: str, message_id: str,
                headers: dict[str, Any]) -> dict[str, Any]:
        """The headers of a message being built, with its creation context injected."""
        parent = _producer_parent(headers)
        span = self.tracer.start_span(
            f"create {task}", context=parent, kind=SpanKind.PRODUCER,
            attributes={"messaging.system": SYSTEM, "messaging.operation.type": "create",
                        "messaging.operation.name": "enqueue",
                        "messaging.destination.name": queue,
                        "messaging.message.id": message_id, "blitzq.task.name": task})
        carrier = dict(headers)
        carrier.pop(TRACEPARENT, None)  # the parent's, inherited: replaced by this span's
        carrier.pop("tracestate", None)
        propagate.inject(carrier, context=trace.set_span_in_context(span, parent))
        span.end()
        return carrier


def _producer_parent(headers: dict[str, Any]) -> Context:
    current = get_current()
    if trace.get_current_span(current).get_span_context().is_valid:
        return current
    if TRACEPARENT in headers:
        return extract(headers)
    return current


def extract(headers: dict[str, Any]) -> Context:
    """The trace context a message's headers carry (an empty one if none, or bad)."""
    try:
        return propagate.extract({k: v for k, v in headers.items() if isinstance(v, str)},
                                 context=Context())
    except Exception:  # noqa: BLE001 - a forged header must not stop a task
        return Context()


def instrument(client: Client, tracer_provider: trace.TracerProvider | None = None
               ) -> Tracing:
    """Turn spans on for ``client`` (and the workers built on it). ``tracer_provider``:
    the global one (``trace.set_tracer_provider``) unless given."""
    tracing = Tracing(tracer_provider)
    client.tracing = tracing
    return tracing


__all__ = ["SYSTEM", "TRACEPARENT", "Tracing", "extract", "instrument"]
