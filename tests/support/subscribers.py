"""A subscriber built as the App builds one, for tests of the dispatch room alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fairstream import DeadLetterPolicy, Record, RetryPolicy, SchedulerConfig
from fairstream.runtime._subscriber import Subscriber, new_subscriber


def plain_subscriber(
    handler: Callable[[Record[bytes]], Awaitable[None]],
    settings: SchedulerConfig | None = None,
) -> Subscriber:
    """Topic ``t``, one record a call, no decoder, middleware or parallel rebalance,
    the default retry and dead-letter policies."""
    return new_subscriber(
        handler,
        topics=("t",),
        batch=False,
        settings=settings or SchedulerConfig(),
        decoder=None,
        key_decoder=None,
        retry=RetryPolicy(),
        dead_letter=DeadLetterPolicy(),
        parallel_rebalance=None,
        middlewares=(),
    )


async def no_dead_letter(*_: object) -> None:
    """The runner's dead-letter call where no record may fail."""
    raise AssertionError("no record fails here")
