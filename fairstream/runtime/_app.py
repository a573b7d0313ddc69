"""``App``: what a user imports, decorates handlers with, and runs."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, final

import anyio
import anyio.abc
import structlog

from fairstream._policies import DeadLetterPolicy, RetryPolicy
from fairstream.assign import strategy_names
from fairstream.config import (
    ConsumerConfig,
    ParallelRebalance,
    ProducerConfig,
    SchedulerConfig,
    SecurityConfig,
    from_env,
)
from fairstream.errors import ConfigError, FairstreamError, HandlerAborted
from fairstream.runtime._engine import Ack, Engine
from fairstream.runtime._exactly_once import (
    EXACTLY_ONCE_COMMIT_INTERVAL,
    Processing,
    check_processing,
    check_subscribers,
)
from fairstream.runtime._hooks import HookRegistry, Hooks
from fairstream.runtime._kafka._clients import aiokafka_clients
from fairstream.runtime._middleware import Middleware, bind_app, check_middlewares, publish_hooks
from fairstream.runtime._ports import KafkaClients
from fairstream.runtime._record import Headers, Record, publish_bytes
from fairstream.runtime._registration import HandlerRegistry
from fairstream.runtime._stats import AppStats, prometheus_text
from fairstream.runtime._subscriber import Subscriber, parallel_rebalance_setting
from fairstream.runtime.group._assignor_checks import (
    Cooperative,
    check_cooperative,
    check_replan_interval,
)

__all__ = ["App", "Health"]

log = structlog.get_logger(__name__)

ClientsFactory = Callable[["App", list[Subscriber]], KafkaClients]


@dataclass(frozen=True, slots=True, kw_only=True)
class Health:
    """``alive``: the engine runs; ``ready``: it has joined its group and reaches the broker;
    ``oldest_in_flight_seconds``: how long the oldest record in hand has been in its
    handler (0.0: none is), so a handler that never returns shows on ``/health``."""

    alive: bool
    ready: bool
    state: str
    oldest_in_flight_seconds: float = 0.0


async def _stop_on_signals(engine: Engine) -> None:
    """The first SIGINT/SIGTERM drains and commits; a second one cancels the handlers."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        received = 0
        async for signum in signals:
            received += 1
            log.info("shutdown_requested", signal=signal.Signals(signum).name)
            engine.request_stop(now=received > 1)


