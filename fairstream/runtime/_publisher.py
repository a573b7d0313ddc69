"""``@app.publisher("topic")``: a handler's return value, published.

Stacked with ``@app.subscriber(...)``, in either order, as FastStream's
``@broker.publisher``: what the handler returns is sent to each publisher topic
through ``App.publish`` (so encoded as it encodes: bytes as they are, str as UTF-8,
a pydantic model or JSON data as JSON, with the middlewares' publish headers);
``None`` sends nothing. The key is the input record's key as it was sent (also when
the handler gets it decoded), so a key's results stay in order in the output topic.

The send is part of the handler's call: the call returns once the broker
acknowledged every send, and only then does the record count as handled and may its
offset be committed (at-least-once end to end: a crash in between repeats the
record, and its result). A send that fails with an error that may pass (the broker
away, a leader moving) is retried with backoff as a dead letter is
(``publish_retry`` warnings); one that will not pass (a result over the size limit,
say) fails the call like a handler error: retried, then the error policy.

A batch handler cannot have one (``ConfigError`` at registration): its result has no
one input record whose key it would take; publish from it with ``app.publish``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fairstream.errors import ConfigError
from fairstream.logs import current_record
from fairstream.runtime._retry import retry_broker

__all__ = ["PublishResult", "PublisherRegistry", "check_publishes", "publishing"]

H = TypeVar("H", bound=Callable[..., Awaitable[Any]])


PublishResult = Callable[..., Awaitable[None]]
"""``App.publish``: ``(topic, value, *, key=...)``, as far as a publisher uses it."""


def check_publishes(handler: object, publishes: tuple[str, ...], *, batch: bool) -> None:
    """:raises ConfigError: publisher topics on a batch handler."""
    if publishes and batch:
        raise ConfigError(
            "publisher",
            list(publishes),
            f"cannot publish the result of batch handler {getattr(handler, '__qualname__', '')}",
            "publish each result from the handler with 'await app.publish(...)'",
        )


def _input_key(record: Any) -> Any:
    """The key of the record in hand as it was sent: the worker's slot holds the record
    before its key was decoded (``fairstream.logs.current_record``)."""
    slot = current_record.get()
    handled = slot.record if slot is not None else None
    return record.key if handled is None else handled.key


def publishing(
    handler: Callable[[Any], Awaitable[Any]], topics: tuple[str, ...], publish: PublishResult
) -> Callable[[Any], Awaitable[None]]:
    """``handler``, publishing what it returns to ``topics`` before it returns."""

    @functools.wraps(handler)
    async def call(record: Any) -> None:
        result = await handler(record)
        if result is None:
            return
        key = _input_key(record)
        for topic in topics:
            await retry_broker(
                functools.partial(publish, topic, result, key=key),
                event="publish_retry",
                topic=topic,
            )

    return call


class PublisherRegistry:
    """The ``@app.publisher`` decorator; :class:`HandlerRegistry` builds with what it records."""

    _publishes: dict[Callable[..., Any], tuple[str, ...]]
    """The publisher topics of each handler function."""
    _rebuilds: dict[Callable[..., Any], list[Callable[[], None]]]
    """For each handler function already registered, what registers its subscribers
    again (with the publisher topics it has now)."""

    def publisher(self, topic: str) -> Callable[[H], H]:
        """Publish the return value of the handler this decorates to ``topic``.

        Stack it with ``@app.subscriber(...)``, above or below; several publish to each.

        :raises ConfigError: for an empty topic, or on a batch handler.
        """
        if not isinstance(topic, str) or not topic:
            raise ConfigError("publisher", topic, "needs a topic name", 'use @app.publisher("out")')

        def register(handler: H) -> H:
            self._publishes[handler] = (*self._publishes.get(handler, ()), topic)
            for rebuild in self._rebuilds.get(handler, ()):
                rebuild()  # @app.publisher above @app.subscriber
            return handler

        return register
