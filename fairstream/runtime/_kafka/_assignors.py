"""aiokafka adapters around the pure planners in :mod:`fairstream.assign`.

aiokafka's coordinator calls ``assignor.assign(cluster, members)`` on whatever
object sits in ``partition_assignment_strategy`` (the base class declares it a
classmethod, but the call is made on the list entry), so an *instance* works and
keeps its state to itself - unlike aiokafka's sticky assignor, whose class-level
state every consumer in a process shares (aiokafka issue #1175).

``assign`` runs synchronously inside the coordinator, so it never touches the
network. For ``lag``, each member reads the group's lags just before it joins
(aiokafka awaits the listener's ``on_partitions_revoked`` before every join): for
its own subscription, every topic the members reported at the last DescribeGroups
(KIP-49's rolling update) and the topics it saw when it last planned. A topic whose
lag is missing is planned by count (``lag_snapshot_partial``), and the leader asks
for one follow-up rebalance per newly missing topic, never a loop. A missing or
stale reading makes the leader plan ``fair`` (``lag_snapshot_unusable``, ``reason``).
Each member reports the partitions it owns in its join metadata, so the leader can
hand the planners a previous assignment whoever led last time, and the progress a
refused revoke commit left unsaved, which the leader hands to each partition's next
owner (:mod:`fairstream.runtime._kafka._member_data`). It reports the generation it got them
in too, which the leader writes into every assignment, so a stale claim loses to the
current owner's (:func:`fairstream.assign.resolve_owned`). The generation and the
static members' instance ids come from the JoinGroup answer, which aiokafka keeps
from assignors (:func:`fairstream.runtime._kafka._join.report_join` hands them over).

A member may offer several strategies, best first, to join a group of other
clients' consumers: their protocol names are in
:mod:`fairstream.runtime.group._protocol_names`, their aiokafka entries in
:mod:`fairstream.runtime._kafka._strategy_offers`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import final

import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from fairstream.assign import (
    STRATEGIES,
    Assignment,
    GroupSnapshot,
    TopicPartition,
    strategy_names,
)
from fairstream.assign.claims import NO_GENERATION
from fairstream.config import SecurityConfig
from fairstream.errors import BrokerError, ConfigError
from fairstream.runtime._kafka._admin import AutoOffsetReset, BrokerAdmin
from fairstream.runtime._kafka._cooperative_hooks import hold_back
from fairstream.runtime._kafka._lag_listener import RefreshingListener
from fairstream.runtime._kafka._member_data import (
    Handover,
    decode_generation,
    decode_handover,
    encode_handover,
    encode_owned,
    read_reports,
    reported_owners,
    route_unsaved,
)
from fairstream.runtime._kafka._strategy_offers import StrategyOffer
from fairstream.runtime.group import _assignor_checks as checks
from fairstream.runtime.group._protocol_names import protocol_name

__all__ = [
    "LagReading",
    "PlanRecord",
    "PlanningAssignor",
    "make_assignor",
]

log = structlog.get_logger(__name__)

_FALLBACK = "fair"


@dataclass(frozen=True, slots=True, kw_only=True)
class LagReading:
    """The group's lag per partition, and when (on the assignor's clock) it was read."""

    lag: Mapping[str, tuple[int, ...]]
    taken_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRecord:
    """What the leader planned last: its input and output, for logs and tests."""

    strategy: str
    protocol: str
    snapshot: GroupSnapshot
    previous: Assignment | None
    assignment: Assignment
    by_count: frozenset[str] = frozenset()
    """Topics whose lag was unknown, planned by count."""
    contested: frozenset[TopicPartition] = frozenset()
    """Partitions claimed by two members of the newest generation claiming them."""
    generation: int = NO_GENERATION
    """The generation planned for (-1: unknown, no JoinGroup answer was seen)."""


@final
class PlanningAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """fairstream's strategies, best first, as aiokafka ``partition_assignment_strategy``.

    The object itself is the entry for the first strategy; :attr:`protocols` holds
    it and one ``StrategyOffer`` per further strategy, all sharing this state
    (owned partitions, lag reading). Build it with :func:`make_assignor`; give
    every consumer its own instance.
    """

    version = 0

    def __init__(
        self,
        strategy: str | Sequence[str],
        *,
        bootstrap: str | None = None,
        group_id: str | None = None,
        auto_offset_reset: AutoOffsetReset = "latest",
        max_lag_age_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        security: SecurityConfig | None = None,
        replan_interval_s: float | None = None,
        cooperative: checks.Cooperative = False,
    ) -> None:
        self.strategies = strategy_names(strategy)
        mode = checks.check_cooperative(self.strategies, cooperative)
        self.cooperative = mode is True
        """Whether this member rebalances cooperatively (else it offers ``-coop`` at most)."""
        if "lag" in self.strategies and (not bootstrap or not group_id):
            raise ConfigError(
                "assignor",
                strategy,
                "the lag strategy reads the group's lag from the cluster",
                "pass bootstrap= and group_id= to make_assignor",
            )
        self.replan_interval_s = checks.check_replan_interval(strategy, replan_interval_s)
        self.strategy = self.strategies[0]
        self._bootstrap = bootstrap or ""
        self._group_id = group_id or ""
        self._reset: AutoOffsetReset = auto_offset_reset
        self._max_age = max_lag_age_s
        self._clock = clock
        self._security = security
        self._admin: BrokerAdmin | None = None
        self._reading: LagReading | None = None
        self._owned: dict[str, list[int]] = {}
        self._generation = NO_GENERATION
        self._joining: tuple[int, Mapping[str, str]] | None = None
        self._restarts = 0
        self.handover = Handover()
        """Unsaved progress to report at the next join, and what the last assignment handed us."""
        self._group_topics: frozenset[str] = frozenset()
        self._follow_up: frozenset[str] = frozenset()
        self._followed_up: frozenset[str] = frozenset()
        self._planned = False
        self.leading = False
        """Whether this member planned the generation it is in (it led the group)."""
        self.last_plan: PlanRecord | None = None
        self.protocol: str | None = None
        """The protocol the group chose at this member's last assignment."""
        self.protocols: tuple[AbstractPartitionAssignor, ...] = (
            self,
            *(StrategyOffer(self, s, self.cooperative) for s in self.strategies[1:]),
            *(StrategyOffer(self, s, True) for s in self.strategies if mode == "upgrade"),
        )
        """What to pass as ``partition_assignment_strategy``, in order of preference."""

    @property
    def name(self) -> str:
        """The first strategy's protocol name in JoinGroup (see :func:`protocol_name`)."""
        return protocol_name(self.strategy, self.cooperative)

    # --- aiokafka's assignor interface (synchronous, no I/O) ---------------------

    def metadata(
        self, topics: Iterable[str], *, owned: bool = True
    ) -> ConsumerProtocolMemberMetadata:
        """Join metadata: our subscription, and the partitions we own in the user data.

        After :meth:`consumer_restarted` the user data also counts the restarts, and
        after a refused revoke commit it holds the progress left unsaved.
        """
        owns = self._owned if owned else {}
        user_data = encode_owned(owns, self._restarts, self.handover.outgoing, self._generation)
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), user_data)

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        """Remember what we were given, to report it at the next join."""
        self.assigned(self.name, assignment)

    def assigned(self, protocol: str, assignment: ConsumerProtocolMemberAssignment) -> None:
        """The group gave us ``assignment`` under ``protocol`` (whoever planned it)."""
        self._owned = {topic: sorted(ps) for topic, ps in assignment.assignment if ps}
        self._generation = decode_generation(assignment.user_data)
        self.handover.outgoing = {}  # the leader has seen it: handed over or dropped
        self.handover.incoming = decode_handover(assignment.user_data)
        self.protocol = protocol
        self.leading, self._planned = self._planned, False
        log.info(
            "group_protocol_chosen",
            protocol=protocol,
            preferred=self.name,
            partitions=sum(len(ps) for _, ps in assignment.assignment),
        )

    def consumer_restarted(self) -> None:
        """Own nothing, and make the next join's metadata differ from the last one's.

        A broker may answer a static member's rejoin with unchanged metadata from the
        slot it kept for that instance, without a rebalance: noida does so even when
        the slot holds no assignment (the member was left out of the generation), and
        aiokafka 0.14 cannot decode the empty one. Changed metadata makes it rebalance.
        """
        self._owned = {}
        self._generation = NO_GENERATION
        self._restarts += 1

    def joining(self, generation: int, instance_ids: Mapping[str, str]) -> None:
        """The JoinGroup answer this leader is about to plan: its generation, and the
        ``group.instance.id`` of each static member (member_id -> instance id)."""
        self._joining = (generation, dict(instance_ids))

    def assign(
        self, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """Plan the group (leader only) with the first strategy."""
        return self.plan_group(self.strategy, cluster, members, self.cooperative)

    def plan_group(
        self,
        chosen: str,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
        cooperative: bool = False,
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """Plan the group (leader only) with the strategy whose protocol the group chose.

        Other clients' members report no owned partitions; the planners treat
        their partitions as unowned.
        """
        subscriptions = {m: frozenset(meta.subscription) for m, meta in members.items()}
        counts: dict[str, int] = {}
        for topic in sorted(set().union(*subscriptions.values())):
            partitions = cluster.partitions_for_topic(topic)
            if partitions:
                counts[topic] = len(partitions)
            else:
                log.warning("topic_missing", topic=topic, reason="not_in_metadata")
        self._group_topics = frozenset(counts)
        strategy, reason = chosen, ""
        lag: dict[str, tuple[int, ...]] = {}
        by_count: frozenset[str] = frozenset()
        if strategy == "lag":
            lag, reason = self._lag_for(counts)
            if not reason:
                by_count = frozenset(counts.keys() - lag.keys())
                self._want_follow_up(by_count)
        if reason:
            log.warning("lag_snapshot_unusable", reason=reason, fallback=_FALLBACK)
            strategy = _FALLBACK
        generation, instance_ids = self._joining or (NO_GENERATION, {})
        self._joining = None
        snapshot = GroupSnapshot(
            members={m: topics & counts.keys() for m, topics in subscriptions.items()},
            partitions=counts,
            lag=lag,
            instance_ids={m: i for m, i in instance_ids.items() if m in members},
        )
        reports = read_reports(members)
        previous, contested = reported_owners(reports, counts)
        result = STRATEGIES[strategy](snapshot, previous)
        if cooperative:
            result = hold_back(result, previous, contested)
        protocol = protocol_name(chosen, cooperative)
        self._planned = True
        self.last_plan = PlanRecord(
            strategy=strategy,
            protocol=protocol,
            snapshot=snapshot,
            previous=previous,
            assignment=result,
            by_count=by_count,
            contested=contested,
            generation=generation,
        )
        log.info(
            "assignment_planned",
            protocol=protocol,
            strategy=strategy,
            members=len(members),
            partitions=sum(counts.values()),
        )
        handed = route_unsaved(reports, result)
        return {
            member_id: ConsumerProtocolMemberAssignment(
                self.version,
                [(topic, list(ps)) for topic, ps in result.members[member_id].items()],
                encode_handover(handed.get(member_id, {}), generation),
            )
            for member_id in members
        }

    def _lag_for(self, counts: Mapping[str, int]) -> tuple[dict[str, tuple[int, ...]], str]:
        """The reading's lag for the topics it covers, or why none of it can be used."""
        reading = self._reading
        if reading is None:
            return {}, "no_lag_snapshot"
        if self._clock() - reading.taken_at > self._max_age:
            return {}, "lag_snapshot_stale"
        return {
            topic: reading.lag[topic]
            for topic, count in counts.items()
            if len(reading.lag.get(topic, ())) == count
        }, ""

    def _want_follow_up(self, by_count: frozenset[str]) -> None:
        """Note whether this plan needs a follow-up once the missing lags are read."""
        if not by_count:
            self._follow_up = self._followed_up = frozenset()
            return
        log.warning("lag_snapshot_partial", topics=sorted(by_count), planned_by="count")
        # Only topics not followed up yet: one whose lag cannot be read is not retried.
        self._follow_up = by_count - self._followed_up

    def take_follow_up(self) -> bool:
        """Whether the group should rebalance again now that this leader knows more topics.

        True once after a plan that left newly seen topics to count balance: the
        next join's reading covers them (they are among the group's topics now).
        """
        wanted, self._follow_up = self._follow_up, frozenset()
        if not wanted:
            return False
        self._followed_up |= wanted
        log.info("lag_follow_up_requested", topics=sorted(wanted))
        return True

    # --- asynchronous side: runs before each join ----------------------------------

    async def refresh_lag(self, topics: Iterable[str]) -> Mapping[str, tuple[int, ...]] | None:
        """Read the group's lag for ``topics`` and every topic the group subscribes to.

        The group's topics are those its members report in DescribeGroups and those
        this member saw when it last planned. Await it before every join (the
        listener from :meth:`listener` does); a failure is logged and leaves the
        previous reading, which may then be stale. Returns the reading (``None``:
        failed, or no ``lag`` strategy).
        """
        if "lag" not in self.strategies:
            return None
        wanted = set(topics) | self._group_topics
        try:
            if self._admin is None:
                self._admin = BrokerAdmin(self._bootstrap, security=self._security)
            await self._admin.start()
            wanted |= await self._members_topics(self._admin)
            counts = await self._admin.partition_counts(wanted)
            lag = await self._admin.topic_lags(
                self._group_id, counts, auto_offset_reset=self._reset
            )
        except BrokerError as exc:
            log.warning("lag_refresh_failed", group_id=self._group_id, reason=str(exc))
            return None
        self.use_lag(lag)
        return lag

    async def _members_topics(self, admin: BrokerAdmin) -> set[str]:
        """What the group's members subscribed to at their last join (none if unread)."""
        try:
            group = await admin.describe_group(self._group_id)
        except BrokerError as exc:
            log.info("group_topics_unread", group_id=self._group_id, reason=str(exc))
            return set()
        return {topic for member in group.members.values() for topic in member.topics}

    def use_lag(self, lag: Mapping[str, tuple[int, ...]]) -> None:
        """Hand over a lag reading taken now (by :meth:`refresh_lag` or a background task)."""
        self._reading = LagReading(lag=dict(lag), taken_at=self._clock())

    def listener(
        self, consumer: AIOKafkaConsumer, inner: ConsumerRebalanceListener | None = None
    ) -> ConsumerRebalanceListener:
        """A rebalance listener that refreshes lag before each join, after ``inner``'s revoke."""
        return RefreshingListener(self, consumer, inner)

    async def aclose(self) -> None:
        """Close the connection used for lag readings."""
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.aclose()


def make_assignor(
    strategy: str | Sequence[str],
    *,
    bootstrap: str | None = None,
    group_id: str | None = None,
    auto_offset_reset: AutoOffsetReset = "latest",
    max_lag_age_s: float = 30.0,
    security: SecurityConfig | None = None,
    replan_interval_s: float | None = None,
    cooperative: checks.Cooperative = False,
) -> PlanningAssignor:
    """An adapter for ``partition_assignment_strategy=assignor.protocols``; one per consumer.

    ``strategy`` is one name or several, best first (``["lag", "roundrobin",
    "range"]``, or ``"lag,roundrobin,range"``); with one name the adapter itself
    is the only entry. ``lag`` needs ``bootstrap`` and ``group_id`` to read lags; pass
    ``assignor.listener(consumer)`` (or await ``assignor.refresh_lag(topics)`` in
    your own ``on_partitions_revoked``) so a fresh reading exists at each join.
    ``replan_interval_s`` turns on re-planning on drift (see
    :func:`fairstream.runtime._kafka._drift.watch_drift`, which the App runs).
    ``cooperative`` plans for KIP-429 members (:mod:`fairstream.runtime._kafka._cooperative_hooks`);
    ``"upgrade"`` offers the ``-coop`` protocols after the eager ones, rebalancing eagerly.

    :raises ConfigError: an unknown, repeated or missing strategy name, ``lag``
        without bootstrap/group_id, ``replan_interval_s`` without ``lag`` or not above
        0, or ``cooperative`` with a strategy other than ``sticky`` and ``lag``.
    """
    return PlanningAssignor(
        strategy,
        bootstrap=bootstrap,
        group_id=group_id,
        auto_offset_reset=auto_offset_reset,
        max_lag_age_s=max_lag_age_s,
        security=security,
        replan_interval_s=replan_interval_s,
        cooperative=cooperative,
    )
