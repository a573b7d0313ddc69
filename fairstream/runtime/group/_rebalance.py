"""The rebalance room: what happens when the group gives partitions or takes them away.

aiokafka awaits the rebalance listener before it rejoins, so revocation can finish
in-flight work, commit, and only then let the partitions go; assignment reads the
group's commits and, before any record is fetched, decides where each partition
starts: whether to jump (KIP-333, ``_jumps``), handing the backlog to the shadows
(``_shadow``).
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
from fairstream.ranges import decode_shadow, to_commit
from fairstream.runtime._hooks import Hooks
from fairstream.runtime._ports import KafkaClients, ShadowClients
from fairstream.runtime._record import TP, Record
from fairstream.runtime._retry import retry_broker
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime.flow._offsets import OffsetTracker, Unsaved
from fairstream.runtime.flow._scheduler import FairScheduler
from fairstream.runtime.flow._transactions import Transactions
from fairstream.runtime.flow._workers import InFlight
from fairstream.runtime.group._jumps import Jumps
from fairstream.runtime.group._shadow import CatchUp, ShadowTasks

__all__ = ["Ack", "Rebalancer"]

log = structlog.get_logger(__name__)

Ack = Literal["auto", "manual"]


class Rebalancer(ConsumerRebalanceListener):  # type: ignore[misc]
    """The group consumer's rebalance listener: partitions in, partitions out.

    ``commit`` commits the watermarks of some partitions; ``running_on`` lists the
    dispatches in flight on some partitions; ``assigned`` tells the fetcher it has
    partitions to pull; ``fail`` stops the app with an error; ``listeners`` are the
    app's rebalance listeners (:mod:`~fairstream.runtime._hooks`).
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
        listeners: Hooks,
        transactions: Transactions | None = None,
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
        self._revoke_timeout = revoke_timeout
        self._commit = commit
        self._running_on = running_on
        self._assigned = assigned
        self._fail = fail
        self._listeners = listeners
        self._transactions = transactions
        self._jumps = Jumps(
            clients=clients,
            subscribers=subscribers,
            offsets=offsets,
            stats=stats,
            shadows=shadows,
            auto_ack=ack == "auto",
            reset=reset,
            commit=commit,
        )
        self._unsaved: Unsaved = {}
        """Progress of revoked partitions whose revoke commit the broker refused."""
        self.joined = anyio.Event()

    # --- aiokafka's listener ----------------------------------------------------------

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        if not revoked:
            # Nothing given up: a cooperative member about to join (KIP-429) keeps
            # reading, and commits what it handled so far, as Kafka's members do.
            await self._commit(set(self._offsets.partitions))
            return
        await self.revoke({(tp.topic, tp.partition) for tp in revoked})

    async def on_partitions_lost(self, lost: Sequence[TopicPartition]) -> None:
        await self.lose({(tp.topic, tp.partition) for tp in lost})

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
        if clients is not None:
            # What the partitions' previous owners handed over; ours wins (it is newer).
            unsaved, clients.handover.incoming = {**clients.handover.incoming, **unsaved}, {}
        plans: dict[TP, CatchUp] = {}
        starts: dict[TP, int] = {}
        partitions = [TopicPartition(*tp) for tp in sorted(tps)]
        if clients is not None and tps:
            self._clients.consumer.pause(*partitions)
            # Before the first await: aiokafka's fetcher would otherwise ask for each
            # partition's commit, one request after the other, until the seeks land.
            clients.reset_by_rule(tps)
            try:
                if self._transactions is not None:
                    # Fence the partitions' previous owners before reading their
                    # commits: a zombie's transaction cannot land after the read.
                    await self._transactions.fence(tps)
                plans, starts = await retry_broker(
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
            await self._jumps.start(clients, plans, starts)
            self._clients.consumer.resume(*partitions)
        self._assigned()
        self._stats.rebalances += 1
        self.joined.set()
        log.info("partitions_assigned", group_id=self.group_id, partitions=sorted(tps))
        await self._listeners.partitions_assigned(tps)

    async def _read_offsets(
        self,
        clients: ShadowClients,
        tps: set[TP],
        unsaved: Unsaved,
    ) -> tuple[dict[TP, CatchUp], dict[TP, int]]:
        """The catch-up plans and the log starts of ``tps`` (:meth:`Jumps.plan`)."""
        committed = await self._restore(await clients.committed_offsets(tps), unsaved)
        return await self._jumps.plan(clients, tps, committed)

    async def _restore(
        self,
        committed: dict[TP, tuple[int, str] | None],
        unsaved: Unsaved,
    ) -> dict[TP, tuple[int, str] | None]:
        """Commit what a refused revoke commit left unsaved, for partitions now ours.

        noida refuses a commit racing a rebalance (ILLEGAL_GENERATION), so the revoke
        commit can fail and the next owner would repeat everything handled since the
        last periodic commit - a shadow's replay included. The member that handled it
        keeps it, and reports it at its join; the leader hands it to the partition's
        next owner (``_member_data``), which may be that member again. A partition
        whose commit is still the one the entry saw was committed by nobody in
        between: what the last owner handled before the revoke still holds, and is
        committed now, before the plan reads it. Otherwise it is dropped (another
        owner moved on).
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
                {
                    TopicPartition(*tp): OffsetAndMetadata(offset, to_commit(metadata))
                    for tp, (offset, metadata) in back.items()
                }
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
                await running.wait()
        if scope.cancelled_caught:
            log.warning(
                "revoke_timeout", reason="in-flight handlers cancelled", partitions=len(tps)
            )
            for running in waiting:
                running.cancel()
                await running.wait()
        if not await self._commit(tps):
            self._keep_unsaved(tps)
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
        if self._transactions is not None:
            await self._transactions.release(tps)
        log.info("partitions_revoked", group_id=self.group_id, partitions=sorted(tps))
        await self._listeners.partitions_revoked(tps)

    async def lose(self, tps: set[TP]) -> None:
        """Drop ``tps`` at once, committing nothing: this member missed a generation.

        KIP-429's lost partitions: another member may read them already, so what is
        in flight is cancelled and nothing of them is committed over its commits.
        What was handled is reported as unsaved all the same: the partition's next
        owner writes it only if nobody committed the partition since (``_restore``).
        """
        if self._shadows is not None:
            await self._shadows.stop(tps)
        self._scheduler.revoke(tps)
        for running in self._running_on(tps):
            running.cancel()
            await running.wait()
        self._keep_unsaved(tps)
        self._offsets.forget(tps)
        self._stats.forget(tps)
        if self._transactions is not None:
            await self._transactions.release(tps)
        log.warning("partitions_lost", group_id=self.group_id, partitions=sorted(tps))
        await self._listeners.partitions_revoked(tps)

    def _keep_unsaved(self, tps: set[TP]) -> None:
        """Keep what was handled of ``tps`` past the broker's commit, and report it.

        Not under exactly-once: the outputs of that progress were aborted with its
        transaction, so its records must be handled again.
        """
        if self._transactions is not None:
            return
        self._unsaved.update(self._offsets.unsaved(tps))
        if self._shadow_clients is not None:
            self._shadow_clients.handover.outgoing = dict(self._unsaved)

    async def revoke_all(self) -> None:
        await self.revoke(set(self._offsets.partitions))
