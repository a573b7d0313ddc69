"""Middlewares: async wrappers around each handler call, composed once at registration.

A middleware is ``async def mw(message, call_next) -> None``, the shape starlette's
``BaseHTTPMiddleware.dispatch`` and FastStream's ``consume_scope`` users know:
``message`` is the record (a ``list`` of records for a batch handler), and
``await call_next(message)`` runs the rest of the chain and the handler. Code before
it runs first, code after it last; an exception the handler raises comes out of
``call_next``, where the middleware may map it to another (or swallow it, which
counts as handled).

The chain is built into one callable when the subscriber is registered, so the
runtime calls a plain ``handler(message)`` whether middlewares are set or not: with
none, the handler is the user's function itself and the hot path is unchanged.
Each attempt is wrapped, retries included; dead letters happen after the chain.

A middleware object may also offer ``publish_headers(topic, headers) -> headers``
(see :class:`PublishHeaders`): ``App.publish`` passes the headers of every record
it sends through it, which is how tracing writes its context into them. And
``bind_app(app)``, called once when the app (or subscriber) takes it: tracing reads
the group id from the app when a span starts, so ``fairstream run --group-id`` and
``FAIRSTREAM_GROUP_ID`` show in the spans.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Protocol

from fairstream.errors import ConfigError
from fairstream.runtime._record import Headers

__all__ = [
    "CallNext",
    "Middleware",
    "PublishHeaders",
    "bind_app",
    "check_middlewares",
    "compose",
    "publish_hooks",
]

CallNext = Callable[[Any], Awaitable[None]]
"""The rest of the chain: ``await call_next(message)`` runs it and the handler."""

Middleware = Callable[[Any, CallNext], Awaitable[None]]
"""``async def mw(message, call_next) -> None``; ``message`` is a record or a batch list."""


class PublishHeaders(Protocol):
    """A middleware that also adds headers to what ``App.publish`` sends."""

    def publish_headers(self, topic: str, headers: Headers, /) -> Headers: ...


def _link(middleware: Middleware, call_next: CallNext, message: Any) -> Awaitable[None]:
    return middleware(message, call_next)


def compose(handler: CallNext, middlewares: Sequence[Middleware]) -> CallNext:
    """``handler`` wrapped by ``middlewares``, the first one outermost.

    With no middleware it is ``handler`` itself, so nothing is added per call.

    :raises ConfigError: for a middleware that is not callable.
    """
    chain = handler
    for middleware in reversed(tuple(middlewares)):
        if not callable(middleware):
            raise ConfigError(
                "middlewares",
                middleware,
                "is not callable",
                "pass 'async def mw(message, call_next)' functions",
            )
        chain = partial(_link, middleware, chain)
    return chain


def publish_hooks(
    middlewares: Sequence[Middleware],
) -> tuple[Callable[[str, Headers], Headers], ...]:
    """The ``publish_headers`` methods of the middlewares that have one, in order."""
    hooks: list[Callable[[str, Headers], Headers]] = []
    for middleware in middlewares:
        hook = getattr(middleware, "publish_headers", None)
        if callable(hook):
            hooks.append(hook)
    return tuple(hooks)


def bind_app(middlewares: Sequence[Middleware], app: object) -> None:
    """Call ``bind_app(app)`` on the middlewares that have one."""
    for middleware in middlewares:
        bind = getattr(middleware, "bind_app", None)
        if callable(bind):
            bind(app)


async def _nothing(_message: object) -> None:
    """The innermost handler a chain is checked against before any is registered."""


def check_middlewares(middlewares: Sequence[Middleware]) -> None:
    """Fail where the middlewares are given, not when the first handler registers.

    :raises ConfigError: for a middleware that is not callable.
    """
    compose(_nothing, middlewares)
