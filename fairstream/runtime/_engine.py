"""The consumer engine: fetch into queues, dispatch fairly, commit watermarks.

Tasks, all in one anyio task group owned by :meth:`Engine.run`:

- the fetch loop pulls records from aiokafka into per-partition queues, only for
  queues below their target and never more than the buffer as a whole has room
  for; aiokafka keeps the rest of what it fetched, undecoded, until it is pulled;
- ``concurrency`` workers take dispatches from the fair scheduler and run them;
- the commit loop commits handled watermarks every ``commit_interval``;
- the KIP-333 shadow tasks (``_shadow``) replay backlogs after a parallel-rebalance
  jump, through the same scheduler and workers.

aiokafka awaits the rebalance listener before it rejoins, so revocation can
finish in-flight work, commit, and only then let the partitions go; assignment
reads the group's commits and decides whether to jump before any record is fetched.

A consumer whose group coordination died for good (``consumer_broken``) is replaced:
its partitions are revoked the usual way and a new consumer rejoins the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.lowlevel
import structlog
from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from fairstream.config import OffsetReset, SchedulerConfig
from fairstream.errors import BrokerError, FairstreamError
from fairstream.runtime._clients import (
    KafkaClients,
    ShadowClients,
    consumer_broken,
    record_bytes,
)
from fairstream.runtime._offsets import OffsetTracker
from fairstream.runtime._record import Record, as_records
from fairstream.runtime._scheduler import TP, Dispatch, FairScheduler, PartitionQueue
from fairstream.runtime._shadow import CatchUp, ShadowHandoff, ShadowTasks, plan_catch_up
from fairstream.runtime._stats import AppStats, StatsRecorder
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime._workers import DispatchRunner

__all__ = ["Ack", "Engine"]

log = structlog.get_logger(__name__)

Ack = Literal["auto", "manual"]

_REBUILD_LIMIT = 5
"""Consumer rebuilds in a row, with no assignment between them, before the engine stops."""


def _rebuild_backoff(attempt: int) -> float:
    """Seconds to wait before rebuild ``attempt``: none for the first, then 0.5 s doubling."""
    return 0.0 if attempt == 1 else 0.5 * 2 ** (attempt - 2)


@dataclass(slots=True, eq=False)
class _InFlight:
    """A running dispatch, so revocation can wait for it or cancel it."""

    scope: anyio.CancelScope
    done: anyio.Event = field(default_factory=anyio.Event)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self._engine.on_revoked({(tp.topic, tp.partition) for tp in revoked})

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        await self._engine.on_assigned({(tp.topic, tp.partition) for tp in assigned})


class Engine:
    """One consumer group member: everything between aiokafka and the handlers."""

    def __init__(
        self,
        *,
        group_id: str,
        subscribers: Sequence[Subscriber],
        clients: KafkaClients,
        scheduler: SchedulerConfig,
        ack: Ack,
        auto_offset_reset: OffsetReset = "earliest",
        shadow_handoff: ShadowHandoff | None = None,
        shadow_handoff_threshold: int = 1_000_000,
    ) -> None:
        self.group_id = group_id
        self._subscribers = list(subscribers)
        self._lane_of_topic: dict[str, int] = {
            topic: lane for lane, sub in enumerate(self._subscribers) for topic in sub.topics
        }
        self._clients = clients
        self._config = scheduler
        self._ack = ack
        self._reset: OffsetReset = auto_offset_reset
        # KIP-333: a shadow may hold half the handler slots (at least one), never all.
        self._scheduler: FairScheduler[Record[bytes]] = FairScheduler(
            quota=scheduler.partition_quota, shadow_limit=max(1, scheduler.concurrency // 2)
        )
        self._offsets = OffsetTracker()
        self.stats_recorder = StatsRecorder()
        self._runner = DispatchRunner(
            self._offsets, clients.dead_letter, self.stats_recorder, manual_ack=ack == "manual"
        )
        self._in_flight: dict[tuple[TP, bool], _InFlight] = {}
        self._shadow_clients = clients if isinstance(clients, ShadowClients) else None
        self._shadows: ShadowTasks | None = None
        if self._shadow_clients is not None:
            self._shadows = ShadowTasks(
                clients=self._shadow_clients,
                scheduler=self._scheduler,
                offsets=self._offsets,
                wake=self._wake,
                fail=self._fail,
                queue_target_records=scheduler.queue_target_records,
                handoff=shadow_handoff,
                handoff_threshold=shadow_handoff_threshold,
            )
        elif any(sub.parallel_rebalance for sub in self._subscribers):
            log.warning(
                "parallel_rebalance_unavailable",
                group_id=group_id,
                reason="the Kafka clients cannot read commit metadata or run a shadow",
            )
        self._work = anyio.Event()
        self._idle_workers = 0
        self._pulling = False
        self._room = anyio.Event()
        self._pull = anyio.CancelScope()
        self._stop = anyio.Event()
        self.joined = anyio.Event()
        self.stopped = anyio.Event()
        """Set once :meth:`serve` has committed, closed the clients and is returning."""
        self._stopping = False
        self._rebuilds = 0
        self._failure: FairstreamError | None = None
        self.state = "created"

    # --- lifecycle ------------------------------------------------------------------

    def request_stop(self, *, now: bool = False) -> None:
        """Stop starting records; :meth:`serve` lets those in hand finish, commits, returns.

        With ``now`` (a second SIGTERM, say) the records in hand are cancelled too,
        and what finished is committed. Idempotent.
        """
        self._stopping = True
        self._runner.halted = True
        self._stop.set()
        self._wake()
        if now:
            log.warning("shutdown_forced", in_flight=len(self._in_flight))
            for running in self._in_flight.values():
                running.scope.cancel()

    async def start(self) -> None:
        """Connect, check topics and subscribe; on failure nothing is left open."""
        topics = sorted(self._lane_of_topic)
        self.state = "starting"
        try:
            await self._clients.start(topics, _Listener(self))
        except BaseException:
            self.state = "stopped"
            with anyio.CancelScope(shield=True):
                await self._clients.aclose()
            raise
        log.info("consumer_started", group_id=self.group_id, topics=topics)

    async def serve(self) -> None:
        """Consume until :meth:`request_stop`, then drain, commit and leave the group.

        :raises FairstreamError: what made the engine stop (a handler under the
            ``stop`` policy, a broker that refused us for good).
        """
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._fetch_loop)
                tasks.start_soon(self._commit_loop)
                if self._shadows is not None:
                    tasks.start_soon(self._shadows.run)
                for _ in range(self._config.concurrency):
                    tasks.start_soon(self._worker)
                self.state = "running"
                await self._stop.wait()
                self.state = "stopping"
                await self._drain()
                tasks.cancel_scope.cancel()
            await self._final_commit()
        finally:
            self.state = "stopped"
            with anyio.CancelScope(shield=True):
                await self._clients.aclose()
            log.info("consumer_stopped", group_id=self.group_id)
            self.stopped.set()
        if self._failure is not None:
            raise self._failure

    async def _drain(self) -> None:
        """Wait for in-flight dispatches, within ``shutdown_timeout``."""
        with anyio.move_on_after(self._config.shutdown_timeout) as scope:
            for running in list(self._in_flight.values()):
                await running.done.wait()
        if scope.cancelled_caught:
            log.warning("shutdown_timeout", reason="in-flight handlers cancelled")

    async def _final_commit(self) -> None:
        with anyio.move_on_after(self._config.revoke_timeout, shield=True):
            await self.commit()

    def _fail(self, error: FairstreamError) -> None:
        if self._failure is None:
            self._failure = error
        self.request_stop()

    # --- fetching -------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        """Pull what the queues have room for.

        Records are decoded as they are pulled, so a backlog becomes Python objects
        only a little ahead of its handler: they die young, and the garbage
        collector never walks a heap of a million waiting records. Backpressure is
        not pulling; unlike ``pause()``, that keeps aiokafka's fetched data.
        """
        scheduler = self._scheduler
        while not self._stopping:
            wanted, room = self._wanted()
            # With no partition yet, poll them all: a consumer may join only while polled.
            if not wanted and scheduler.queues:
                self._room = anyio.Event()
                await self._room.wait()
                continue
            consumer = self._clients.consumer
            batches: dict[TopicPartition, list[Any]] = {}
            failure: KafkaError | None = None
            # A queue that gets room cancels the wait, so its partition is pulled at once.
            with anyio.CancelScope() as self._pull:
                self._pulling = True
                try:
                    batches = await consumer.getmany(*wanted, timeout_ms=200, max_records=room)
                except KafkaError as exc:
                    failure = exc
                finally:
                    self._pulling = False
            if failure is not None:
                if not await self._fetch_failed(failure):
                    return
                continue
            for tp, fetched in batches.items():
                key = (tp.topic, tp.partition)
                if key in scheduler.queues and fetched:
                    records = as_records(fetched)
                    scheduler.push(key, records, record_bytes(records))
            if batches:
                self._wake()

    async def _fetch_failed(self, exc: KafkaError) -> bool:
        """Wait out a retriable error or rebuild a broken consumer; ``False``: stop fetching."""
        if getattr(exc, "retriable", False):
            log.warning("fetch_failed", reason=str(exc))
            await anyio.sleep(0.5)
            return True
        if not consumer_broken(exc):
            self._fail(BrokerError(f"fetching failed: {exc}", retriable=False))
            return False
        return await self._rebuild_consumer(str(exc))

    def _wanted(self) -> tuple[list[TopicPartition], int]:
        """The partitions to pull now, and how many records one pull may bring.

        A queue at its target or above is *held* (``paused`` in the stats) until the
        scheduler drains it below, so a backlog partition that aiokafka lists first
        cannot take every pull. A pull brings at most what is left under
        ``max_buffered_records``: aiokafka fills it from one partition after another,
        so one big pull into a single queue costs less than many small ones.
        """
        config = self._config
        scheduler = self._scheduler
        wanted = []
        for queue in scheduler.queues.values():
            queue.paused = self._held(queue)
            if not queue.paused:
                wanted.append(TopicPartition(*queue.tp))
        if not self._has_room():
            return [], 0
        return wanted, config.max_buffered_records - scheduler.live_buffered

    async def _rebuild_consumer(self, reason: str) -> bool:
        """Release every partition, then replace the consumer; ``False``: gave up (failed).

        The revoke is the usual one (in-flight work finished or cancelled, handled
        watermarks committed if the broker still takes them), so the new consumer
        reads on from committed offsets: records may be handled twice, none skipped.
        Rebuilds count until the next assignment, at most :data:`_REBUILD_LIMIT`.
        """
        await self.on_revoked(set(self._offsets.partitions))
        while self._rebuilds < _REBUILD_LIMIT:
            self._rebuilds += 1
            await anyio.sleep(_rebuild_backoff(self._rebuilds))
            try:
                await self._clients.restart_consumer()
            except BrokerError as exc:
                reason = str(exc)
                log.warning("consumer_rebuild_failed", reason=reason, attempt=self._rebuilds)
                continue
            log.warning("consumer_rebuilt", reason=reason, attempt=self._rebuilds)
            return True
        self._fail(
            BrokerError(
                f"fetching failed: {reason}; gave up after {_REBUILD_LIMIT} consumer rebuilds "
                "in a row without an assignment",
                retriable=False,
            )
        )
        return False

    def _wake(self) -> None:
        # Only a waiting worker needs waking; a busy one looks for work when done.
        if self._idle_workers:
            self._work.set()
            self._work = anyio.Event()

    def _held(self, queue: PartitionQueue[Record[bytes]]) -> bool:
        config = self._config
        return (
            queue.count >= config.queue_target_records or queue.nbytes >= config.queue_target_bytes
        )

    def _has_room(self) -> bool:
        scheduler = self._scheduler
        config = self._config
        return (
            scheduler.live_buffered < config.max_buffered_records
            and scheduler.buffered_bytes < config.max_buffered_bytes
        )

    def _note_room(self, dispatch: Dispatch[Record[bytes]]) -> None:
        """Restart the fetch loop's pull if this dispatch made room in a held queue."""
        # A shadow's queue is filled by its own reader, which waits for room itself.
        for piece in () if dispatch.replay else dispatch.slices:
            queue = self._scheduler.queues.get(piece.tp)
            if queue is not None and queue.paused and not self._held(queue):
                if self._pulling:  # cancelling costs ~20 us, and the pull may be over
                    self._pull.cancel()
                self._room.set()
                return
        if self._has_room():
            self._room.set()

    # --- handling -------------------------------------------------------------------

    async def _worker(self) -> None:
        scheduler = self._scheduler
        while not self._stopping:
            dispatch = scheduler.next_dispatch()
            if dispatch is None:
                self._idle_workers += 1
                try:
                    await self._work.wait()
                finally:
                    self._idle_workers -= 1
                continue
            self._note_room(dispatch)
            await self._run_dispatch(dispatch)
            if scheduler.has_ready():
                self._wake()
            # A handler that never suspends would otherwise keep the loop to itself:
            # the fetcher (and an in-process producer) must run between dispatches.
            await anyio.lowlevel.checkpoint()

    async def _run_dispatch(self, dispatch: Dispatch[Record[bytes]]) -> None:
        subscriber = self._subscribers[dispatch.lane]
        running = _InFlight(anyio.CancelScope())
        keys = [(piece.tp, dispatch.replay) for piece in dispatch.slices]
        for key in keys:
            self._in_flight[key] = running
        try:
            with running.scope:
                await self._runner.run(subscriber, dispatch)
        except FairstreamError as exc:
            self._fail(exc)
        finally:
            for key in keys:
                if self._in_flight.get(key) is running:
                    del self._in_flight[key]
            self._scheduler.release(dispatch)
            running.done.set()
            if dispatch.replay and self._shadows is not None:
                self._shadows.notify()

    # --- offsets --------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        # With manual acks the watermarks hold only what App.commit acknowledged, so
        # committing them here just retries acknowledgements the broker refused.
        while True:
            await anyio.sleep(self._config.commit_interval)
            self.stats_recorder.sample()
            await self.commit()

    async def acknowledge(self, tp: TP, next_offset: int) -> bool:
        """``ack='manual'``: every record of ``tp`` below ``next_offset`` is done; commit.

        ``False`` when this member does not own ``tp`` (revoked meanwhile: the new
        owner redelivers the records; logged, nothing committed) or the broker refused
        the commit for now (logged; the periodic commit retries it).
        """
        if tp not in self._offsets.partitions:
            log.warning(
                "commit_not_owned",
                topic=tp[0],
                partition=tp[1],
                offset=next_offset - 1,
                reason="the partition was revoked from this member; its new owner "
                "redelivers what was not committed",
            )
            return False
        self._offsets.advance(tp, next_offset)
        return await self.commit({tp})

    async def commit(self, tps: set[TP] | None = None) -> bool:
        """Commit the watermarks of ``tps`` (all by default); ``False``: retried later."""
        pending = self._offsets.pending(tps)
        if not pending:
            return True
        request = {
            TopicPartition(*tp): OffsetAndMetadata(offset, metadata)
            for tp, (offset, metadata) in pending.items()
        }
        try:
            await self._clients.consumer.commit(request)
        except KafkaError as exc:
            log.warning(
                "commit_failed", reason=f"{type(exc).__name__}: {exc}", partitions=len(pending)
            )
            return False
        self._offsets.committed(pending)
        log.debug("offsets_committed", partitions=len(pending))
        return True

    # --- rebalance ------------------------------------------------------------------

    async def on_assigned(self, tps: set[TP]) -> None:
        """Read commits, decide on KIP-333 jumps, then queue the partitions.

        aiokafka fetches while it awaits this listener, so the partitions stay
        paused until it is known where to read them from. It also logs and swallows
        a listener's exceptions, so failures end here: if the commits cannot be
        read, the partitions stay paused and unregistered (nothing of them is
        handled or committed, so no open shadow range is overwritten) and the
        engine stops with the error.
        """
        self._rebuilds = 0  # the group took this consumer in
        clients = self._shadow_clients
        plans: dict[TP, CatchUp] = {}
        partitions = [TopicPartition(*tp) for tp in sorted(tps)]
        if clients is not None and tps:
            self._clients.consumer.pause(*partitions)
            try:
                plans = await self._plan_catch_ups(clients, tps)
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
            self._clients.consumer.resume(*partitions)
        self._room.set()  # the fetch loop waits for queues to pull into
        self.joined.set()
        log.info("partitions_assigned", group_id=self.group_id, partitions=sorted(tps))

    async def _plan_catch_ups(self, clients: ShadowClients, tps: set[TP]) -> dict[TP, CatchUp]:
        committed = await clients.committed_offsets(tps)
        subscriber = {tp: self._subscribers[self._lane_of_topic[tp[0]]] for tp in tps}
        eligible = {tp for tp in tps if subscriber[tp].parallel_rebalance and self._ack == "auto"}
        bounds = await clients.offset_bounds(eligible) if eligible else {}
        return {
            tp: plan_catch_up(
                committed[tp],
                bounds.get(tp),
                threshold=subscriber[tp].parallel_rebalance_threshold,
                reset=self._reset,
            )
            for tp in tps
        }

    async def _catch_up(self, clients: ShadowClients, plans: dict[TP, CatchUp]) -> None:
        """Jump where planned and the broker keeps metadata; start the shadows."""
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
            await self.commit(set(kept))
        if self._ack != "auto" or self._shadows is None:
            return
        for tp, plan in sorted(plans.items()):
            if plan.shadow:
                lane = self._lane_of_topic[tp[0]]
                self._shadows.start(tp, lane, self._subscribers[lane].max_batch, plan.shadow)

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
                    error=f"{type(exc).__name__}: {exc}",
                )
            return set()
        return {
            tp
            for tp, plan in jumps.items()
            if (got := found.get(tp)) is not None and got == (plan.start, plan.jump_metadata)
        }

    async def on_revoked(self, tps: set[TP]) -> None:
        """Finish or cancel in-flight work on ``tps``, commit it, then release them.

        Shadows of ``tps`` stop first; the commit records how far they got.
        """
        if self._shadows is not None:
            await self._shadows.stop(tps)
        self._scheduler.revoke(tps)
        waiting = {id(r): r for (tp, _), r in self._in_flight.items() if tp in tps}
        with anyio.move_on_after(self._config.revoke_timeout) as scope:
            for running in waiting.values():
                await running.done.wait()
        if scope.cancelled_caught:
            log.warning(
                "revoke_timeout", reason="in-flight handlers cancelled", partitions=len(tps)
            )
            for running in waiting.values():
                running.scope.cancel()
                await running.done.wait()
        await self.commit(tps)
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
        self.stats_recorder.forget(tps)
        log.info("partitions_revoked", group_id=self.group_id, partitions=sorted(tps))

    # --- introspection --------------------------------------------------------------

    def stats(self, member_id: str | None) -> AppStats:
        consumer = self._clients.consumer
        partitions = []
        for tp, queue in sorted(self._scheduler.queues.items()):
            state = self._offsets.partitions.get(tp)
            highwater = consumer.highwater(TopicPartition(*tp)) if self.state == "running" else None
            position = state.next_commit if state else None
            lag = None
            if state is not None and highwater is not None and position is not None:
                # After a KIP-333 jump the records the shadow still owes count too.
                lag = max(0, highwater - position) + sum(map(len, state.shadow))
            partitions.append(
                self.stats_recorder.partition(
                    tp, lag=lag, queue_depth=queue.count, paused=queue.paused
                )
            )
        return AppStats(
            group_id=self.group_id,
            member_id=member_id,
            state=self.state,
            buffered_records=self._scheduler.buffered,
            buffered_bytes=self._scheduler.buffered_bytes,
            partitions=tuple(partitions),
        )