@final
class App(HandlerRegistry, HookRegistry):
    """A consumer group member with decorated handlers.

    >>> app = App(bootstrap="127.0.0.1:9092", group_id="orders", assignor="lag")
    >>> @app.subscriber("orders")
    ... async def handle(record: Record[dict]) -> None:
    ...     ...

    Run it with ``await app.run()`` (stops on SIGINT/SIGTERM), ``async with app:``,
    ``FastAPI(lifespan=app.lifespan)`` or ``fairstream run module:app``.

    ``parallel_rebalance=True`` or ``ParallelRebalance(threshold=..., handoff=...)``
    (KIP-333; per subscriber too) serves new records at once when a partition
    arrives with a backlog, and replays the backlog beside them with
    ``record.replay`` set (docs, "Parallel rebalance").

    ``assignor`` is a strategy name or several, best first:
    ``assignor=["lag", "roundrobin", "range"]`` joins a group of other clients'
    consumers under the protocol they share (docs, "Migrating an existing group").
    With ``assignor="lag"``, ``replan_interval=300`` re-reads the group's lag every 300
    seconds and rebalances when a new plan beats the current one (docs, "Assignors").

    ``cooperative=True`` (``assignor="sticky"`` or ``"lag"``; KIP-429): members keep
    handling the partitions they keep while the group rebalances, instead of all
    stopping at every join; a moving partition is revoked by its owner in one round
    and assigned in the next; ``"upgrade"`` is the first step of the rolling upgrade
    (docs, "Cooperative rebalancing").

    ``@app.publisher("topic")`` publishes a handler's return value;
    ``@app.on_startup``/``@app.on_shutdown`` hooks and
    ``@app.on_partitions_assigned``/``@app.on_partitions_revoked`` listeners run under
    every way of running it (docs, "Publishers, lifecycle hooks and rebalance
    listeners").

    ``processing="exactly_once"`` commits what a handler publishes, its dead letters
    and the group's offsets in one Kafka transaction per input partition (docs,
    "Exactly-once").

    :raises ConfigError: for an unknown, repeated or missing assignor, a bad threshold,
        a ``replan_interval`` without ``lag`` or not above 0, a missing bootstrap,
        ``cooperative`` with another strategy than ``sticky`` or ``lag``.
    """

    def __init__(
        self,
        *,
        group_id: str,
        bootstrap: str | None = None,
        assignor: str | Sequence[str] = "fair",
        consumer: ConsumerConfig | None = None,
        producer: ProducerConfig | None = None,
        scheduler: SchedulerConfig | None = None,
        retry: RetryPolicy | None = None,
        dead_letter: DeadLetterPolicy | None = None,
        security: SecurityConfig | None = None,
        instance_id: str | None = None,
        ack: Ack = "auto",
        parallel_rebalance: bool | ParallelRebalance = False,
        clients: ClientsFactory | None = None,
        middlewares: Sequence[Middleware] = (),
        replan_interval: float | None = None,
        cooperative: Cooperative = False,
        processing: Processing = "at_least_once",
    ) -> None:
        env = from_env()
        self.bootstrap = bootstrap or env.get("bootstrap", "")
        if not group_id:
            raise ConfigError("group_id", group_id, "must not be empty")
        if ack not in ("auto", "manual"):
            raise ConfigError("ack", ack, "unknown mode", "use 'auto' or 'manual'")
        self.parallel_rebalance = parallel_rebalance_setting(parallel_rebalance, ack)
        self.group_id = group_id
        self.assignor = assignor
        strategy_names(assignor, field="assignor")  # fail here, not at the first join
        self.replan_interval = check_replan_interval(assignor, replan_interval)
        self.cooperative = check_cooperative(assignor, cooperative)
        self.consumer_config = consumer or ConsumerConfig()
        self.producer_config = producer or ProducerConfig()
        self.processing: Processing = check_processing(processing, ack, parallel_rebalance)
        self.scheduler_config = scheduler or (
            SchedulerConfig(commit_interval=EXACTLY_ONCE_COMMIT_INTERVAL)
            if processing == "exactly_once"
            else SchedulerConfig()
        )
        self.retry = retry or RetryPolicy()
        self.dead_letter = dead_letter or DeadLetterPolicy()
        self.security = security or SecurityConfig()
        self.instance_id = instance_id or env.get("instance_id")
        self.ack: Ack = ack
        self._clients_factory = clients or aiokafka_clients
        self.middlewares = tuple(middlewares)
        check_middlewares(self.middlewares)  # a bad middleware fails here, not at registration
        self._publish_hooks = publish_hooks(self.middlewares)
        bind_app(self.middlewares, self)
        self._subscribers: list[Subscriber] = []
        self._publishes = {}
        self._rebuilds = {}
        self._hooks = Hooks()
        self._engine: Engine | None = None
        self._clients: KafkaClients | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._failure: FairstreamError | None = None

    def __repr__(self) -> str:
        return (
            f"App(group_id={self.group_id!r}, bootstrap={self.bootstrap!r}, "
            f"assignor={self.assignor!r})"
        )

    # --- running --------------------------------------------------------------------

    def _new_engine(self) -> Engine:
        if not self._subscribers:
            raise ConfigError(
                "subscribers", [], "the app has no handler", "decorate one with @app.subscriber"
            )
        if self.processing == "exactly_once":
            check_subscribers(self._subscribers, offset_map=self.scheduler_config.offset_map)
        self._clients = self._clients_factory(self, self._subscribers)
        self._engine = Engine(
            group_id=self.group_id,
            subscribers=self._subscribers,
            clients=self._clients,
            scheduler=self.scheduler_config,
            ack=self.ack,
            auto_offset_reset=self.consumer_config.auto_offset_reset,
            listeners=self._hooks,
        )
        return self._engine

    async def run(self) -> None:
        """Consume until SIGINT/SIGTERM or :meth:`stop`; drain, commit, leave, return.

        The first signal stops handing out records and waits for those in hand (up
        to ``shutdown_timeout``); a second one cancels them. Either way what finished
        is committed before the app leaves its group.

        :raises HandlerError: a handler failed with ``on_error='stop'``.
        :raises BrokerError: the cluster cannot be reached.
        :raises ConfigError: a subscribed topic does not exist.
        :raises KeyboardInterrupt: a handler raised it (after the commit).
        :raises SystemExit: a handler raised it (after the commit).
        """
        async with self:
            assert self._engine is not None
            engine = self._engine
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_stop_on_signals, engine)
                await engine.stopped.wait()
                tasks.cancel_scope.cancel()

    async def wait_ready(self) -> None:
        """Return once the app has joined its group and received its first assignment.

        Bound it yourself (``with anyio.fail_after(30): await app.wait_ready()``).
        """
        if self._engine is None:
            raise ConfigError("app", self.group_id, "is not running", "start it first")
        await self._engine.joined.wait()

    def stop(self) -> None:
        """Ask a running app to drain, commit and leave its group."""
        if self._engine is not None:
            self._engine.request_stop()

    async def __aenter__(self) -> App:
        await self._hooks.start()  # before any client is built: a failing hook leaves none
        try:
            engine = self._new_engine()
            await engine.start()
        except BaseException:
            await self._hooks.stop()
            raise
        self._failure = None
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._serve, engine, self._tasks.cancel_scope)
        return self

    async def _serve(self, engine: Engine, scope: anyio.CancelScope) -> None:
        try:
            await engine.serve()
        except FairstreamError as exc:
            # Surface the error from __aexit__ as itself, not inside an ExceptionGroup,
            # and cancel the body of the ``async with`` block: the app is gone.
            self._failure = exc
            scope.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self.stop()
        tasks, self._tasks = self._tasks, None
        try:
            suppressed = bool(tasks is not None and await tasks.__aexit__(exc_type, exc, tb))
        finally:
            await self._hooks.stop()
        failure = self._failure
        if isinstance(failure, HandlerAborted) and isinstance(
            failure.cause, KeyboardInterrupt | SystemExit
        ):
            # Raised here, in the caller's task, they end the process as Python's own
            # would; raised inside a task, asyncio would hang tearing the loop down.
            raise failure.cause
        if failure is not None:
            raise failure
        return suppressed

    @asynccontextmanager
    async def lifespan(self, _asgi_app: object = None) -> AsyncIterator[None]:
        """An ASGI lifespan: ``FastAPI(lifespan=app.lifespan)`` consumes while it serves."""
        async with self:
            yield

    # --- using it -------------------------------------------------------------------

    async def publish(
        self,
        topic: str,
        value: object,
        *,
        key: bytes | str | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> None:
        """Send a record through the app's producer and wait for the broker's ack."""
        if self._clients is None or self._engine is None or not self._engine.connected:
            raise ConfigError(
                "app",
                self.group_id,
                "is not running",
                "publish from a handler or inside 'async with app'",
            )
        raw_key = key.encode() if isinstance(key, str) else key
        for hook in self._publish_hooks:
            headers = hook(topic, headers)
        await self._clients.publish(
            topic, publish_bytes(value), key=raw_key, headers=headers, partition=partition
        )

    async def commit(self, record: Record[Any]) -> bool:
        """With ``ack='manual'``: ``record`` and all before it in its partition are done.

        The group's committed offset becomes exactly the highest offset acknowledged
        so far plus one: records the handler has not acknowledged (buffered, say) are
        never committed over. Returns ``True`` once the broker has the offset;
        ``False`` (and a log line) when this member no longer owns the partition (its
        new owner redelivers what was not committed) or the broker refused the commit
        for now (the periodic commit retries it).
        """
        if self._engine is None:
            raise ConfigError("app", self.group_id, "is not running", "commit from a handler")
        return await self._engine.acknowledge((record.topic, record.partition), record.offset + 1)

    def pause(self, topic: str, partition: int) -> None:
        """Stop fetching ``topic``/``partition`` without giving it up (no rebalance).

        Records already fetched into its queue (a queue target's worth at most) are
        still handled and committed; nothing more is read until :meth:`resume`. The
        pause lasts across rebalances while this member owns the partition (docs,
        "Pausing a partition").
        """
        tp = self._subscribed(topic, partition)
        self._running_engine("pause").pause(tp)

    def resume(self, topic: str, partition: int) -> None:
        """Fetch a partition :meth:`pause` stopped again, from where it stopped."""
        tp = self._subscribed(topic, partition)
        self._running_engine("resume").resume(tp)

    def _running_engine(self, what: str) -> Engine:
        if self._engine is None:
            raise ConfigError(
                "app",
                self.group_id,
                "is not running",
                f"{what} inside 'async with app' or a handler",
            )
        return self._engine

    def _subscribed(self, topic: str, partition: int) -> tuple[str, int]:
        if not any(topic in sub.topics for sub in self._subscribers):
            raise ConfigError(
                "topic", topic, "has no subscriber in this app", "pause a subscribed topic"
            )
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ConfigError(
                "partition", partition, "is not a partition number", "give an int >= 0"
            )
        return (topic, partition)

    def stats(self) -> AppStats:
        """Lag, queue depth, rates and latency per owned partition."""
        if self._engine is None:
            return AppStats.created(self.group_id)
        if self._clients is None:
            return self._engine.stats(None)
        return self._engine.stats(self._clients.member_id, self._clients.protocol)

    def metrics_text(self) -> str:
        """:meth:`stats` in the Prometheus text format, for a ``/metrics`` endpoint."""
        return prometheus_text(self.stats())

    def health(self) -> Health:
        """``ready`` needs the group joined and the broker answering (asked every 2 s)."""
        engine = self._engine
        state = engine.state if engine else "created"
        member = self._clients.member_id if self._clients else None
        return Health(
            alive=state in ("starting", "running"),
            ready=state == "running"
            and member is not None
            and engine is not None
            and engine.reachable,
            state=state,
            oldest_in_flight_seconds=engine.oldest_in_flight() if engine else 0.0,
        )
