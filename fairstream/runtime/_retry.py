"""Retrying a failing handler call with exponential backoff."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog

from fairstream.config import RetryPolicy
from fairstream.errors import HandlerCancelled

__all__ = ["call_with_retry", "stray_cancellation"]

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
