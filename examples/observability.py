"""Middlewares, OpenTelemetry tracing and Prometheus metrics on one app.

    pip install 'fairstream[broker,otel,prometheus]'
    fairstream broker &                               # prints bootstrap=127.0.0.1:PORT
    export FAIRSTREAM_BOOTSTRAP=127.0.0.1:PORT
    fairstream topic create orders --partitions 3
    fairstream run observability:app --http-port 9102 &
    fairstream produce orders '{"amount": 5}'
    curl -s localhost:9102/metrics | grep fairstream_handler_seconds

``timed`` is a middleware of the whole app: it logs how long each handler call took,
and maps a ``KeyError`` (a field missing from the order) to ``InvalidOrder``, so the
dead-letter record says what was wrong. ``TracingMiddleware`` gives each record a span
(child of the producer's ``traceparent`` header, if any), printed as one JSON line on
standard output by the SDK's console exporter; send them to a collector with
``opentelemetry-exporter-otlp`` instead. ``--http-port`` serves ``/metrics`` through
``prometheus_client`` because the extra is installed.
Environment: FAIRSTREAM_BOOTSTRAP, ORDERS_TOPIC (default ``orders``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import structlog
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from fairstream import App, CallNext, Record, RetryPolicy
from fairstream.otel import TracingMiddleware

log = structlog.get_logger()

TOPIC = os.environ.get("ORDERS_TOPIC", "orders")


class InvalidOrder(Exception):
    """An order without a field the handler needs."""


async def timed(message: Any, call_next: CallNext) -> None:
    """Log each handler call's duration; a missing field becomes ``InvalidOrder``."""
    started = time.perf_counter()
    try:
        await call_next(message)
    except KeyError as exc:
        raise InvalidOrder(f"missing field {exc}") from exc
    finally:
        log.info("handler_call", ms=round(1000 * (time.perf_counter() - started), 3))


def _one_line(span: ReadableSpan) -> str:
    return str(span.to_json(indent=None)) + "\n"


tracing = TracerProvider()
tracing.add_span_processor(
    SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stdout, formatter=_one_line))
)

app = App(
    group_id="orders",
    retry=RetryPolicy(attempts=2, backoff=0.1),
    middlewares=[TracingMiddleware(tracer_provider=tracing), timed],
)


@app.subscriber(TOPIC)
async def handle(record: Record[dict[str, Any]]) -> None:
    log.info("order", amount=record.value["amount"], offset=record.offset)
