"""The rebalance room: what happens when the group gives partitions or takes them away.

aiokafka awaits the rebalance listener before it rejoins, so revocation can finish
in-flight work, commit, and only then let the partitions go; assignment reads the
group's commits and decides whether to jump (KIP-333, :func:`plan_catch_up`) before
any record is fetched, then hands the backlog to the shadows (``_shadow``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Literal

import anyio
import structlog
from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from fairstream.config import OffsetReset
from fairstream.errors import FairstreamError, describe
from fairstream.ranges import decode_shadow
from fairstream.runtime._assignors import shared_protocol
from fairstream.runtime._offsets import OffsetTracker
from fairstream.runtime._ports import KafkaClients, ShadowClients
from fairstream.runtime._record import TP, Record
from fairstream.runtime._retry import retry_broker
from fairstream.runtime._scheduler import FairScheduler
from fairstream.runtime._shadow import CatchUp, ShadowTasks, plan_catch_up
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime._workers import InFlight

__all__ = ["Ack", "Rebalancer"]

log = structlog.get_logger(__name__)

Ack = Literal["auto", "manual"]


class Rebalancer(ConsumerRebalanceListener):  # type: ignore[misc]
    """The group consumer's rebalance listener: partitions in, partitions out.

    ``commit`` commits the watermarks of some partitions; ``running_on`` lists the
    dispatches in flight on some partitions; ``assigned`` tells the fetcher it has
    partitions to pull; ``fail`` stops the app with an error.
    """

    def __init__(
        self,
        *,
        group_id: str,
        clients: KafkaClients,
        subscribers: Sequence[Subscriber],
        scheduler: FairScheduler[Record[bytes]],
        offsets: OffsetTracker,
        stats: StatsRecorder,
        shadows: ShadowTasks | None,
        ack: Ack,
        reset: OffsetReset,
        revoke_timeout: float,
        commit: Callable[[set[TP]], Awaitable[bool]],
        running_on: Callable[[Collection[TP]], list[InFlight]],
        assigned: Callable[[], None],
        fail: Callable[[FairstreamError], None],
    ) -> None:
        self.group_id = group_id
        self._clients = clients
        self._shadow_clients = clients if isinstance(clients, ShadowClients) else None
        self._subscribers = subscribers
        self._lane_of_topic = {
            topic: lane for lane, sub in enumerate(subscribers) for topic in sub.topics
        }
        self._scheduler = scheduler
        self._offsets = offsets
        self._stats = stats
        self._shadows = shadows
        self._ack = ack
        self._reset: OffsetReset = reset
        self._revoke_timeout = revoke_timeout
        self._commit = commit
        self._running_on = running_on
        self._assigned = assigned
        self._fail = fail
        self._unsaved: dict[TP, tuple[tuple[int, str], tuple[int | None, str]]] = {}
        """Progress of revoked partitions whose revoke commit the broker refused."""
        self.joined = anyio.Event()

    # --- aiokafka's listener ----------------------------------------------------------

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self.revoke({(tp.topic, tp.partition) for tp in revoked})

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        await self.assign({(tp.topic, tp.partition) for tp in assigned})

    # --- partitions in --------------------------------------------------------------

    async def assign(self, tps: set[TP]) -> None:
        """Read commits, decide on KIP-333 jumps, then queue the partitions.

        aiokafka fetches while it awaits this listener, so the partitions stay
        paused until it is known where to read them from. Reading the commits and
        offsets is retried with backoff while the error may pass (the broker away,
        a coordinator moving: ``assignment_read_retry``); aiokafka logs and swallows
        a listener's exceptions, so an error that will not pass ends here: the
        partitions stay paused and unregistered (nothing of them is handled or
        committed, so no open shadow range is overwritten) and the app stops with it.
        """
        clients = self._shadow_clients
        unsaved, self._unsaved = self._unsaved, {}
        plans: dict[TP, CatchUp] = {}
        deleted: dict[TP, int] = {}
        partitions = [TopicPartition(*tp) for tp in sorted(tps)]
        if clients is not None and tps:
            self._clients.consumer.pause(*partitions)
            try:
                plans, deleted = await retry_broker(
                    lambda: self._read_offsets(clients, tps, unsaved),
                    event="assignment_read_retry",
                    partitions=sorted(tps),
                )
            except FairstreamError as exc:
                self._fail(exc)
                return
        for tp in sorted(tps):
            lane = self._lane_of_topic[tp[0]]
            self._scheduler.add_partition(tp, lane, self._subscribers[lane].max_batch)
            plan = plans.get(tp)
            if plan is None:
                self._offsets.assign(tp, committed=None)
            else:
                self._offsets.assign(tp, committed=plan.committed, metadata=plan.metadata)
        if clients is not None and plans:
            await self._catch_up(clients, plans)
            for tp, log_start in sorted(deleted.items()):
                if plans[tp].jump is None:
                    # Not left to aiokafka's reset: under "latest" it would skip to the end.
                    clients.seek(tp, log_start)
                    self._offsets.advance(tp, log_start)
            if self._reset == "latest":
                await self._start_unseen(clients, plans)
            self._clients.consumer.resume(*partitions)
        self._assigned()
        self._stats.rebalances += 1
        self.joined.set()
        log.info("partitions_assigned", group_id=self.group_id, partitions=sorted(tps))

    async def _read_offsets(
        self,
        clients: ShadowClients,
        tps: set[TP],
        unsaved: dict[TP, tuple[tuple[int, str], tuple[int | None, str]]],
    ) -> tuple[dict[TP, CatchUp], dict[TP, int]]:
        """The catch-up plans and the retention gaps (:meth:`_deleted_unread`) of ``tps``."""
        committed = await self._restore(await clients.committed_offsets(tps), unsaved)
        plans = await self._plan_catch_ups(clients, tps, committed)
        return plans, await self._deleted_unread(clients, plans)

    async def _restore(
        self,
        committed: dict[TP, tuple[int, str] | None],
        unsaved: dict[TP, tuple[tuple[int, str], tuple[int | None, str]]],
    ) -> dict[TP, tuple[int, str] | None]:
        """Commit what a refused revoke commit left unsaved, for partitions back with us.

        noida refuses a commit racing a rebalance (ILLEGAL_GENERATION), so the revoke
        commit can fail and the next owner would repeat everything handled since the
        last periodic commit - a shadow's replay included. A partition that came back
        to this member with the commit it last saw unchanged was committed by nobody
        in between: what this member handled before the revoke still holds, and is
        committed now, before the plan reads it. Otherwise it is dropped (another
        owner moved on; aiokafka commits only assigned partitions anyway).
        """
        back = {
            tp: commit
            for tp, (commit, before) in unsaved.items()
            if tp in committed and (committed[tp] or (None, "")) == before
        }
        if not back:
            return committed
        try:
            await self._clients.consumer.commit(
                {TopicPartition(*tp): OffsetAndMetadata(*commit) for tp, commit in back.items()}
            )
        except KafkaError as exc:
            log.warning(
                "unsaved_progress_dropped",
                partitions=sorted(back),
                reason=describe(exc),
            )
            return committed
        for tp, (offset, metadata) in sorted(back.items()):
            log.info(
                "unsaved_progress_committed",
                topic=tp[0],
                partition=tp[1],
                offset=offset,
                shadow=[[r.start, r.end] for r in decode_shadow(metadata)],
            )
        return {**committed, **back}

    async def _plan_catch_ups(
        self,
        clients: ShadowClients,
        tps: set[TP],
        committed: dict[TP, tuple[int, str] | None],
    ) -> dict[TP, CatchUp]:
        subscriber = {tp: self._subscribers[self._lane_of_topic[tp[0]]] for tp in tps}
        settings = {tp: subscriber[tp].parallel_rebalance for tp in tps}
        eligible = {tp for tp in tps if settings[tp] is not None and self._ack == "auto"}
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

    async def _deleted_unread(
        self, clients: ShadowClients, plans: dict[TP, CatchUp]
    ) -> dict[TP, int]:
        """The partitions whose committed offset retention deleted, with their log start.

        The records between the two were deleted before the group read them: they
        cannot be handled any more, and a consumer would pass over them in silence
        (aiokafka resets an out-of-range position without a word). Each such gap is
        one ``records_skipped_by_retention`` warning and counts in the stats; the
        partition is then read from its log start.
        """
        committed = {tp: plan.committed for tp, plan in plans.items() if plan.committed is not None}
        if not committed:
            return {}
        starts = await clients.log_start_offsets(committed.keys())
        deleted = {tp: starts[tp] for tp, offset in committed.items() if offset < starts.get(tp, 0)}
        for tp, log_start in sorted(deleted.items()):
            offset = committed[tp]
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
        if self._ack != "auto" or self._shadows is None:
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
            TopicPartition(*tp): OffsetAndMetadata(plan.start, plan.jump_metadata)
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

    # --- partitions out -------------------------------------------------------------

    async def revoke(self, tps: set[TP]) -> None:
        """Finish or cancel in-flight work on ``tps``, commit it, then release them.

        Shadows of ``tps`` stop first; the commit records how far they got. A commit
        the broker refuses is kept and written if the partitions come back
        (:meth:`_restore`).
        """
        if self._shadows is not None:
            await self._shadows.stop(tps)
        self._scheduler.revoke(tps)
        waiting = self._running_on(tps)
        with anyio.move_on_after(self._revoke_timeout) as scope:
            for running in waiting:
                await running.done.wait()
        if scope.cancelled_caught:
            log.warning(
                "revoke_timeout", reason="in-flight handlers cancelled", partitions=len(tps)
            )
            for running in waiting:
                running.scope.cancel()
                await running.done.wait()
        if not await self._commit(tps):
            self._unsaved.update(self._offsets.unsaved(tps))
        for tp in sorted(tps):
            if open_ranges := self._offsets.shadow(tp):
                log.info(
                    "shadow_stopped",
                    topic=tp[0],
                    partition=tp[1],
                    shadow=[[r.start, r.end] for r in open_ranges],
                    records=sum(map(len, open_ranges)),
                )
        self._offsets.forget(tps)
        self._stats.forget(tps)
        log.info("partitions_revoked", group_id=self.group_id, partitions=sorted(tps))

    async def revoke_all(self) -> None:
        await self.revoke(set(self._offsets.partitions))
