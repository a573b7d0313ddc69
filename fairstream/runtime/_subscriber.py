"""A registered handler and the settings that belong to it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from fairstream._policies import DeadLetterPolicy, RetryPolicy
from fairstream.config import (
    Ordering,
    ParallelRebalance,
    SchedulerConfig,
)
from fairstream.errors import ConfigError
from fairstream.runtime._decode import (
    Decoder,
    decoder_for,
    decoding_keys,
    key_decoder_for,
    passthrough,
    result_type_of,
    value_type_of,
)
from fairstream.runtime._middleware import Middleware, compose
from fairstream.runtime._publisher import PublishResult, check_publishes, publishing

__all__ = ["Handler", "Subscriber", "new_subscriber", "parallel_rebalance_setting"]

Handler = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscriber:
    """What ``@app.subscriber(...)`` registered.

    A record handler is called once per record, in offset order within each
    partition; a batch handler once per dispatch with records of several
    partitions (each partition's records still in order).
    """

    name: str
    topics: tuple[str, ...]
    handler: Handler
    batch: bool
    max_batch: int
    decoder: Decoder[Any]
    retry: RetryPolicy
    dead_letter: DeadLetterPolicy
    parallel_rebalance: ParallelRebalance | None
    """KIP-333 settings, ``None`` when off (open ranges are still resumed)."""
    ordering: Ordering = "partition"
    """What may run beside what (``SchedulerConfig.ordering``); batch handlers keep
    ``"partition"``: a batch holds records of partitions with no dispatch in flight."""
    concurrency: int = 64
    """Records (dispatches, for batch handlers) of this subscriber in flight at once."""
    publishes: tuple[str, ...] = ()
    """The topics its handler's return values are published to (``@app.publisher``)."""
    value_type: Any = bytes
    """The type of the values the handler gets (``Record[V]``'s ``V``); ``None`` for
    an explicit ``decoder=`` (``fairstream asyncapi`` documents it as any payload)."""
    result_type: Any = None
    """What the handler returns, as hinted (``None``: no hint), which a publisher sends."""

    @property
    def keyed(self) -> bool:
        """Its records run per key (or alone), not one partition dispatch at a time."""
        return self.ordering != "partition" and not self.batch


def new_subscriber(
    handler: Callable[..., Awaitable[object]],
    *,
    topics: tuple[str, ...],
    batch: bool,
    settings: SchedulerConfig,
    decoder: Decoder[Any] | None,
    key_decoder: Decoder[Any] | None,
    retry: RetryPolicy,
    dead_letter: DeadLetterPolicy,
    parallel_rebalance: ParallelRebalance | None,
    middlewares: Sequence[Middleware],
    publishes: tuple[str, ...] = (),
    publish: PublishResult | None = None,
) -> Subscriber:
    """What ``@app.subscriber(...)`` registers for ``handler``, checked once, here.

    ``middlewares`` are the app's then the subscriber's, the first outermost. Keys are
    decoded (when asked) before the outermost one, so every middleware sees the
    record the handler gets. With ``publishes``, the handler's result is sent there
    through ``publish`` inside the innermost one (:mod:`~fairstream.runtime._publisher`).

    :raises ConfigError: a sync handler, one that does not take exactly one record
        (list), an unresolvable hint, or publisher topics on a batch handler.
    """
    if not inspect.iscoroutinefunction(handler):
        raise ConfigError(
            "handler",
            getattr(handler, "__qualname__", handler),
            "is not an async function",
            "define it with 'async def'",
        )
    check_publishes(handler, publishes, batch=batch)
    # What a handler returns is ignored, unless a publisher sends it.
    inner = (
        cast(Handler, handler)
        if not publishes or publish is None
        else publishing(handler, publishes, publish)
    )
    chain = compose(inner, middlewares)
    keys = key_decoder_for(handler, batch=batch, key_decoder=key_decoder)
    return Subscriber(
        name=getattr(handler, "__qualname__", repr(handler)),
        topics=topics,
        handler=chain if keys is passthrough else decoding_keys(chain, keys, batch=batch),
        batch=batch,
        max_batch=settings.max_batch,
        decoder=decoder_for(handler, batch=batch, decoder=decoder),
        retry=retry,
        dead_letter=dead_letter,
        parallel_rebalance=parallel_rebalance,
        ordering=settings.ordering,
        concurrency=settings.concurrency,
        publishes=publishes,
        value_type=value_type_of(handler, batch=batch, decoder=decoder),
        result_type=result_type_of(handler) if publishes else None,
    )


def parallel_rebalance_setting(
    setting: bool | ParallelRebalance, ack: str
) -> ParallelRebalance | None:
    """The KIP-333 settings ``setting`` stands for: ``True`` means the defaults."""
    if isinstance(setting, ParallelRebalance):
        chosen: ParallelRebalance | None = setting
    elif isinstance(setting, bool):
        chosen = ParallelRebalance() if setting else None
    else:
        raise ConfigError(
            "parallel_rebalance",
            setting,
            "must be a bool or a ParallelRebalance",
            "pass True, or ParallelRebalance(threshold=..., handoff=...)",
        )
    if chosen is not None and ack == "manual":
        raise ConfigError(
            "parallel_rebalance",
            setting,
            "needs ack='auto'",
            "the runtime commits the shadow's progress itself; use ack='auto' or turn it off",
        )
    return chosen
