"""OpenTelemetry (engine/tracing.py, worker/spans.py): a producer span per message whose
context travels in the headers, a consumer span per attempt, child of it. Real
enqueues, a real worker on a real Redis, spans from the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from blitzq_django.engine import Client, current_task, tracing
from blitzq_django.engine.core.message import decode

from . import process_tasks
from .helpers import arun_burst, ready_payloads, run_burst


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
def client(redis_broker: Any, provider: TracerProvider) -> Client:
    client = Client(redis_broker)
    tracing.instrument(client, tracer_provider=provider)
    return client


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def test_a_def_task_runs_in_a_consumer_span_child_of_its_producer_span(
        client: Client, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    inside: list[Any] = []

    @client.task(name="shop.child")
    def child() -> None:
        return None

    @client.task(name="shop.charge", retries=1, initial_delay=0)
    def charge(order: int) -> int:
        inside.append(trace.get_current_span().get_span_context())
        if current_task().attempt == 1:  # type: ignore[union-attr]
            raise RuntimeError("card declined")
        child.enqueue()
        return order

    request_tracer = provider.get_tracer("web")
    with request_tracer.start_as_current_span("POST /checkout") as request:
        handle = charge.enqueue(7)
    headers = decode(ready_payloads(client.broker, "default")[0]).headers
    run_burst(client)
    assert client.get_result(handle.id, 5).result == 7

    (create,) = spans(exporter, "create shop.charge")
    assert create.kind == SpanKind.PRODUCER
    assert create.parent is not None and create.parent.span_id == \
        request.get_span_context().span_id
    assert headers["traceparent"] == traceparent_of(create)  # W3C, in the message
    assert dict(create.attributes or {}) == {
        "messaging.system": "blitzq", "messaging.operation.type": "create",
        "messaging.operation.name": "enqueue", "messaging.destination.name": "default",
        "messaging.message.id": handle.id, "blitzq.task.name": "shop.charge"}

    failed, succeeded = sorted(spans(exporter, "process shop.charge"),
                               key=lambda s: s.attributes["blitzq.task.attempt"])  # type: ignore[index]
    for span in (failed, succeeded):
        assert span.kind == SpanKind.CONSUMER
        assert span.context.trace_id == create.context.trace_id
        assert span.parent is not None and span.parent.span_id == create.context.span_id
        attributes = span.attributes or {}
        assert attributes["messaging.system"] == "blitzq"
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["messaging.destination.name"] == "default"
        assert attributes["messaging.message.id"] == handle.id
        assert attributes["messaging.client.id"]
        assert attributes["messaging.message.body.size"] > 0
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes["blitzq.task.outcome"] == "retrying"  # type: ignore[index]
    assert failed.attributes["error.type"] == "RuntimeError"  # type: ignore[index]
    (event,) = failed.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "RuntimeError"  # type: ignore[index]
    assert "card declined" in event.attributes["exception.message"]  # type: ignore[index]
    assert "in charge" in event.attributes["exception.stacktrace"]  # type: ignore[index]
    assert succeeded.status.status_code == StatusCode.UNSET
    assert succeeded.attributes["blitzq.task.outcome"] == "succeeded"  # type: ignore[index]
    # Inside the task (on a worker thread), its span was the current one.
    assert [c.span_id for c in inside] == [failed.context.span_id, succeeded.context.span_id]
    # A task enqueued by the task: its producer span is a child of that attempt's span.
    (child_create,) = spans(exporter, "create shop.child")
    assert child_create.parent is not None
    assert child_create.parent.span_id == succeeded.context.span_id
    (child_process,) = spans(exporter, "process shop.child")
    assert child_process.parent.span_id == child_create.context.span_id  # type: ignore[union-attr]
    assert child_process.attributes["messaging.message.conversation_id"] == handle.id  # type: ignore[index]


@pytest.mark.asyncio
async def test_async_enqueues_and_attempts_are_traced(client: Client,
                                                      exporter: InMemorySpanExporter) -> None:
    inside: list[int] = []

    @client.task(name="aping", dead_letter=False)
    async def aping(n: int) -> int:
        await asyncio.sleep(0)
        inside.append(trace.get_current_span().get_span_context().span_id)
        if n == 2:
            raise ValueError("two")
        return n

    single = await aping.aenqueue(0)
    many = await aping.aenqueue_many([(1,), (2,)])
    sync_many = aping.enqueue_many([(3,)])
    await arun_burst(client)
    creates = {s.attributes["messaging.message.id"]: s  # type: ignore[index]
               for s in spans(exporter, "create aping")}
    handles = [single, *many, *sync_many]
    assert set(creates) == {h.id for h in handles}  # one producer span per message
    assert all(s.parent is None for s in creates.values())  # nothing was current: roots
    processes = {s.attributes["messaging.message.id"]: s  # type: ignore[index]
                 for s in spans(exporter, "process aping")}
    assert set(processes) == set(creates)
    for message_id, span in processes.items():
        assert span.parent.span_id == creates[message_id].context.span_id  # type: ignore[union-attr]
    assert sorted(inside) == sorted(s.context.span_id for s in processes.values())
    failed = processes[many[1].id]
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes["blitzq.task.outcome"] == "failed"  # type: ignore[index]


def test_a_process_executor_attempt_has_its_span(client: Client,
                                                 exporter: InMemorySpanExporter) -> None:
    fail = client.task(process_tasks.fail, name="fail", executor="process")
    handle = fail.enqueue("in the child")
    run_burst(client, processes=1)
    (span,) = spans(exporter, "process fail")
    assert span.attributes["messaging.message.id"] == handle.id  # type: ignore[index]
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["blitzq.task.outcome"] == "dead_lettered"  # type: ignore[index]


def test_a_message_that_expires_before_it_starts_ends_its_span(
        client: Client, exporter: InMemorySpanExporter) -> None:
    t = client.task(name="late")(lambda: None)
    t.options(expires=0.001).enqueue()
    asyncio.run(asyncio.sleep(0.01))  # (noqa: sleep) past its expiry, by construction
    run_burst(client)
    assert spans(exporter, "process late") == []  # dropped at admission: no attempt
    assert len(spans(exporter, "create late")) == 1


def test_without_instrument_nothing_is_traced(redis_broker: Any, provider: TracerProvider,
                                              exporter: InMemorySpanExporter) -> None:
    client = Client(redis_broker)
    assert client.tracing is None

    @client.task(name="plain")
    def plain() -> None:
        return None

    with provider.get_tracer("web").start_as_current_span("request"):
        plain.enqueue()
    assert "traceparent" not in decode(ready_payloads(client.broker, "default")[0]).headers
    run_burst(client)
    assert [s.name for s in exporter.get_finished_spans()] == ["request"]


def test_a_traceparent_given_in_the_headers_is_the_parent(client: Client,
                                                          exporter: InMemorySpanExporter) -> None:
    t = client.task(name="from_elsewhere")(lambda: None)
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    t.options(headers={"traceparent": given}).enqueue()  # outside any span
    (create,) = spans(exporter, "create from_elsewhere")
    assert create.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert create.parent is not None and create.parent.span_id == 0xB7AD6B7169203331
    headers = decode(ready_payloads(client.broker, "default")[0]).headers
    assert headers["traceparent"] == traceparent_of(create)  # its own, not the one given
