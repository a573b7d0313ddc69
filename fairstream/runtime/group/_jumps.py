"""The KIP-333 jump decision, part of the rebalance room: where assigned partitions start.

When partitions arrive, :class:`Jumps` reads the group's position on them and
decides, before any record is fetched, where each is read from: at its committed
offset; past a backlog above the subscriber's threshold, which a shadow then
replays (a *jump*, :func:`plan_catch_up`), only where the group holds fairstream
apps alone and the broker keeps commit metadata; at its log start where retention
deleted unread records; or, under ``auto_offset_reset="latest"``, at its earliest
offset when it was added after the group started reading its topic. The
rebalance room (``_rebalance``) calls it between pausing and resuming the
partitions; it owns nothing of its own across rebalances.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from fairstream.config import OffsetReset
from fairstream.errors import FairstreamError, describe
from fairstream.ranges import to_commit
from fairstream.runtime._ports import KafkaClients, ShadowClients
from fairstream.runtime._record import TP
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime.flow._offsets import OffsetTracker
from fairstream.runtime.group._protocol_names import shared_protocol
from fairstream.runtime.group._shadow import CatchUp, ShadowTasks, plan_catch_up

__all__ = ["Jumps"]

log = structlog.get_logger(__name__)


class Jumps:
    """Plans and applies where newly assigned partitions start reading.

    ``auto_ack`` (``ack="auto"``) is what a jump needs: the runtime commits the
    shadow's progress. ``commit`` commits the watermarks of some partitions: a
    jump is recorded before any record past it is read.
    """

    def __init__(
        self,
        *,
        clients: KafkaClients,
        subscribers: Sequence[Subscriber],
        offsets: OffsetTracker,
        stats: StatsRecorder,
        shadows: ShadowTasks | None,
        auto_ack: bool,
        reset: OffsetReset,
        commit: Callable[[set[TP]], Awaitable[bool]],
    ) -> None:
        self._clients = clients
        self._subscribers = subscribers
        self._lane_of_topic = {
            topic: lane for lane, sub in enumerate(subscribers) for topic in sub.topics
        }
        self._offsets = offsets
        self._stats = stats
        self._shadows = shadows
        self._auto_ack = auto_ack
        self._reset: OffsetReset = reset
        self._commit = commit

    async def plan(
        self,
        clients: ShadowClients,
        tps: set[TP],
        committed: dict[TP, tuple[int, str] | None],
    ) -> tuple[dict[TP, CatchUp], dict[TP, int]]:
        """The catch-up plans of ``tps``, and the log starts :meth:`start` needs.

        One request reads the log start of every committed partition (a retention
        gap, :meth:`_deleted_unread`). Partitions with a commit are sought to it at
        once, over the reset by rule the room asked of aiokafka at the assignment
        (``ShadowClients.reset_by_rule``), which is where a fresh partition starts
        unless a jump or ``"latest"``'s own rule (:meth:`_start_unseen`) seeks it.
        """
        for tp, found in sorted(committed.items()):
            if found is not None:
                clients.seek(tp, found[0])
        plans = await self._plan_catch_ups(clients, tps, committed)
        wanted = [tp for tp, plan in plans.items() if plan.committed is not None]
        return plans, await clients.log_start_offsets(wanted) if wanted else {}

    async def start(
        self, clients: ShadowClients, plans: dict[TP, CatchUp], starts: dict[TP, int]
    ) -> None:
        """Seek the planned partitions (registered in the offsets) where they start reading."""
        deleted = self._deleted_unread(plans, starts)
        await self._catch_up(clients, plans)
        for tp, log_start in sorted(deleted.items()):
            if plans[tp].jump is None:
                # Not left to aiokafka's reset: under "latest" it would skip to the end.
                clients.seek(tp, log_start)
                self._offsets.advance(tp, log_start)
        if self._reset == "latest":
            await self._start_unseen(clients, plans)

    async def _plan_catch_ups(
        self,
        clients: ShadowClients,
        tps: set[TP],
        committed: dict[TP, tuple[int, str] | None],
    ) -> dict[TP, CatchUp]:
        subscriber = {tp: self._subscribers[self._lane_of_topic[tp[0]]] for tp in tps}
        settings = {tp: subscriber[tp].parallel_rebalance for tp in tps}
        eligible = {tp for tp in tps if settings[tp] is not None and self._auto_ack}
        bounds = await clients.offset_bounds(eligible) if eligible else {}
        return {
            tp: plan_catch_up(
                committed[tp],
                bounds.get(tp),
                threshold=setting.threshold if (setting := settings[tp]) is not None else 0,
                reset=self._reset,
            )
            for tp in tps
        }

    def _deleted_unread(self, plans: dict[TP, CatchUp], starts: dict[TP, int]) -> dict[TP, int]:
        """The partitions whose committed offset retention deleted, with their log start.

        The records between the two were deleted before the group read them: they
        cannot be handled any more, and a consumer would pass over them in silence
        (aiokafka resets an out-of-range position without a word). Each such gap is
        one ``records_skipped_by_retention`` warning and counts in the stats; the
        partition is then read from its log start.
        """
        deleted: dict[TP, int] = {}
        for tp, plan in sorted(plans.items()):
            offset = plan.committed
            if offset is None or offset >= starts.get(tp, 0):
                continue
            deleted[tp] = log_start = starts[tp]
            self._stats.records_skipped_by_retention += log_start - offset
            log.warning(
                "records_skipped_by_retention",
                topic=tp[0],
                partition=tp[1],
                skipped=[offset, log_start],
                records=log_start - offset,
                reason="retention deleted them before the group read them; reading on "
                "from the log start",
            )
        return deleted

    async def _start_unseen(self, clients: ShadowClients, plans: dict[TP, CatchUp]) -> None:
        """Where ``auto_offset_reset="latest"`` would skip records that matter.

        A never-committed partition of a topic whose other partitions the group has
        committed was added after the group started reading the topic: what was
        written to it before this member noticed is unread, so it starts at its
        earliest offset (KAFKA-12478). Any other never-committed partition starts at
        its end, as configured, and that end is committed, so that a partition
        added later is told apart even on a topic that has had no traffic.
        """
        fresh = {tp for tp, plan in plans.items() if plan.committed is None}
        if not fresh:
            return
        try:
            counts = await self._clients.partition_counts({topic for topic, _ in fresh})
            siblings = {
                (topic, partition) for topic in counts for partition in range(counts[topic])
            } - fresh
            seen = await clients.committed_offsets(siblings) if siblings else {}
            bounds = await clients.offset_bounds(fresh)
        except FairstreamError as exc:
            log.warning("start_offsets_unread", reason=str(exc), partitions=sorted(fresh))
            return  # aiokafka's reset applies, as before
        known = {topic for (topic, _), commit in seen.items() if commit is not None}
        for tp in sorted(fresh & bounds.keys()):
            log_start, end = bounds[tp]
            if tp[0] in known:
                clients.seek(tp, log_start)
                log.info("partition_added", topic=tp[0], partition=tp[1], starts_at=log_start)
            else:
                clients.seek(tp, end)
                self._offsets.advance(tp, end)

    async def _catch_up(self, clients: ShadowClients, plans: dict[TP, CatchUp]) -> None:
        """Jump where planned, the group holds only fairstream apps and the broker
        keeps metadata; start the shadows."""
        if shared_protocol(self._clients.protocol):
            for tp, plan in plans.items():
                if plan.jump is not None:
                    plans[tp] = plan.refuse("shared_protocol")
        jumps = {tp: plan for tp, plan in plans.items() if plan.jump is not None}
        kept = await self._metadata_kept(clients, jumps) if jumps else set()
        for tp, plan in sorted(jumps.items()):
            if tp not in kept:
                plans[tp] = plan.refuse("broker_dropped_metadata")
        for tp, plan in sorted(plans.items()):
            where = {"topic": tp[0], "partition": tp[1]}
            if plan.refused is not None:
                log.warning(
                    "parallel_rebalance_refused", **where, reason=plan.refused, lag=plan.lag
                )
            if plan.jump is not None:
                self._offsets.jump(tp, plan.jump, plan.shadow, plan.jump_metadata)
                clients.seek(tp, plan.jump)
                log.info(
                    "parallel_rebalance_started",
                    **where,
                    committed=plan.start,
                    jump=plan.jump,
                    lag=plan.lag,
                    shadow=[[r.start, r.end] for r in plan.shadow],
                )
        if kept:
            # Commit the jump now: a crash right after must find [C, J) recorded.
            await self._commit(set(kept))
        if not self._auto_ack or self._shadows is None:
            return
        for tp, plan in sorted(plans.items()):
            if plan.shadow:
                lane = self._lane_of_topic[tp[0]]
                subscriber = self._subscribers[lane]
                self._shadows.start(
                    tp, lane, subscriber.max_batch, plan.shadow, subscriber.parallel_rebalance
                )

    async def _metadata_kept(self, clients: ShadowClients, jumps: dict[TP, CatchUp]) -> set[TP]:
        """Commit (C, metadata) for each planned jump and read it back.

        The committed offset does not move, so this is safe whatever the broker
        does; the partitions whose metadata came back intact may jump.
        """
        request = {
            TopicPartition(*tp): OffsetAndMetadata(plan.start, to_commit(plan.jump_metadata))
            for tp, plan in jumps.items()
        }
        try:
            await self._clients.consumer.commit(request)
            found = await clients.committed_offsets(jumps)
        except (KafkaError, FairstreamError) as exc:
            for tp, plan in sorted(jumps.items()):
                log.warning(
                    "parallel_rebalance_refused",
                    topic=tp[0],
                    partition=tp[1],
                    reason="commit_failed",
                    lag=plan.lag,
                    error=describe(exc),
                )
            return set()
        return {
            tp
            for tp, plan in jumps.items()
            if (got := found.get(tp)) is not None and got == (plan.start, plan.jump_metadata)
        }
