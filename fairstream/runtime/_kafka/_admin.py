"""Broker queries behind planning: offsets, lags and who is in a group.

Used by the assignor adapters (before each join), by ``fairstream plan --bootstrap``
and by the runtime. Every aiokafka failure becomes a :class:`BrokerError` that says
which query failed.

End offsets come from a fetch's high watermark, not from ListOffsets(latest):
tansu answers the latter with the last batch's base offset + 1, which undercounts
lag. The fetch starts at ListOffsets(latest) - a valid offset at or before the
true end on every engine - so it reads at most one batch per partition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, final

import anyio
import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError
from aiokafka.protocol.metadata import MetadataRequest

from fairstream.assign import Assignment, GroupSnapshot, partition_lag
from fairstream.config import SecurityConfig
from fairstream.errors import BrokerError, ConfigError, describe
from fairstream.ranges import from_commit

__all__ = [
    "AutoOffsetReset",
    "BrokerAdmin",
    "Committed",
    "GroupDescription",
    "MemberDescription",
    "may_pass",
    "stop_quietly",
]

log = structlog.get_logger(__name__)

AutoOffsetReset = Literal["latest", "earliest"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Committed:
    """A group's committed offset for one partition, with its metadata string."""

    offset: int
    metadata: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberDescription:
    """One group member as the coordinator sees it."""

    member_id: str
    client_id: str
    host: str
    topics: frozenset[str]
    assignment: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDescription:
    """A consumer group's state, protocol (the assignor's name) and members."""

    group_id: str
    state: str
    protocol: str
    members: Mapping[str, MemberDescription]

    def current(self) -> Assignment:
        """The assignment the members hold now."""
        return Assignment({m: d.assignment for m, d in self.members.items()})


async def high_watermarks(
    consumer: AIOKafkaConsumer,
    wanted: Sequence[TopicPartition],
    *,
    deadline: float,
    bootstrap: str,
    poll_ms: int,
) -> dict[TopicPartition, int]:
    """Fetch on an assigned consumer until every partition reported its high watermark.

    The high watermark of a fetch is the true end offset on every engine, unlike
    ListOffsets(latest) on tansu.

    :raises BrokerError: some partition gave no fetch response before ``deadline``
        (a ``time.monotonic()`` value).
    """
    while any(consumer.highwater(tp) is None for tp in wanted):
        if time.monotonic() > deadline:
            missing = [tp for tp in wanted if consumer.highwater(tp) is None]
            raise BrokerError(
                f"no fetch response for {len(missing)} partition(s), e.g. {missing[0]}, "
                "in time; check that their leaders are up",
                bootstrap=bootstrap,
                retriable=True,
            )
        await consumer.getmany(*wanted, timeout_ms=poll_ms)
    return {tp: consumer.highwater(tp) for tp in wanted}


def may_pass(exc: BaseException) -> bool:
    """Whether the same call may succeed later: aiokafka's ``retriable``, and timeouts.

    aiokafka marks ``KafkaTimeoutError`` not retriable, but a request that timed out
    because the broker was away or the network stalled is worth another try.
    """
    return isinstance(exc, KafkaTimeoutError) or bool(getattr(exc, "retriable", False))


async def stop_quietly(close: Callable[[], Awaitable[None]]) -> None:
    """Stop an aiokafka client; what goes wrong then is logged: nothing is left to do.

    aiokafka 0.14's fetcher, closing, cancels its pending requests and awaits them
    (``task.cancel(); await task``), so a consumer stopped while a request waits out
    a retry after a lost connection raises that request's ``CancelledError`` from
    ``stop()``, before closing its connections. Nothing cancelled us: re-raising it
    would end the engine without a word and leave the other clients open. So it is
    logged, and the connections are closed here (``_client``, private, guarded).
    """
    try:
        await close()
    except KafkaError as exc:
        log.warning("client_stop_failed", reason=describe(exc))
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        log.warning("client_stop_failed", reason="aiokafka cancelled its own request as it stopped")
        client = getattr(getattr(close, "__self__", None), "_client", None)
        if client is not None:
            await client.close()


