"""OpenTelemetry tracing as a middleware (``pip install 'fairstream[otel]'``).

>>> from fairstream.otel import TracingMiddleware
>>> app = App(group_id="orders", middlewares=[TracingMiddleware(group_id="orders")])

Each handled record gets a ``CONSUMER`` span named ``process <topic>`` with the
messaging semantic conventions' attributes (``messaging.system=kafka``, destination,
partition id, offset, consumer group); its parent is the trace context the producer
wrote into the record's headers (W3C ``traceparent`` with the default propagator). A
batch handler gets one span per dispatch, linked to each record's producer context.
A handler's exception is recorded on the span, which ends with status ``ERROR``;
each retry is a span of its own.

``App.publish`` writes the current context into the headers it sends (from a handler,
the ``process`` span), so a consumer downstream continues the trace. Dead letters
keep the failed record's own headers, ``traceparent`` included, so a dead-letter
consumer joins the trace the record was produced in.

The runtime never imports this module: tracing costs nothing unless it is installed.
Without the extra, importing it raises ``ModuleNotFoundError`` naming
``pip install 'fairstream[otel]'``.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from typing import Any

from fairstream._extras import missing_extra

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.propagators.textmap import Getter, TextMapPropagator
    from opentelemetry.trace import Link, SpanKind, Tracer, TracerProvider
except ImportError as exc:
    raise missing_extra("otel", "fairstream.otel", exc) from exc

from fairstream import CallNext, Record
from fairstream.runtime._record import Headers

__all__ = ["TracingMiddleware"]

_SCOPE = "fairstream"


class _HeadersGetter(Getter[Headers]):
    """Reads a propagator's fields from Kafka headers (the last value of a key wins)."""

    def get(self, carrier: Headers, key: str) -> list[str] | None:
        key = key.lower()
        found = [value for name, value in carrier if name.lower() == key and value is not None]
        return [found[-1].decode("utf-8", "replace")] if found else None

    def keys(self, carrier: Headers) -> list[str]:
        return [name for name, _ in carrier]


_GETTER = _HeadersGetter()


def _attributes(record: Record[Any], group_id: str | None) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": record.topic,
        "messaging.destination.partition.id": str(record.partition),
        "messaging.kafka.offset": record.offset,
    }
    if group_id is not None:
        attributes["messaging.consumer.group.name"] = group_id
    key = record.key
    if isinstance(key, str):  # decoded by a key decoder
        attributes["messaging.kafka.message.key"] = key
    elif isinstance(key, bytes):
        with suppress(UnicodeDecodeError):  # the conventions record string keys only
            attributes["messaging.kafka.message.key"] = key.decode()
    if record.raw is not None:
        attributes["messaging.message.body.size"] = len(record.raw)
    return attributes


class TracingMiddleware:
    """A span per handled record (per dispatch for a batch handler); context in and out.

    ``messaging.consumer.group.name`` is ``group_id`` if given, else the group of the
    app that took the middleware (read when each span starts, so ``--group-id``
    applies); ``tracer_provider`` and ``propagator`` default to the global ones
    OpenTelemetry's SDK set up.
    """

    def __init__(
        self,
        *,
        group_id: str | None = None,
        tracer_provider: TracerProvider | None = None,
        propagator: TextMapPropagator | None = None,
    ) -> None:
        self.group_id = group_id
        self._app: Any = None
        self._tracer: Tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        self._propagator = propagator

    def bind_app(self, app: Any) -> None:
        """Called by the :class:`~fairstream.App` that takes this middleware."""
        self._app = app

    def _group(self) -> str | None:
        if self.group_id is not None:
            return self.group_id
        group = getattr(self._app, "group_id", None)
        return group if isinstance(group, str) else None

    def _extract(self, headers: Headers) -> otel_context.Context:
        propagator = self._propagator or propagate.get_global_textmap()
        return propagator.extract(headers, getter=_GETTER)

    async def __call__(self, message: Any, call_next: CallNext) -> None:
        if isinstance(message, list):
            await self._batch(message, call_next)
            return
        record: Record[Any] = message
        with self._tracer.start_as_current_span(
            f"process {record.topic}",
            context=self._extract(record.headers),
            kind=SpanKind.CONSUMER,
            attributes=_attributes(record, self._group()),
        ):
            await call_next(message)

    async def _batch(self, records: list[Record[Any]], call_next: CallNext) -> None:
        topics = sorted({r.topic for r in records})
        attributes: dict[str, str | int] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.batch.message_count": len(records),
        }
        if len(topics) == 1:
            attributes["messaging.destination.name"] = topics[0]
        group = self._group()
        if group is not None:
            attributes["messaging.consumer.group.name"] = group
        links = list(_links(self._extract(r.headers) for r in records))
        with self._tracer.start_as_current_span(
            f"process {topics[0]}" if len(topics) == 1 else "process",
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        ):
            await call_next(records)

    def publish_headers(self, topic: str, headers: Headers, /) -> Headers:
        """``headers`` with the current trace context written in (replacing any there)."""
        propagator = self._propagator or propagate.get_global_textmap()
        carrier: dict[str, str] = {}
        propagator.inject(carrier)
        if not carrier:
            return headers
        kept = tuple((name, value) for name, value in headers if name.lower() not in carrier)
        return (*kept, *((name, value.encode()) for name, value in carrier.items()))


def _links(contexts: Iterable[otel_context.Context]) -> Iterable[Link]:
    """A link per distinct valid producer span among ``contexts``."""
    seen: set[tuple[int, int]] = set()
    for ctx in contexts:
        span = trace.get_current_span(ctx).get_span_context()
        if span.is_valid and (span.trace_id, span.span_id) not in seen:
            seen.add((span.trace_id, span.span_id))
            yield Link(span)
