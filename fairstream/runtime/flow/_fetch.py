"""The fetch room: pull records from aiokafka into the per-partition queues.

Records are decoded as they are pulled, so a backlog becomes Python objects only
a little ahead of its handler: they die young, and the garbage collector never
walks a heap of a million waiting records. Backpressure is *not pulling*: unlike
``pause()``, that keeps aiokafka's fetched data, undecoded, until there is room.

``app.pause(topic, partition)`` stops fetching one partition without giving it up
(aiokafka's ``pause()``): records not pulled yet stay where they are, those already
in its queue (a queue target's worth at most) are still handled, and its offsets
are committed as usual. The pause is this member's wish, kept until ``resume()``:
it is applied again when the partition is assigned again (after a rebalance or a
consumer rebuild), as long as this member owns it. Two layers hold it: aiokafka's
pause sends no fetch for the partition, and the pull in turn gives it no allowance,
so a buffer aiokafka fetched before (or between an assignment and the pause
applied again) waits in aiokafka until ``resume()``.

A consumer whose group coordination died for good (``consumer_broken``) is
replaced here: its partitions are released the usual way (``release_all``) and a
new consumer rejoins the group.

An error that names partitions (a batch failing its CRC check, a record too large
for the fetch size, an offset out of range) is theirs alone: those partitions go
to the back, set aside with a backoff of their own (0.5 s doubling to 30 s), while
the others are pulled on at once (KIP-387 asks the same of a broker). aiokafka may
have moved positions past records it never returned when it raised (the CRC check
runs while a pull is drained, and the records drained before it are dropped), so
every wanted partition is first sought back to the offset after the last record
it delivered here (or to its commit watermark): nothing is skipped, and a failing
partition is read again from its first record not handled.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import structlog
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from fairstream.config import SchedulerConfig
from fairstream.errors import BrokerError, FairstreamError, describe
from fairstream.runtime._ports import InTurn, KafkaClients, MembershipRefused, consumer_broken
from fairstream.runtime._record import TP, Record, as_records, record_bytes
from fairstream.runtime.flow._scheduler import Dispatch, FairScheduler, PartitionQueue

__all__ = ["FetchRoom"]

log = structlog.get_logger(__name__)

_REBUILD_LIMIT = 5
"""Consumer rebuilds in a row, with no assignment between them, before fetching stops."""


_SET_ASIDE_FIRST = 0.5
_SET_ASIDE_MAX = 30.0
"""Seconds a partition whose fetch failed is left out: the first time, and at most."""


def _named(exc: KafkaError, wanted: Sequence[TopicPartition]) -> list[TopicPartition]:
    """The wanted partitions ``exc`` is about: aiokafka names them in its message."""
    text = str(exc)
    return [tp for tp in wanted if repr(tp) in text]


def _rebuild_backoff(attempt: int) -> float:
    """Seconds to wait before rebuild ``attempt``: none for the first, then 0.5 s doubling."""
    return 0.0 if attempt == 1 else 0.5 * 2 ** (attempt - 2)


class FetchRoom:
    """Fills the scheduler's live queues from the group consumer, within the buffer bounds.

    ``wake`` tells idle workers there is work; ``fail`` stops the app with an error;
    ``release_all`` revokes every owned partition before a consumer rebuild;
    ``watermark`` is a partition's next offset to commit (all below it handled).
    """

    def __init__(
        self,
        *,
        clients: KafkaClients,
        scheduler: FairScheduler[Record[bytes]],
        config: SchedulerConfig,
        wake: Callable[[], None],
        fail: Callable[[FairstreamError], None],
        release_all: Callable[[], Awaitable[None]],
        watermark: Callable[[TP], int | None],
    ) -> None:
        self._clients = clients
        self._scheduler = scheduler
        self._config = config
        self._wake = wake
        self._fail = fail
        self._release_all = release_all
        self._watermark = watermark
        self._pulling = False
        self._room = anyio.Event()
        self._pull = anyio.CancelScope()
        self._stopping = False
        self._rebuilds = 0
        self._unheld: dict[TP, TopicPartition] = {}
        """The live queues not held, kept as they change: walking all of them per
        pull cost 30% of the app's time at 2,048 partitions."""
        self._unheld_version = -1  # the scheduler's version it was built for
        self._topic_partitions: dict[TP, TopicPartition] = {}
        self._next: dict[TP, int] = {}
        """The offset after the last record delivered per partition, since the assignment."""
        self._aside: dict[TopicPartition, tuple[int, float]] = {}
        """Partitions whose fetch failed: failures in a row, and when to try again."""
        self._asked: object = None
        self._in_turn: InTurn | None = None
        """Where ``_asked``, the consumer, pulls from each partition in turn
        (``KafkaClients.pull_in_turn``), the hook; else a pull is small, to stay fair."""
        self._record_size = 1
        """Bytes per record in the last pull, to keep a pull within ``max_buffered_bytes``."""
        self.rebuilt = 0
        """Consumers rebuilt since the app started (for ``app.stats()``)."""
        self.paused: set[TP] = set()
        """The partitions ``app.pause()`` paused, owned or not (applied when owned)."""

    def stop(self) -> None:
        """Pull no more; the loop ends at its next turn."""
        self._stopping = True
        self._room.set()

    def assigned(self) -> None:
        """The group gave this consumer partitions: pull for them, and it is healthy."""
        self._rebuilds = 0
        self._next.clear()
        self._aside.clear()
        owned = [self._topic_partition(tp) for tp in self.paused if tp in self._scheduler.queues]
        if owned:  # paused by the user before: still paused (the assignment resumed them)
            self._clients.consumer.pause(*owned)
        self._room.set()

    def pause(self, tp: TP) -> None:
        """Fetch nothing more of ``tp`` until :meth:`resume` (see the module docstring)."""
        self.paused.add(tp)
        if tp in self._scheduler.queues:
            self._clients.consumer.pause(self._topic_partition(tp))
            log.info("partition_paused", topic=tp[0], partition=tp[1])

    def resume(self, tp: TP) -> None:
        """Fetch ``tp`` again, from the record after the last one pulled."""
        if tp not in self.paused:
            return
        self.paused.discard(tp)
        if tp in self._scheduler.queues:
            self._clients.consumer.resume(self._topic_partition(tp))
            log.info("partition_resumed", topic=tp[0], partition=tp[1])
        self._room.set()
        if self._in_turn is not None:
            self._in_turn.wake()

    async def run(self) -> None:
        """Pull what the queues have room for until :meth:`stop`."""
        scheduler = self._scheduler
        while not self._stopping:
            if self._asked is not self._clients.consumer:  # the first, or a rebuilt one
                self._asked = self._clients.consumer
                self._in_turn = self._clients.pull_in_turn(
                    self._allowance,
                    linger=self._config.fetch_linger,
                    busy=self._busy,
                )
            wanted, room = self._wanted()
            retry_in = self._leave_aside(wanted) if wanted is not None and self._aside else None
            if wanted is not None and not wanted:
                self._room = anyio.Event()
                with anyio.move_on_after(retry_in if retry_in is not None else float("inf")):
                    await self._room.wait()
                continue
            consumer = self._clients.consumer
            batches: dict[TopicPartition, list[Any]] = {}
            failure: KafkaError | None = None
            # A queue that gets room cancels the wait, so its partition is pulled at once.
            with anyio.CancelScope() as self._pull:
                self._pulling = True
                try:
                    batches = await consumer.getmany(
                        *wanted or (), timeout_ms=200, max_records=room
                    )
                except KafkaError as exc:
                    failure = exc
                finally:
                    self._pulling = False
            if failure is not None:
                # A pull that names no partition pulled every assigned one.
                pulled = wanted or [self._topic_partition(tp) for tp in scheduler.queues]
                named = _named(failure, pulled)
                try:
                    if named:
                        await self._set_aside(named, pulled, failure)
                        continue
                except KafkaError as exc:  # the seek back failed: never read on past it
                    failure = exc
                if not await self._failed(failure):
                    return
                continue
            if batches:
                self._enqueue(batches)
                # Dropped here, not when the next pull rebinds it: the pull's lists
                # would keep every record of it alive, handled or not, while this loop
                # waits for room (benchmarks/notes/per_record_cost.md, "What a pull
                # leaves alive").
                del batches
                self._wake()

    def _enqueue(self, batches: dict[TopicPartition, list[Any]]) -> None:
        """Queue what a pull brought; a queue that reached its target is held."""
        scheduler = self._scheduler
        for tp, fetched in batches.items():
            key = (tp.topic, tp.partition)
            if key in scheduler.queues and fetched:
                records = as_records(fetched)
                self._next[key] = records[-1].offset + 1
                if self._aside:
                    self._aside.pop(tp, None)
                nbytes = record_bytes(records)
                self._record_size = nbytes // len(records) + 1
                queue = scheduler.push(key, records, nbytes)
                if not queue.paused and self._held(queue):
                    queue.paused = True
                    self._unheld.pop(key, None)

    def _leave_aside(self, wanted: list[TopicPartition]) -> float | None:
        """Drop from ``wanted`` the partitions set aside; seconds until the first is due."""
        now = time.monotonic()
        due = [at for _, at in self._aside.values() if at > now]
        wanted[:] = [tp for tp in wanted if self._aside.get(tp, (0, now))[1] <= now]
        return min(due) - now if due else None

    async def _set_aside(
        self, named: list[TopicPartition], pulled: list[TopicPartition], exc: KafkaError
    ) -> None:
        """Put the partitions ``exc`` names at the back; the others are pulled on at once.

        Each pulled partition is sought back first (see the module's docstring); one
        with nothing delivered, handled or committed yet goes back to its log start.
        """
        consumer = self._clients.consumer
        unread: list[TopicPartition] = []
        for tp in pulled:
            key = (tp.topic, tp.partition)
            offset = self._next.get(key)
            if offset is None:
                offset = self._watermark(key)
            if offset is None:
                unread.append(tp)
            else:
                consumer.seek(tp, offset)
        if unread:
            await consumer.seek_to_beginning(*unread)
        for tp in named:
            failures = self._aside.get(tp, (0, 0.0))[0] + 1
            backoff = min(_SET_ASIDE_MAX, _SET_ASIDE_FIRST * 2 ** (failures - 1))
            self._aside[tp] = (failures, time.monotonic() + backoff)
            log.warning(
                "partition_fetch_failed",
                topic=tp.topic,
                partition=tp.partition,
                reason=describe(exc),
                failures=failures,
                retry_in=backoff,
            )

    def taken(self, dispatch: Dispatch[Record[bytes]]) -> None:
        """A worker took ``dispatch``: restart the pull if that made room in a held queue."""
        # A shadow's queue is filled by its own reader, which waits for room itself.
        let_go = False
        for piece in () if dispatch.replay else dispatch.slices:
            queue = self._scheduler.queues.get(piece.tp)
            if queue is not None and queue.paused and not self._held(queue):
                queue.paused = False
                self._unheld[queue.tp] = self._topic_partition(queue.tp)
                let_go = True
        in_turn = self._in_turn
        if let_go:
            if self._pulling:  # the pull waits for data: it looks at the room again
                if in_turn is not None:
                    in_turn.wake()
                else:  # cancelling costs ~20 us, and the pull may be over
                    self._pull.cancel()
            self._room.set()
        else:
            if self._has_room():
                self._room.set()
            if in_turn is not None and in_turn.holding and not self._busy():
                in_turn.wake()  # the handlers are running out of work: take the trickles

    async def _failed(self, exc: KafkaError) -> bool:
        """Wait out a retriable error or rebuild a broken consumer; ``False``: stop fetching.

        A member its group will not keep stops: a rebuilt consumer would rejoin and,
        with a duplicated instance id, fence the other process in turn.
        """
        if isinstance(exc, MembershipRefused):
            self._fail(exc.error)
            return False
        if getattr(exc, "retriable", False):
            log.warning("fetch_failed", reason=str(exc))
            await anyio.sleep(0.5)
            return True
        if not consumer_broken(exc):
            self._fail(BrokerError(f"fetching failed: {exc}", retriable=False))
            return False
        return await self._rebuild_consumer(str(exc))

    def _wanted(self) -> tuple[list[TopicPartition] | None, int]:
        """The partitions to pull now, and how many records one pull may bring.

        A pull brings at most what is left under ``max_buffered_records`` (and, at
        the last pull's bytes per record, under ``max_buffered_bytes``). A queue at
        its target or above is *held* (``paused`` in the stats) until the scheduler
        drains it below, so a backlog partition that aiokafka lists first cannot take
        every pull.

        Where the consumer pulls in turn (``KafkaClients.pull_in_turn``, aiokafka's own
        consumer), a pull names no partition: :meth:`_allowance` gives each buffered
        partition what its queue has room for, in turn, so one pull fills many queues.

        Elsewhere ``None`` names no partition, so aiokafka pulls every assigned one it
        may (not the paused ones): before the first assignment, because a consumer
        joins its group only while polled, and whenever every live queue is wanted,
        because aiokafka checks each named partition in every pull (a type check
        over all of them, then a linear search per buffered partition), which cost
        more than the records themselves at thousands of partitions. And a pull brings
        no more than an even share of the room per wanted partition (but at least a
        queue's target): aiokafka fills a pull from one partition after another, so a
        pull as big as the room gave the first backlog partition the whole buffer, and
        with a slow handler the others waited for that one queue to drain. The poll
        that joins the group knows no partition yet, so it brings one target.
        """
        scheduler = self._scheduler
        if not self._has_room():
            return [], 0
        if self._unheld_version != scheduler.version:  # a queue was added or revoked
            self._unheld_version = scheduler.version
            if len(self._topic_partitions) > 2 * len(scheduler.queues) + 64:
                self._topic_partitions.clear()  # forget partitions revoked long ago
            self._unheld = {
                queue.tp: self._topic_partition(queue.tp)
                for queue in scheduler.queues.values()
                if not self._hold(queue)
            }
        config = self._config
        room = min(
            config.max_buffered_records - scheduler.live_buffered,
            (config.max_buffered_bytes - scheduler.buffered_bytes) // self._record_size + 1,
        )
        if self._in_turn is not None:
            return None, room
        unheld = self._unheld
        if not scheduler.queues:  # the join poll
            return None, min(room, config.queue_target_records)
        share = min(room, max(config.queue_target_records, room // max(len(unheld), 1)))
        if len(unheld) == len(scheduler.queues) and not self._aside:
            return None, share
        return list(unheld.values()), share

    def _allowance(self, tp: TopicPartition) -> int:
        """Records partition ``tp`` may give a pull: what its queue has room for.

        None for a partition without a live queue (not ours yet, or a revoked one),
        a held one, or one set aside whose backoff is not over. aiokafka's
        ``TopicPartition`` is a tuple, so it finds the queue of ``(topic, partition)``.
        """
        queue = self._scheduler.queues.get(tp)
        if queue is None or queue.paused or tp in self.paused:
            return 0  # a paused one's buffer waits in aiokafka for resume()
        if self._aside and self._aside.get(tp, (0, 0.0))[1] > time.monotonic():
            return 0
        return self._config.queue_target_records - queue.count

    def _busy(self) -> bool:
        """The queues hold a dispatch's worth of work: a trickle may wait meanwhile."""
        scheduler = self._scheduler
        return scheduler.live_buffered >= scheduler.quota

    async def _rebuild_consumer(self, reason: str) -> bool:
        """Release every partition, then replace the consumer; ``False``: gave up (failed).

        The revoke is the usual one (in-flight work finished or cancelled, handled
        watermarks committed if the broker still takes them), so the new consumer
        reads on from committed offsets: records may be handled twice, none skipped.
        Rebuilds count until the next assignment, at most :data:`_REBUILD_LIMIT`.
        """
        await self._release_all()
        while self._rebuilds < _REBUILD_LIMIT:
            self._rebuilds += 1
            await anyio.sleep(_rebuild_backoff(self._rebuilds))
            try:
                await self._clients.restart_consumer()
            except BrokerError as exc:
                reason = str(exc)
                log.warning("consumer_rebuild_failed", reason=reason, attempt=self._rebuilds)
                continue
            self.rebuilt += 1
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

    def _topic_partition(self, tp: TP) -> TopicPartition:
        """aiokafka's name for ``tp``, made once: a namedtuple costs ~1 us to build."""
        named = self._topic_partitions.get(tp)
        if named is None:
            named = self._topic_partitions[tp] = TopicPartition(*tp)
        return named

    def _hold(self, queue: PartitionQueue[Record[bytes]]) -> bool:
        queue.paused = self._held(queue)
        return queue.paused

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
