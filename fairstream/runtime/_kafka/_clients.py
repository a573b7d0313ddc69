"""The engine's edge to Kafka: the group consumer, the start-up checks, and the reads
of the rebalance room.

:class:`AIOKafkaClients` implements the ports of ``_ports`` (``KafkaClients`` and
``ShadowClients``) with aiokafka for real clusters; its producer side is
:class:`~fairstream.runtime._kafka._producing.Producing`, and each client starts
through :func:`~fairstream.runtime._kafka._starting.start_client`. Third-party errors
are wrapped here, at the boundary, into messages that say what to check.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from fairstream.config import ConsumerConfig, ProducerConfig, SecurityConfig
from fairstream.errors import ConfigError
from fairstream.runtime._kafka._admin import BrokerAdmin, stop_quietly
from fairstream.runtime._kafka._assignors import PlanningAssignor, make_assignor
from fairstream.runtime._kafka._cooperative_hooks import make_cooperative
from fairstream.runtime._kafka._direct_records import build_records_directly
from fairstream.runtime._kafka._drift import watch_drift
from fairstream.runtime._kafka._join import offer_all_at_once, report_join
from fairstream.runtime._kafka._member_data import Handover
from fairstream.runtime._kafka._membership import watch_membership
from fairstream.runtime._kafka._producing import Producing
from fairstream.runtime._kafka._pull_in_turn import pull_in_turn
from fairstream.runtime._kafka._refused_commits import keep_member_on_refused_commit
from fairstream.runtime._kafka._reset_by_rule import reset_by_rule
from fairstream.runtime._kafka._shadow_reader import AIOKafkaShadowReader, shadow_read_error
from fairstream.runtime._kafka._starting import start_client
from fairstream.runtime._kafka._static_leave import leave_when_stopped
from fairstream.runtime._ports import AppSettings, ConsumerPort, InTurn, ShadowReader
from fairstream.runtime._record import TP
from fairstream.runtime._subscriber import Subscriber

__all__ = ["AIOKafkaClients", "aiokafka_clients"]

log = structlog.get_logger(__name__)


class AIOKafkaClients:
    """aiokafka consumer and producer for one group member."""

    def __init__(
        self,
        *,
        bootstrap: str,
        group_id: str,
        consumer_config: ConsumerConfig,
        producer_config: ProducerConfig,
        security: SecurityConfig,
        assignor: PlanningAssignor,
        instance_id: str | None,
        dead_letter_topics: Mapping[str, str],
        admin: BrokerAdmin,
        exactly_once: bool = False,
    ) -> None:
        self.bootstrap = bootstrap
        self.group_id = group_id
        self._dead_letter_topics = dict(dead_letter_topics)
        self._common = {"bootstrap_servers": bootstrap, **security.aiokafka_kwargs()}
        self._assignor = assignor
        self._config = consumer_config
        self._instance_id = instance_id
        self._isolation = "read_committed" if exactly_once else "read_uncommitted"
        self._consumer = self._group_consumer()
        self._producing = Producing(
            bootstrap=bootstrap,
            common=self._common,
            client_id=f"{consumer_config.client_id}-producer",
            config=producer_config,
            transactions_of=group_id if exactly_once else None,
        )
        # The producer side (KafkaClients.publish, .dead_letter; TransactionalClients).
        self.transactions = self._producing.transactions
        self.publish = self._producing.publish
        self.dead_letter = self._producing.dead_letter
        self._admin = admin
        self._subscription: tuple[list[str], ConsumerRebalanceListener] | None = None
        self._rejoin_after_s = consumer_config.heartbeat_interval_ms / 1000

    def _group_consumer(self) -> AIOKafkaConsumer:
        config = self._config
        return AIOKafkaConsumer(
            **self._common,
            group_id=self.group_id,
            client_id=config.client_id,
            group_instance_id=self._instance_id,
            enable_auto_commit=False,
            auto_offset_reset=config.auto_offset_reset,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            fetch_max_bytes=config.fetch_max_bytes,
            max_partition_fetch_bytes=config.max_partition_fetch_bytes,
            metadata_max_age_ms=config.metadata_max_age_ms,
            partition_assignment_strategy=self._assignor.protocols,
            isolation_level=self._isolation,
        )

    @property
    def consumer(self) -> ConsumerPort:
        return self._consumer  # type: ignore[no-any-return]

    @property
    def member_id(self) -> str | None:
        coordinator = getattr(self._consumer, "_coordinator", None)
        member = getattr(coordinator, "member_id", None)
        return member if isinstance(member, str) and member else None

    @property
    def protocol(self) -> str | None:
        return self._assignor.protocol

    async def watch_drift(self) -> None:
        await watch_drift(self._assignor, lambda: self._consumer)

    @property
    def assignor(self) -> PlanningAssignor:
        """This member's assignor: what it planned last (as leader) and from which lags."""
        return self._assignor

    @property
    def handover(self) -> Handover:
        return self._assignor.handover

    async def start(self, topics: Sequence[str], listener: ConsumerRebalanceListener) -> None:
        """Connect, check the topics exist, create missing dead-letter topics, subscribe."""
        await self._producing.start()
        await self._start_consumer(self._consumer)
        self._hook(self._consumer)
        existing = await self._consumer.topics()
        missing = sorted(set(topics) - existing)
        if missing:
            raise ConfigError(
                "topics",
                missing,
                "not found on the cluster",
                "create them first (or check the spelling); fairstream does not auto-create "
                "source topics",
            )
        await self._ensure_dead_letter_topics(existing)
        self._subscription = (list(topics), listener)
        self._subscribe()

    async def _start_consumer(self, consumer: AIOKafkaConsumer) -> None:
        await start_client(consumer, "consumer", bootstrap=self.bootstrap, common=self._common)

    def _hook(self, consumer: AIOKafkaConsumer) -> None:
        """Fit a started group consumer with fairstream's hooks, before it subscribes.

        :raises ConfigError: ``cooperative=True`` on an aiokafka it cannot hook.
        """
        build_records_directly(consumer)
        offer_all_at_once(consumer)
        report_join(consumer, self._assignor)
        cooperative = self._assignor.cooperative
        if cooperative:
            make_cooperative(consumer, self._assignor, rejoin_after_s=self._rejoin_after_s)
        keep_member_on_refused_commit(consumer, rejoin=not cooperative)
        watch_membership(consumer, group_id=self.group_id, instance_id=self._instance_id)

    def _subscribe(self) -> None:
        assert self._subscription is not None, "start() subscribes first"
        topics, listener = self._subscription
        # The assignor's listener reads the group's lag after our revoke committed.
        self._consumer.subscribe(topics, listener=self._assignor.listener(self._consumer, listener))

    async def restart_consumer(self) -> None:
        # The new one starts first: if it cannot, the old one stays, to be replaced later.
        fresh = self._group_consumer()
        try:
            await self._start_consumer(fresh)
            self._hook(fresh)
        except BaseException:  # cancelled too: stop what start() opened (shadow_reader)
            with anyio.CancelScope(shield=True):
                await stop_quietly(fresh.stop)
            raise
        old, self._consumer = self._consumer, fresh
        with anyio.CancelScope(shield=True):
            await _raise_once_more(old)
            await stop_quietly(old.stop)
        self._assignor.consumer_restarted()
        self._subscribe()

    async def _ensure_dead_letter_topics(self, existing: set[str]) -> None:
        wanted = {dlq: src for src, dlq in self._dead_letter_topics.items() if dlq not in existing}
        if not wanted:
            return
        partitions = {
            dlq: len(self._consumer.partitions_for_topic(source) or {0})
            for dlq, source in wanted.items()
        }
        await self._admin.start()
        await self._admin.create_topics(partitions)
        log.info("dead_letter_topics_created", topics=sorted(wanted))

    # --- parallel rebalance (ShadowClients) -------------------------------------------

    def _group_less_consumer(
        self, role: str, *, reset: str = "earliest", fetch_max_wait_ms: int = 500
    ) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            **self._common,
            client_id=f"{self._config.client_id}-{role}",
            enable_auto_commit=False,
            fetch_max_wait_ms=fetch_max_wait_ms,
            auto_offset_reset=reset,
            fetch_max_bytes=self._config.fetch_max_bytes,
            max_partition_fetch_bytes=self._config.max_partition_fetch_bytes,
        )

    async def committed_offsets(self, tps: Collection[TP]) -> dict[TP, tuple[int, str] | None]:
        await self._admin.start()
        found = await self._admin.committed_offsets(
            self.group_id, [TopicPartition(*tp) for tp in tps]
        )
        return {
            (tp.topic, tp.partition): None if c is None else (c.offset, c.metadata)
            for tp, c in found.items()
        }

    def pull_in_turn(
        self, allowance: Callable[[Any], int], *, linger: float, busy: Callable[[], bool]
    ) -> InTurn | None:
        return pull_in_turn(self._consumer, allowance, linger=linger, busy=busy)

    async def partition_counts(self, topics: Collection[str]) -> dict[str, int]:
        await self._admin.start()
        return await self._admin.partition_counts(topics)

    async def offset_bounds(self, tps: Collection[TP]) -> dict[TP, tuple[int, int]]:
        await self._admin.start()
        found = await self._admin.offset_bounds(TopicPartition(*tp) for tp in tps)
        return {(tp.topic, tp.partition): bounds for tp, bounds in found.items()}

    async def log_start_offsets(self, tps: Collection[TP]) -> dict[TP, int]:
        await self._admin.start()
        found = await self._admin.log_start_offsets(TopicPartition(*tp) for tp in tps)
        return {(tp.topic, tp.partition): offset for tp, offset in found.items()}

    def seek(self, tp: TP, offset: int) -> None:
        self._consumer.seek(TopicPartition(*tp), offset)

    def reset_by_rule(self, tps: Collection[TP]) -> None:
        partitions = [TopicPartition(*tp) for tp in tps]
        reset_by_rule(self._consumer, partitions, self._config.auto_offset_reset)

    @asynccontextmanager
    async def shadow_reader(self, tp: TP) -> AsyncIterator[ShadowReader]:
        # A range start below the log start was deleted by retention: read on.
        # Stopped even when its start fails or is cancelled (a storm revokes the
        # partition while the shadow connects): aiokafka needs stop() to close what
        # start() opened, or it warns "Unclosed AIOKafkaConsumer" when collected.
        consumer = self._group_less_consumer("shadow")
        try:
            try:
                await consumer.start()
            except KafkaError as exc:
                raise shadow_read_error(tp, self.group_id, self.bootstrap, exc) from exc
            build_records_directly(consumer, replay=True)
            partition = TopicPartition(*tp)
            consumer.assign([partition])
            yield AIOKafkaShadowReader(consumer, partition, self.group_id, self.bootstrap)
        finally:
            with anyio.CancelScope(shield=True):
                await stop_quietly(consumer.stop)

    async def aclose(self) -> None:
        """Stop the consumer (leaving the group), flush the producer, close lag reads.

        Both are stopped even if their start failed: aiokafka needs stop() to release
        what start() opened, or it warns about unclosed clients at exit. The consumer
        goes first: stopping it cancels a rebalance listener still reading offsets
        through the admin client, which would otherwise reopen it after its close.
        A static member leaves only with ``ConsumerConfig.leave_group_on_stop``.
        """
        if self._config.leave_group_on_stop and self._instance_id:
            leave_when_stopped(self._consumer, self._instance_id)
        for close in (self._consumer.stop, self._admin.aclose, self._producing.aclose):
            await stop_quietly(close)
        await self._assignor.aclose()


