"""The consumer engine: one group member's rooms, their task group and its lifecycle.

One record walks the rooms of ``flow/`` once: the fetch room (``_fetch``) pulls it
into its partition's queue, the fair scheduler (``_scheduler``) puts it in a
dispatch, a worker (``_workers``) takes the dispatch to the handler (``_handling``),
which moves the partition's watermark (``_offsets``), and the engine's commit loop
has the committer (``_commit``) commit it.
The rooms of ``group/`` follow partitions arriving and leaving: the rebalancer
(``_rebalance``) adds and removes partitions, and starts the KIP-333 shadows
(``_shadow``), which feed replayed records to the same scheduler.

The engine owns the task group (fetch room, workers, commit loop, shadows), start,
drain and stop, and when to commit. Each room gets only the callbacks it needs, so no
two rooms import each other.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import anyio
import structlog
from aiokafka import TopicPartition

from fairstream.assign import partition_lag
from fairstream.config import OffsetReset, SchedulerConfig
from fairstream.errors import FairstreamError
from fairstream.runtime._hooks import Hooks
from fairstream.runtime._ports import (
    DriftWatcher,
    KafkaClients,
    ShadowClients,
    TransactionalClients,
)
from fairstream.runtime._reachability import BrokerWatch
from fairstream.runtime._record import TP, Record
from fairstream.runtime._stats import AppStats, StatsRecorder
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime.flow._barrier import Barrier
from fairstream.runtime.flow._commit import Committer
from fairstream.runtime.flow._fetch import FetchRoom
from fairstream.runtime.flow._handling import DispatchRunner
from fairstream.runtime.flow._offsets import OffsetTracker
from fairstream.runtime.flow._scheduler import FairScheduler
from fairstream.runtime.flow._stuck import StuckWatch
from fairstream.runtime.flow._workers import Workers
from fairstream.runtime.group._rebalance import Ack, Rebalancer
from fairstream.runtime.group._shadow import ShadowTasks

__all__ = ["Ack", "Engine"]

log = structlog.get_logger(__name__)


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
        listeners: Hooks | None = None,
    ) -> None:
        self.group_id = group_id
        self._reset = auto_offset_reset
        self._clients = clients
        self._config = scheduler
        self._listeners = listeners or Hooks()
        # One worker per dispatch in flight; a keyed lane's worker only admits records.
        self._worker_count = max([scheduler.concurrency, *(s.concurrency for s in subscribers)])
        # KIP-333: a shadow may hold half the handler slots (at least one), never all.
        self._scheduler: FairScheduler[Record[bytes]] = FairScheduler(
            quota=scheduler.partition_quota, shadow_limit=max(1, self._worker_count // 2)
        )
        transactions = clients.transactions if isinstance(clients, TransactionalClients) else None
        for lane, sub in enumerate(subscribers):
            # Exactly-once: a batch holds one partition, so its outputs have one transaction.
            single = not sub.batch or transactions is not None
            self._scheduler.configure_lane(lane, single=single, limit=sub.concurrency)
        self._offsets = OffsetTracker()
        self._offsets.maps = scheduler.offset_map
        self.stats_recorder = StatsRecorder()
        self._shadows: ShadowTasks | None = None
        if isinstance(clients, ShadowClients):
            self._shadows = ShadowTasks(
                clients=clients,
                scheduler=self._scheduler,
                offsets=self._offsets,
                wake=self._wake,
                fail=self._fail,
                queue_target_records=scheduler.queue_target_records,
            )
        elif any(sub.parallel_rebalance is not None for sub in subscribers):
            log.warning(
                "parallel_rebalance_unavailable",
                group_id=group_id,
                reason="the Kafka clients cannot read commit metadata or run a shadow",
            )
        self._fetch = FetchRoom(
            clients=clients,
            scheduler=self._scheduler,
            config=scheduler,
            wake=self._wake,
            fail=self._fail,
            release_all=self._release_all,
            watermark=self._offsets.next_commit,
        )
        runner = DispatchRunner(
            self._offsets, clients.dead_letter, self.stats_recorder, manual_ack=ack == "manual"
        )
        # Exactly-once holds a keyed lane's partition still while it commits (_barrier).
        barrier = (
            Barrier([topic for sub in subscribers if sub.keyed for topic in sub.topics])
            if transactions is not None
            else None
        )
        self._committer = Committer(
            group_id=group_id,
            clients=clients,
            offsets=self._offsets,
            stats=self.stats_recorder,
            timeout=scheduler.commit_timeout,
            transactions=transactions,
            busy=runner.busy,
            barrier=barrier,
        )
        self._stuck = StuckWatch(runner.in_hand, warn_after=scheduler.stuck_handler_warning)
        self._workers = Workers(
            scheduler=self._scheduler,
            runner=runner,
            subscribers=list(subscribers),
            taken=self._fetch.taken,
            replayed=self._shadows.notify if self._shadows is not None else lambda: None,
            fail=self._fail,
            room=2 * scheduler.partition_quota,
            barrier=barrier,
        )
        self._rebalancer = Rebalancer(
            group_id=group_id,
            clients=clients,
            subscribers=list(subscribers),
            scheduler=self._scheduler,
            offsets=self._offsets,
            stats=self.stats_recorder,
            shadows=self._shadows,
            ack=ack,
            reset=auto_offset_reset,
            revoke_timeout=scheduler.revoke_timeout,
            commit=self.commit,
            running_on=self._workers.running_on,
            assigned=self._fetch.assigned,
            fail=self._fail,
            listeners=self._listeners,
            transactions=transactions,
        )
        self._topics = sorted({topic for sub in subscribers for topic in sub.topics})
        self._watch = BrokerWatch(lambda: clients.partition_counts(self._topics))
        self._stop = anyio.Event()
        self._stop_by: float | None = None
        self.joined = self._rebalancer.joined
        self.stopped = anyio.Event()
        """Set once :meth:`serve` has committed, closed the clients and is returning."""
        self._failure: FairstreamError | None = None
        self.state = "created"
        self.connected = False
        """The clients are started and not closed yet: the app's producer may send."""

    # --- lifecycle ------------------------------------------------------------------

    def request_stop(self, *, now: bool = False) -> None:
        """Stop starting records; :meth:`serve` lets those in hand finish, commits, returns.

        With ``now`` (a second SIGTERM, say) the records in hand are cancelled too,
        and what finished is committed. Idempotent.
        """
        if now:
            log.warning("shutdown_forced", in_flight=self._workers.in_flight)
        if self._stop_by is None:
            self._stop_by = anyio.current_time() + self._config.shutdown_timeout
        self._fetch.stop()
        self._workers.stop(cancel=now)
        self._stop.set()

    async def start(self) -> None:
        """Connect, check topics and subscribe; on failure nothing is left open."""
        self.state = "starting"
        try:
            await self._clients.start(self._topics, self._rebalancer)
        except BaseException:
            self.state = "stopped"
            with anyio.CancelScope(shield=True):
                await self._clients.aclose()
            raise
        self.connected = True
        log.info("consumer_started", group_id=self.group_id, topics=self._topics)

    async def serve(self) -> None:
        """Consume until :meth:`request_stop`, then drain, commit and leave the group.

        :raises FairstreamError: what made the engine stop (a handler under the
            ``stop`` policy, a broker that refused us for good).
        """
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._fetch.run)
                tasks.start_soon(self._commit_loop)
                tasks.start_soon(self._watch.run)
                tasks.start_soon(self._stuck.run)
                if isinstance(self._clients, DriftWatcher):
                    tasks.start_soon(self._clients.watch_drift)
                if self._shadows is not None:
                    tasks.start_soon(self._shadows.run)
                self._workers.start(tasks, self._worker_count)
                self.state = "running"
                await self._stop.wait()
                self.state = "stopping"
                await self._drain()
                tasks.cancel_scope.cancel()
            await self._final_commit()
            # Leaving the group gives the partitions up: their listeners, as on a revoke.
            await self._listeners.partitions_revoked(set(self._offsets.partitions))
        finally:
            self.state = "stopped"
            self.connected = False
            with anyio.CancelScope(shield=True):
                await self._clients.aclose()
            log.info("consumer_stopped", group_id=self.group_id)
            self.stopped.set()
        if self._failure is not None:
            raise self._failure

    def pause(self, tp: TP) -> None:
        """Fetch nothing more of ``tp`` until :meth:`resume`; it stays assigned."""
        self._fetch.pause(tp)

    def resume(self, tp: TP) -> None:
        self._fetch.resume(tp)

    def oldest_in_flight(self) -> float:
        """Seconds the oldest record in hand has been there (0.0: none is)."""
        return self._stuck.oldest(time.monotonic())

    @property
    def reachable(self) -> bool:
        """The broker answered the last time it was asked (every 2 s while running)."""
        return self._watch.reachable

    def _shutdown_left(self) -> float:
        """Seconds left of ``shutdown_timeout`` since the stop was requested."""
        assert self._stop_by is not None, "request_stop() sets the deadline"
        return max(0.0, self._stop_by - anyio.current_time())

    async def _drain(self) -> None:
        """Wait for in-flight dispatches, within ``shutdown_timeout`` less the commit's share.

        The final commit keeps 1 s (a tenth of ``shutdown_timeout`` if that is less):
        handlers that never finish must not leave it no time at all.
        """
        reserve = min(1.0, self._config.shutdown_timeout / 10)
        with anyio.move_on_after(max(0.0, self._shutdown_left() - reserve)) as scope:
            for running in self._workers.running():
                await running.wait()
        if scope.cancelled_caught:
            log.warning("shutdown_timeout", reason="in-flight handlers cancelled")

    async def _final_commit(self) -> None:
        # What is left of shutdown_timeout bounds it: with the broker away a commit
        # would wait for commit_timeout, and the process is expected gone by then.
        limit = min(self._config.revoke_timeout, self._shutdown_left())
        with anyio.move_on_after(limit, shield=True) as scope:
            await self.commit()
        if scope.cancelled_caught:
            log.warning(
                "final_commit_timeout",
                reason="the broker did not answer the last commit in time; the next owner "
                "repeats what was handled since the previous one",
            )

    def _fail(self, error: FairstreamError) -> None:
        if self._failure is None:
            self._failure = error
        self.request_stop()

    def _wake(self) -> None:
        self._workers.wake()

    async def _release_all(self) -> None:
        await self._rebalancer.revoke_all()

    # --- offsets --------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        # With manual acks the watermarks hold only what App.commit acknowledged, so
        # committing them here just retries acknowledgements the broker refused.
        while True:
            await anyio.sleep(self._config.commit_interval)
            self.stats_recorder.sample()
            await self.commit()

    async def acknowledge(self, tp: TP, next_offset: int) -> bool:
        """``ack='manual'``: see :meth:`Committer.acknowledge`."""
        return await self._committer.acknowledge(tp, next_offset)

    async def commit(self, tps: set[TP] | None = None) -> bool:
        """Commit the watermarks of ``tps`` (all by default); ``False``: retried later."""
        return await self._committer.commit(tps)

    # --- introspection --------------------------------------------------------------

    def stats(self, member_id: str | None, protocol: str | None = None) -> AppStats:
        consumer = self._clients.consumer
        recorder = self.stats_recorder
        partitions = []
        for tp, queue in sorted(self._scheduler.queues.items()):
            state = self._offsets.partitions.get(tp)
            highwater = consumer.highwater(TopicPartition(*tp)) if self.state == "running" else None
            position = state.next_commit if state else None
            lag = None
            if state is not None and highwater is not None and position is not None:
                # The rebalance already moved a position below the log start up to it
                # (records_skipped_by_retention), so log start 0 raises nothing more.
                # After a KIP-333 jump the records the shadow still owes count too.
                lag = partition_lag(highwater, position, 0, self._reset)
                lag += sum(map(len, state.shadow))
            partitions.append(
                self.stats_recorder.partition(
                    tp, lag=lag, queue_depth=queue.count, paused=queue.paused
                )
            )
        return AppStats(
            group_id=self.group_id,
            member_id=member_id,
            protocol=protocol,
            state=self.state,
            buffered_records=self._scheduler.buffered,
            buffered_bytes=self._scheduler.buffered_bytes,
            partitions=tuple(partitions),
            retries=recorder.retries,
            dead_letters=recorder.dead_letters,
            records_skipped=recorder.records_skipped,
            records_skipped_by_retention=recorder.records_skipped_by_retention,
            commits=recorder.commits,
            commit_failures=recorder.commit_failures,
            rebalances=recorder.rebalances,
            consumer_rebuilds=self._fetch.rebuilt,
            handler_latency=recorder.handler_latency(),
            oldest_in_flight_seconds=self.oldest_in_flight(),
        )