@final
class BrokerAdmin:
    """A connection for planning queries; ``async with BrokerAdmin(bootstrap) as admin:``.

    Holds one admin client and one group-less consumer (for fetch high watermarks).
    One per app: the member's clients (KIP-333 reads, dead-letter topics) and its lag
    assignor share it, so a member holds one admin connection, not one per use.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        request_timeout_ms: int = 30_000,
        security: SecurityConfig | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self._timeout_ms = request_timeout_ms
        self._security = (security or SecurityConfig()).aiokafka_kwargs()
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._connecting = anyio.Lock()
        """Held while the clients start or close. The app's users of this admin (the
        lag listener, the drift watch, offset reads) call :meth:`start` side by side:
        without it each made its own pair and the last one kept won, the others never
        closed ("Unclosed AIOKafkaConsumer" when collected, seen in cooperative tests
        on a loaded machine), and a close during a start left that start's pair open."""

    async def start(self) -> None:
        """Connect both clients; idempotent."""
        async with self._connecting:
            if self._admin is None:
                self._admin, self._consumer = await self._connect()

    async def _connect(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap,
            client_id="fairstream-admin",
            request_timeout_ms=self._timeout_ms,
            **self._security,
        )
        consumer = self._probe()
        try:
            await admin.start()
            await consumer.start()
        except BaseException as exc:
            # Cancelled too (a readiness probe's time limit): close what was opened.
            with anyio.CancelScope(shield=True):
                await stop_quietly(admin.close)
                await stop_quietly(consumer.stop)
            if isinstance(exc, KafkaError):
                raise self._error("could not connect to the cluster", exc) from exc
            raise
        return admin, consumer

    async def aclose(self) -> None:
        """Close both clients; safe to call twice."""
        async with self._connecting:
            admin, consumer = self._admin, self._consumer
            self._admin = self._consumer = None
            if consumer is not None:
                await stop_quietly(consumer.stop)
            if admin is not None:
                await stop_quietly(admin.close)

    async def __aenter__(self) -> BrokerAdmin:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _probe(self) -> AIOKafkaConsumer:
        """A group-less consumer that reads a little and never waits long for data."""
        return AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id="fairstream-admin",
            enable_auto_commit=False,
            request_timeout_ms=self._timeout_ms,
            fetch_max_wait_ms=10,
            max_partition_fetch_bytes=64 * 1024,
            auto_offset_reset="latest",
            **self._security,
        )

    def _clients(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        if self._admin is None or self._consumer is None:
            raise ConfigError(
                "BrokerAdmin", self.bootstrap, "not started", "use 'async with BrokerAdmin(...)'"
            )
        return self._admin, self._consumer

    def _error(self, what: str, exc: BaseException) -> BrokerError:
        return BrokerError(
            f"{what}: {describe(exc)}", bootstrap=self.bootstrap, retriable=may_pass(exc)
        )

    async def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Topic -> partition count, for the topics that exist (others are left out).

        One metadata request that names the topics with auto-creation off (Metadata
        v4, any broker with static membership), so a missing topic is answered
        unknown, not created (noida creates one a plain request names). It is the
        app's reachability probe every 2 s: asking for every topic first and
        converting both answers to dicts (aiokafka's ``list_topics`` and
        ``describe_topics``) cost 42 ms of CPU a probe at 2,048 partitions, ~0.1 us
        a record of a steady drain (``benchmarks/notes/per_record_cost.md``).
        """
        admin, _ = self._clients()
        wanted = set(topics)
        request = MetadataRequest(sorted(wanted), allow_auto_topic_creation=False)
        try:
            response = await admin._send_request(request)
        except KafkaError as exc:
            raise self._error("could not read topic metadata", exc) from exc
        # (error_code, topic, [is_internal,] partitions) by version.
        return {
            entry[1]: len(entry[-1])
            for entry in response.topics
            if entry[0] == 0 and entry[1] in wanted and entry[-1]
        }

    async def end_offsets(
        self, partitions: Iterable[TopicPartition], *, timeout_s: float = 30.0
    ) -> dict[TopicPartition, int]:
        """The high watermark of each partition, read from a fetch response."""
        self._clients()
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        deadline = time.monotonic() + timeout_s
        # A fresh consumer per call, stopped while still assigned: aiokafka 0.14 can
        # hang in stop() after an unsubscribe() with a fetch in flight. Assigned, it
        # starts at ListOffsets(latest), at or before the true end on every engine.
        consumer = self._probe()
        try:
            await consumer.start()
            consumer.assign(wanted)
            return await high_watermarks(
                consumer, wanted, deadline=deadline, bootstrap=self.bootstrap, poll_ms=100
            )
        except KafkaError as exc:
            raise self._error("could not read end offsets", exc) from exc
        finally:
            await stop_quietly(consumer.stop)

    async def log_start_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The first retained offset of each partition."""
        _, consumer = self._clients()
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        try:
            offsets: dict[TopicPartition, int] = await consumer.beginning_offsets(wanted)
        except KafkaError as exc:
            raise self._error("could not read log start offsets", exc) from exc
        return offsets

    async def offset_bounds(
        self, partitions: Iterable[TopicPartition], *, timeout_s: float = 30.0
    ) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, end offset) of each partition: what is retained, and where it ends."""
        wanted = sorted(set(partitions))
        ends = await self.end_offsets(wanted, timeout_s=timeout_s)
        starts = await self.log_start_offsets(wanted)
        return {tp: (starts[tp], ends[tp]) for tp in wanted}

    async def create_topics(self, partitions: Mapping[str, int]) -> None:
        """Create topics with the given partition counts; ones that exist are left alone."""
        admin, _ = self._clients()
        new = [NewTopic(topic, count, 1) for topic, count in sorted(partitions.items())]
        try:
            await admin.create_topics(new)
        except TopicAlreadyExistsError:
            pass
        except KafkaError as exc:
            raise self._error(f"could not create topics {sorted(partitions)}", exc) from exc

    async def committed_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, Committed | None]:
        """The group's commit (offset and metadata) per partition; ``None`` if never committed."""
        admin, _ = self._clients()
        # Always name the partitions: tansu fails an OffsetFetch for "all partitions".
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        try:
            found = await admin.list_consumer_group_offsets(group_id, partitions=wanted)
        except KafkaError as exc:
            raise self._error(
                f"could not read group {group_id!r}'s committed offsets", exc
            ) from exc
        result: dict[TopicPartition, Committed | None] = dict.fromkeys(wanted)
        for tp, meta in found.items():
            if meta.offset >= 0:
                result[tp] = Committed(offset=meta.offset, metadata=from_commit(meta.metadata))
        return result

    async def topic_lags(
        self,
        group_id: str,
        partitions: Mapping[str, int],
        *,
        auto_offset_reset: AutoOffsetReset = "latest",
    ) -> dict[str, tuple[int, ...]]:
        """Topic -> the group's lag per partition, for topics with the given counts."""
        wanted = [TopicPartition(t, p) for t, count in partitions.items() for p in range(count)]
        ends = await self.end_offsets(wanted)
        committed = await self.committed_offsets(group_id, wanted)
        starts = await self.log_start_offsets(wanted)
        return {
            topic: tuple(
                partition_lag(
                    ends[tp],
                    None if (c := committed[tp]) is None else c.offset,
                    starts[tp],
                    auto_offset_reset,
                )
                for tp in (TopicPartition(topic, p) for p in range(count))
            )
            for topic, count in partitions.items()
        }

    async def describe_group(self, group_id: str) -> GroupDescription:
        """Members with their subscriptions and current assignment, from the coordinator."""
        admin, _ = self._clients()
        try:
            responses = await admin.describe_consumer_groups([group_id])
        except KafkaError as exc:
            raise self._error(f"could not describe group {group_id!r}", exc) from exc
        group = responses[0].to_object()["groups"][0]
        if group["error_code"]:
            raise BrokerError(
                f"describing group {group_id!r} failed with error code {group['error_code']}",
                bootstrap=self.bootstrap,
            )
        members: dict[str, MemberDescription] = {}
        for member in group["members"]:
            topics: frozenset[str] = frozenset()
            owned: dict[str, tuple[int, ...]] = {}
            if group["protocol_type"] == "consumer" and member["member_metadata"]:
                metadata = ConsumerProtocol.METADATA.decode(member["member_metadata"])
                topics = frozenset(metadata.subscription)
            if group["protocol_type"] == "consumer" and member["member_assignment"]:
                assignment = ConsumerProtocol.ASSIGNMENT.decode(member["member_assignment"])
                owned = {topic: tuple(ps) for topic, ps in assignment.assignment}
            members[member["member_id"]] = MemberDescription(
                member_id=member["member_id"],
                client_id=member["client_id"],
                host=member["client_host"],
                topics=topics,
                assignment=owned,
            )
        return GroupDescription(
            group_id=group_id, state=group["state"], protocol=group["protocol"], members=members
        )

    async def group_snapshot(
        self, group_id: str, *, auto_offset_reset: AutoOffsetReset = "latest"
    ) -> tuple[GroupSnapshot, Assignment]:
        """The planner's view of a live group, and the assignment its members hold now.

        Topics that no longer exist are dropped from subscriptions (with a warning),
        since no plan can hand them out.
        """
        group = await self.describe_group(group_id)
        subscribed = {t for member in group.members.values() for t in member.topics}
        counts = await self.partition_counts(subscribed)
        for topic in sorted(subscribed - counts.keys()):
            log.warning("topic_missing", group_id=group_id, topic=topic, reason="not_in_metadata")
        lag = await self.topic_lags(group_id, counts, auto_offset_reset=auto_offset_reset)
        snapshot = GroupSnapshot(
            members={m: d.topics & counts.keys() for m, d in group.members.items()},
            partitions=counts,
            lag=lag,
        )
        return snapshot, group.current()
