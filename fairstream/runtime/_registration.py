"""``@app.subscriber(...)``: the half of :class:`~fairstream.App` that registers handlers.

Registration is all checking and merging: a subscriber's own settings over the
app's, the topics it claims against those already claimed. It needs nothing of a
running app, so it lives apart from the running and the publishing. The typed
overloads give a record handler and a batch handler their own signatures, so mypy
flags ``batch=True`` on a handler of one record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar, overload

from fairstream._policies import DeadLetterPolicy, RetryPolicy
from fairstream.config import (
    Ordering,
    ParallelRebalance,
    SchedulerConfig,
)
from fairstream.errors import ConfigError
from fairstream.runtime._decode import Decoder
from fairstream.runtime._engine import Ack
from fairstream.runtime._middleware import Middleware, bind_app
from fairstream.runtime._publisher import PublisherRegistry, PublishResult
from fairstream.runtime._record import Record
from fairstream.runtime._subscriber import Subscriber, new_subscriber, parallel_rebalance_setting

__all__ = ["HandlerRegistry"]

H = TypeVar("H", bound=Callable[..., Awaitable[object]])
RecordHandler = TypeVar("RecordHandler", bound=Callable[[Record[Any, Any]], Awaitable[object]])
BatchHandler = TypeVar("BatchHandler", bound=Callable[[list[Record[Any, Any]]], Awaitable[object]])


class HandlerRegistry(PublisherRegistry):
    """The subscribers of an app, and the decorator that adds them.

    The app sets the defaults below in its ``__init__``; each subscriber reads
    them when it registers.
    """

    scheduler_config: SchedulerConfig
    retry: RetryPolicy
    dead_letter: DeadLetterPolicy
    parallel_rebalance: ParallelRebalance | None
    ack: Ack
    middlewares: tuple[Middleware, ...]
    _subscribers: list[Subscriber]
    publish: PublishResult

    @overload
    def subscriber(
        self,
        *topics: str,
        batch: Literal[False] = False,
        max_batch: int | None = None,
        decoder: Decoder[Any] | None = None,
        key_decoder: Decoder[Any] | None = None,
        retry: RetryPolicy | None = None,
        dead_letter: DeadLetterPolicy | None = None,
        parallel_rebalance: bool | ParallelRebalance | None = None,
        ordering: Ordering | None = None,
        concurrency: int | None = None,
        middlewares: Sequence[Middleware] = (),
    ) -> Callable[[RecordHandler], RecordHandler]: ...

    @overload
    def subscriber(
        self,
        *topics: str,
        batch: Literal[True],
        max_batch: int | None = None,
        decoder: Decoder[Any] | None = None,
        key_decoder: Decoder[Any] | None = None,
        retry: RetryPolicy | None = None,
        dead_letter: DeadLetterPolicy | None = None,
        parallel_rebalance: bool | ParallelRebalance | None = None,
        ordering: Ordering | None = None,
        concurrency: int | None = None,
        middlewares: Sequence[Middleware] = (),
    ) -> Callable[[BatchHandler], BatchHandler]: ...

    @overload
    def subscriber(
        self,
        *topics: str,
        batch: bool = False,
        max_batch: int | None = None,
        decoder: Decoder[Any] | None = None,
        key_decoder: Decoder[Any] | None = None,
        retry: RetryPolicy | None = None,
        dead_letter: DeadLetterPolicy | None = None,
        parallel_rebalance: bool | ParallelRebalance | None = None,
        ordering: Ordering | None = None,
        concurrency: int | None = None,
        middlewares: Sequence[Middleware] = (),
    ) -> Callable[[H], H]: ...

    def subscriber(
        self,
        *topics: str,
        batch: bool = False,
        max_batch: int | None = None,
        decoder: Decoder[Any] | None = None,
        key_decoder: Decoder[Any] | None = None,
        retry: RetryPolicy | None = None,
        dead_letter: DeadLetterPolicy | None = None,
        parallel_rebalance: bool | ParallelRebalance | None = None,
        ordering: Ordering | None = None,
        concurrency: int | None = None,
        middlewares: Sequence[Middleware] = (),
    ) -> Callable[[H], H]:
        """Register an async handler for ``topics``; returns it unchanged.

        With ``batch=True`` the handler receives ``list[Record]`` of up to
        ``max_batch`` records from several partitions, each partition's in order.
        ``ordering`` and ``concurrency`` override the app's ``SchedulerConfig`` for
        this subscriber (batch handlers always keep each partition in order).

        ``key_decoder`` (or a ``Record[V, K]`` hint: ``Record[dict, str]``) decodes
        keys too; ``Record[V]`` keeps them as bytes.

        ``middlewares`` wrap each call of this handler inside the app's own
        (``App(middlewares=...)``), the first one outermost (docs, "Middlewares").

        :raises ConfigError: for no topics, a topic already subscribed, a dead-letter
            topic name Kafka does not allow, a sync handler, a handler that does not take
            exactly one record (list), or an unresolvable hint.
        """
        if not topics:
            raise ConfigError("topics", topics, "a subscriber needs at least one topic")
        taken = {t for sub in self._subscribers for t in sub.topics} & set(topics)
        if taken:
            raise ConfigError(
                "topics", sorted(taken), "already have a subscriber", "use one handler per topic"
            )
        settings = self.scheduler_config.overridden(
            max_batch=max_batch, ordering=ordering, concurrency=concurrency
        )
        policy = dead_letter or self.dead_letter
        policy.check_topics(topics)
        catch_up = (
            self.parallel_rebalance
            if parallel_rebalance is None
            else parallel_rebalance_setting(parallel_rebalance, self.ack)
        )

        def register(handler: H) -> H:
            index = len(self._subscribers)
            self._subscribers.append(build(handler))
            self._rebuilds.setdefault(handler, []).append(
                lambda: self._subscribers.__setitem__(index, build(handler))
            )
            bind_app(middlewares, self)
            return handler

        def build(handler: H) -> Subscriber:
            return new_subscriber(
                handler,
                topics=tuple(topics),
                batch=batch,
                settings=settings,
                decoder=decoder,
                key_decoder=key_decoder,
                retry=retry or self.retry,
                dead_letter=policy,
                parallel_rebalance=catch_up,
                middlewares=(*self.middlewares, *middlewares),
                publishes=self._publishes.get(handler, ()),
                publish=self.publish,
            )

        return register

    @property
    def subscribers(self) -> tuple[Subscriber, ...]:
        return tuple(self._subscribers)