async def _raise_once_more(consumer: AIOKafkaConsumer) -> None:
    """Let a broken consumer raise its error again, now from its coordinator task.

    The engine saw a copy that aiokafka hands to fetch waiters; unless the task's own
    exception is retrieved, asyncio logs "Task exception was never retrieved" when the
    task is collected. Records it returns instead are dropped, uncommitted: the engine
    revoked every partition before the restart, so the group reads them again.
    """
    with contextlib.suppress(KafkaError):
        await consumer.getmany(timeout_ms=0)


def aiokafka_clients(app: AppSettings, subscribers: Sequence[Subscriber]) -> AIOKafkaClients:
    """The clients an App runs on by default: aiokafka's, for the App's settings.

    :raises ConfigError: no bootstrap address.
    """
    if not app.bootstrap:
        raise ConfigError(
            "bootstrap",
            app.bootstrap,
            "no Kafka bootstrap address",
            "pass App(bootstrap='host:port') or set FAIRSTREAM_BOOTSTRAP",
        )
    dead_letter_topics = {
        topic: sub.dead_letter.topic_for(topic)
        for sub in subscribers
        if sub.dead_letter.on_error == "dead_letter"
        for topic in sub.topics
    }
    return AIOKafkaClients(
        bootstrap=app.bootstrap,
        group_id=app.group_id,
        consumer_config=app.consumer_config,
        producer_config=app.producer_config,
        security=app.security,
        assignor=make_assignor(
            app.assignor,
            bootstrap=app.bootstrap,
            group_id=app.group_id,
            auto_offset_reset=app.consumer_config.auto_offset_reset,
            security=app.security,
            replan_interval_s=app.replan_interval,
            cooperative=app.cooperative,
        ),
        instance_id=app.instance_id,
        dead_letter_topics=dead_letter_topics,
        admin=BrokerAdmin(app.bootstrap, security=app.security),
        exactly_once=app.processing == "exactly_once",
    )
