"""Retrying with exponential backoff: a failing handler call, and broker calls that
must succeed before the engine may move on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio
import structlog

from fairstream._policies import RetryPolicy
from fairstream.errors import BrokerError, HandlerCancelled

__all__ = [
    "BROKER_BACKOFF",
    "call_with_retry",
    "retry_broker",
    "stray_cancellation",
    "warn_while_slow",
]

T = TypeVar("T")

BROKER_BACKOFF = RetryPolicy(attempts=1, backoff=0.2, multiplier=2.0, max_backoff=5.0)
"""The delays between tries of a broker call: 0.2 s, doubling, at most 5 s."""

log = structlog.get_logger(__name__)


async def call_with_retry(
    handler: Callable[[Any], Awaitable[None]],
    argument: Any,
    policy: RetryPolicy,
    first_error: Exception,
) -> tuple[Exception | None, int]:
    """Retry after a first failure; return the last error (or ``None``) and attempts made.

    The first attempt is made by the caller on its fast path, so a handler that
    succeeds pays nothing for the retry machinery.
    """
    error: Exception = first_error
    for attempt in range(1, policy.attempts):
        delay = policy.delay(attempt)
        log.warning(
            "handler_retry",
            attempt=attempt,
            attempts=policy.attempts,
            delay=delay,
            error=f"{type(error).__name__}: {error}",
        )
        await anyio.sleep(delay)
        try:
            await handler(argument)
        except Exception as exc:
            if exc.__context__ is first_error:
                # Retried inside the caller's except block, each error would chain the first
                # attempt's as its context: the traceback shows the last one.
                exc.__suppress_context__ = True
            error = exc
        except asyncio.CancelledError as exc:
            error = stray_cancellation(exc)
        else:
            return None, attempt + 1
    return error, policy.attempts


def stray_cancellation(exc: asyncio.CancelledError) -> HandlerCancelled:
    """The error for a ``CancelledError`` a handler raised; re-raises fairstream's own.

    Cancellation that fairstream (or anything around the app) asked for shows as a
    pending cancel request on the current task, and goes on propagating; a handler
    that merely awaited something that was cancelled leaves none, and its record must
    not count as handled.
    """
    task = asyncio.current_task()
    if task is None or task.cancelling():
        raise exc
    return HandlerCancelled()


async def retry_broker(operation: Callable[[], Awaitable[T]], *, event: str, **where: Any) -> T:
    """Run ``operation`` until it succeeds or fails with an error that is not retriable.

    For broker calls the engine cannot go past: a dead letter that must be written
    before its record's offset is committed, the committed offsets an assignment
    needs. Giving up would either stop the app or move past a record; a broker that
    is away, a leader that moves or a send that timed out passes. So a retriable
    :class:`~fairstream.errors.BrokerError` is logged as ``event`` (a warning with the
    attempt and the delay) and tried again after :data:`BROKER_BACKOFF`, for as long
    as it takes; cancellation (shutdown, a revoke) ends the wait.

    :raises BrokerError: the first error that is not retriable.
    """
    attempt = 0
    while True:
        try:
            return await operation()
        except BrokerError as exc:
            if not exc.retriable:
                raise
            attempt += 1
            delay = BROKER_BACKOFF.delay(attempt)
            log.warning(event, **where, attempt=attempt, delay=delay, reason=str(exc))
            await anyio.sleep(delay)


@contextmanager
def warn_while_slow(event: str, *, after: float, every: float, **facts: Any) -> Iterator[None]:
    """Log ``event`` (a warning with ``facts`` and ``waited_s``) once the block has taken
    ``after`` seconds, and again every ``every`` seconds while it goes on.

    For waits the engine cannot cut short without losing or repeating work (a dead
    letter that must be acknowledged before its record counts as done): they go on
    as long as they take, but never silently. A timer of the event loop, not a task,
    so the block's own exceptions come out as they are, and a block that ends in
    time costs one timer set and cancelled.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()

    timers: list[asyncio.TimerHandle] = []

    def warn() -> None:
        log.warning(event, **facts, waited_s=round(loop.time() - started, 1))
        timers[0] = loop.call_later(every, warn)

    timers.append(loop.call_later(after, warn))
    try:
        yield
    finally:
        timers[0].cancel()
