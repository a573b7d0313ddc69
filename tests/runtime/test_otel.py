"""OpenTelemetry tracing (``fairstream[otel]``) on a real broker, read back from the SDK."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from fairstream import App, DeadLetterPolicy, Record, RetryPolicy
from fairstream.otel import TracingMiddleware
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, read_all

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01".encode()


def _tracing(group_id: str) -> tuple[TracingMiddleware, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TracingMiddleware(group_id=group_id, tracer_provider=provider), exporter


async def _topics(broker: Broker, count: int, partitions: int = 1) -> list[str]:
    names = [f"t-{uuid.uuid4().hex[:10]}" for _ in range(count)]
    for name in names:
        await create_topic(broker.bootstrap, name, partitions)
    return names


def _by_topic(spans: tuple[ReadableSpan, ...], topic: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == f"process {topic}"]


async def test_a_span_per_record_continues_the_producers_trace_and_publish_carries_it(
    noida: Broker, group_id: str
) -> None:
    orders, shipped, failing = await _topics(noida, 3)
    await create_topic(noida.bootstrap, f"{failing}.dlq", 1)
    tracing, exporter = _tracing(group_id)
    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        instance_id=noida.instance_id(group_id),
        middlewares=[tracing],
        retry=RetryPolicy(attempts=1),
        dead_letter=DeadLetterPolicy(on_error="dead_letter"),
    )
    done = anyio.Event()
    failed = anyio.Event()

    @app.subscriber(orders)
    async def handle(record: Record[bytes]) -> None:
        await app.publish(shipped, record.value, key=record.key)

    @app.subscriber(shipped)
    async def ship(record: Record[bytes]) -> None:
        done.set()

    @app.subscriber(failing)
    async def fail(record: Record[bytes]) -> None:
        failed.set()
        raise ValueError("no stock")

    async with app:
        await app.publish(orders, b"o-1", key="k-1", headers=(("traceparent", TRACEPARENT),))
        await app.publish(failing, b"f-1", headers=(("traceparent", TRACEPARENT),))
        with anyio.fail_after(30):
            await done.wait()
            await failed.wait()
            # Written after the handler's span ended: once it is there, so is the span.
            (dead,) = await read_all(noida.bootstrap, f"{failing}.dlq", 1, 1)

    spans = exporter.get_finished_spans()
    (first,) = _by_topic(spans, orders)
    (second,) = _by_topic(spans, shipped)
    (failed_span,) = _by_topic(spans, failing)
    assert first.kind is SpanKind.CONSUMER
    assert dict(first.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": orders,
        "messaging.destination.partition.id": "0",
        "messaging.kafka.offset": 0,
        "messaging.consumer.group.name": group_id,
        "messaging.kafka.message.key": "k-1",
        "messaging.message.body.size": 3,
    }
    # The producer's traceparent is the parent of the first span ...
    assert first.parent is not None and first.parent.span_id == PARENT_ID
    assert first.context.trace_id == TRACE_ID
    # ... and app.publish from its handler wrote the first span into the next record.
    assert second.parent is not None and second.parent.span_id == first.context.span_id
    assert second.context.trace_id == TRACE_ID
    # A failure is on its span; the dead letter keeps the producer's traceparent.
    assert failed_span.status.status_code is StatusCode.ERROR
    assert [e.name for e in failed_span.events] == ["exception"]
    assert ("traceparent", TRACEPARENT) in list(dead.headers)  # type: ignore[attr-defined]


async def test_a_batch_handler_gets_one_span_per_dispatch_linked_to_each_producer(
    noida: Broker, group_id: str
) -> None:
    (topic,) = await _topics(noida, 1, partitions=2)
    tracing, exporter = _tracing(group_id)
    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        instance_id=noida.instance_id(group_id),
        middlewares=[tracing],
    )
    handled: list[Any] = []
    done = anyio.Event()

    @app.subscriber(topic, batch=True)
    async def handle(records: list[Record[bytes]]) -> None:
        handled.append(len(records))
        if sum(handled) == 3:
            done.set()

    parents = [f"00-{TRACE_ID:032x}-{span:016x}-01".encode() for span in (1, 2, 3)]
    async with app:
        for partition, traceparent in zip((0, 1, 0), parents, strict=True):
            await app.publish(
                topic, b"v", partition=partition, headers=(("traceparent", traceparent),)
            )
        with anyio.fail_after(30):
            await done.wait()

    spans = _by_topic(exporter.get_finished_spans(), topic)
    assert len(spans) == len(handled)
    assert [s.attributes["messaging.batch.message_count"] for s in spans] == handled  # type: ignore[index]
    assert sorted(link.context.span_id for s in spans for link in s.links) == [1, 2, 3]
    assert all(s.parent is None for s in spans)
