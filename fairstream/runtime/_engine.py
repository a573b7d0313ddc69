"""The consumer engine: fetch into queues, dispatch fairly, commit watermarks.

Tasks, all in one anyio task group owned by :meth:`Engine.run`:

- the fetch loop polls aiokafka and pushes each partition's records into its
  bounded queue, pausing partitions whose queue is full;
- ``concurrency`` workers take dispatches from the fair scheduler and run them;
- the commit loop commits handled watermarks every ``commit_interval``.

aiokafka awaits the rebalance listener before it rejoins, so revocation can
finish in-flight work, commit, and only then let the partitions go.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.lowlevel
import structlog
from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from fairstream.config import SchedulerConfig
from fairstream.errors import BrokerError, FairstreamError
from fairstream.runtime._clients import KafkaClients
from fairstream.runtime._offsets import OffsetTracker
from fairstream.runtime._scheduler import TP, Dispatch, FairScheduler
from fairstream.runtime._stats import AppStats, StatsRecorder
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime._workers import DispatchRunner

__all__ = ["Ack", "Engine"]

log = structlog.get_logger(__name__)

Ack = Literal["auto", "manual"]


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
    ) -> None:
        self.group_id = group_id
        self._subscribers = list(subscribers)
        self._lane_of_topic: dict[str, int] = {
            topic: lane for lane, sub in enumerate(self._subscribers) for topic in sub.topics
        }
        self._clients = clients
        self._config = scheduler
        self._ack = ack
        self._scheduler: FairScheduler[Any] = FairScheduler(quota=scheduler.partition_quota)
        self._offsets = OffsetTracker()
        self.stats_recorder = StatsRecorder()
        self._runner = DispatchRunner(self._offsets, clients.dead_letter, self.stats_recorder)
        self._in_flight: dict[TP, _InFlight] = {}
        self._work = anyio.Event()
        self._drained = anyio.Event()
        self._stop = anyio.Event()
        self.joined = anyio.Event()
        self._stopping = False
        self._failure: FairstreamError | None = None
        self.state = "created"

    # --- lifecycle ------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop taking new work now; :meth:`serve` drains and returns. Idempotent."""
        self._stopping = True
        self._stop.set()
        self._wake()

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
        if self._ack == "auto":
            with anyio.move_on_after(self._config.revoke_timeout, shield=True):
                await self.commit()

    def _fail(self, error: FairstreamError) -> None:
        if self._failure is None:
            self._failure = error
        self.request_stop()

    # --- fetching -------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        consumer = self._clients.consumer
        config = self._config
        scheduler = self._scheduler
        while not self._stopping:
            if scheduler.buffered_bytes >= config.max_buffered_bytes:
                self._drained = anyio.Event()
                await self._drained.wait()
                continue
            try:
                batches = await consumer.getmany(timeout_ms=200)
            except KafkaError as exc:
                if not getattr(exc, "retriable", False):
                    self._fail(BrokerError(f"fetching failed: {exc}", retriable=False))
                    return
                log.warning("fetch_failed", reason=str(exc))
                await anyio.sleep(0.5)
                continue
            for tp, records in batches.items():
                key = (tp.topic, tp.partition)
                if key not in scheduler.queues or not records:
                    continue
                nbytes = sum(r.serialized_value_size for r in records) + 64 * len(records)
                queue = scheduler.push(key, records, nbytes)
                if not queue.paused and (
                    queue.count >= config.queue_max_records
                    or queue.nbytes >= config.queue_max_bytes
                ):
                    queue.paused = True
                    consumer.pause(tp)
                    log.debug("partition_paused", topic=tp.topic, partition=tp.partition)
            if batches:
                self._wake()

    def _wake(self) -> None:
        self._work.set()
        self._work = anyio.Event()

    def _resume_drained(self, dispatch: Dispatch[Any]) -> None:
        config = self._config
        for piece in dispatch.slices:
            queue = self._scheduler.queues.get(piece.tp)
            if (
                queue is not None
                and queue.paused
                and queue.count <= config.queue_max_records // 2
                and queue.nbytes <= config.queue_max_bytes // 2
            ):
                queue.paused = False
                self._clients.consumer.resume(TopicPartition(*piece.tp))
                log.debug("partition_resumed", topic=piece.tp[0], partition=piece.tp[1])
        if self._scheduler.buffered_bytes < self._config.max_buffered_bytes:
            self._drained.set()

    # --- handling -------------------------------------------------------------------

    async def _worker(self) -> None:
        scheduler = self._scheduler
        while not self._stopping:
            dispatch = scheduler.next_dispatch()
            if dispatch is None:
                await self._work.wait()
                continue
            self._resume_drained(dispatch)
            await self._run_dispatch(dispatch)
            if scheduler.has_ready():
                self._wake()
            # A handler that never suspends would otherwise keep the loop to itself:
            # the fetcher (and an in-process producer) must run between dispatches.
            await anyio.lowlevel.checkpoint()

    async def _run_dispatch(self, dispatch: Dispatch[Any]) -> None:
        subscriber = self._subscribers[dispatch.lane]
        running = _InFlight(anyio.CancelScope())
        for piece in dispatch.slices:
            self._in_flight[piece.tp] = running
        try:
            with running.scope:
                await self._runner.run(subscriber, dispatch, replay=False)
        except FairstreamError as exc:
            self._fail(exc)
        finally:
            for piece in dispatch.slices:
                if self._in_flight.get(piece.tp) is running:
                    del self._in_flight[piece.tp]
            self._scheduler.release(dispatch)
            running.done.set()

    # --- offsets --------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await anyio.sleep(self._config.commit_interval)
            self.stats_recorder.sample()
            if self._ack == "auto":
                await self.commit()

    async def commit(
        self, tps: set[TP] | None = None, offsets: Mapping[TP, int] | None = None
    ) -> None:
        """Commit handled watermarks (or explicit ``offsets``); failures are retried later."""
        if offsets is not None:
            for tp, offset in offsets.items():
                self._offsets.advance(tp, offset)
            tps = set(offsets)
        pending = self._offsets.pending(tps)
        if not pending:
            return
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
            return
        self._offsets.committed(pending)
        log.debug("offsets_committed", partitions=len(pending))

    # --- rebalance ------------------------------------------------------------------

    async def on_assigned(self, tps: set[TP]) -> None:
        for tp in sorted(tps):
            lane = self._lane_of_topic[tp[0]]
            self._scheduler.add_partition(tp, lane, self._subscribers[lane].max_batch)
            self._offsets.assign(tp, committed=None)
        self.joined.set()
        log.info("partitions_assigned", group_id=self.group_id, partitions=sorted(tps))

    async def on_revoked(self, tps: set[TP]) -> None:
        """Finish or cancel in-flight work on ``tps``, commit it, then release them."""
        self._scheduler.revoke(tps)
        waiting = {id(r): r for tp, r in self._in_flight.items() if tp in tps}
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
        if self._ack == "auto":
            await self.commit(tps)
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
            if highwater is not None and position is not None:
                lag = max(0, highwater - position)
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
