"""Exactly-once: one Kafka transaction per input partition for outputs and offsets.

Under ``App(processing="exactly_once")`` a record's outputs (``app.publish`` from its
handler, its dead letters) and the group's offset for it commit together or not at
all, and the consumer reads ``read_committed``: a reader with ``read_committed`` sees
each input's outputs exactly once.

Why one transactional producer per *input partition*, with the stable transactional
id ``f"{group_id}-{topic}-{partition}"``: a member that lost a partition (a long
pause, a network split) must never commit a transaction for it after the new owner
started. Kafka Streams' exactly-once v2 (KIP-447) fences such a zombie by the group's
generation, sent in TxnOffsetCommit v3; aiokafka 0.14 sends only v0/v1, so that needs
a request of our own. With an id per input partition the new owner's InitProducerId
(sent here, in :meth:`Transactions.fence`, *before* the assignment reads the committed
offsets) aborts the zombie's open transaction and fences its producer at once. Any
design that waits for a transaction timeout hangs on noida, which never expires an
open transaction. The cost: a producer (one connection's worth of state) per owned
partition.

The barrier (ordering ``"partition"``, batch handlers): a partition's outputs go
into its transaction while its records are in a handler, and its watermark moves
only when a slice (or a batch) of records ends. A tick commits an idle partition
with its watermark, and a busy one up to its record in hand (every record before it
is finished; a batch is in hand as its first record), unless that record has
published already: its outputs would commit without its offset, so it waits for the
next tick (a handler that publishes and then awaits a long time delays its
partition's commits by that long). Partitions are chosen and their locks taken
before the first await, so a publish cannot slip between the choice and the commit;
it waits for the commit instead. Keyed and unordered lanes finish records out of
order, so the record in hand says nothing of those below it: their partitions are
held still by ``_barrier`` until no record of them is in a handler, then commit
their watermark with the offset map of the records finished above it.

A failed commit aborts the transaction and stops the app with a ``BrokerError``:
the outputs are gone with the offsets, and the next owner (or the restarted app)
handles the records again from the last committed offset. A fenced producer is a
zombie: it stops the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from contextvars import ContextVar
from typing import Any, Protocol, final

import anyio
import structlog
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from fairstream.errors import BrokerError, describe
from fairstream.logs import current_record
from fairstream.runtime._record import TP, Headers

__all__ = [
    "TransactionalProducer",
    "Transactions",
    "current_batch",
    "handled_partition",
    "transactional_id",
]

log = structlog.get_logger(__name__)


def transactional_id(group_id: str, tp: TP) -> str:
    """The stable id of ``tp``'s producer: its next owner's InitProducerId fences ours."""
    return f"{group_id}-{tp[0]}-{tp[1]}"


current_batch: ContextVar[tuple[TP, int] | None] = ContextVar(
    "fairstream_current_batch", default=None
)
"""The partition and first offset of the batch this task is handling, if any: a batch
sets no record log context (it holds several records), but its publishes belong to
its partition's transaction. Under exactly-once a batch holds one partition."""


def handled_partition() -> tuple[TP, int] | None:
    """The partition and offset of the record (or the first record of the batch) this
    task is handling; ``None`` outside one.

    A publish from outside a handler (a lifecycle hook, an HTTP route) has no input
    partition and so no transaction: it goes through the app's plain producer.
    """
    slot = current_record.get()
    record = slot.record if slot is not None else None
    if record is None:
        return current_batch.get()
    return (record.topic, record.partition), record.offset


class TransactionalProducer(Protocol):
    """What :class:`Transactions` uses of a transactional ``AIOKafkaProducer``; the
    in-memory broker (``fairstream.testing``) has one too."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def begin_transaction(self) -> None: ...
    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None,
        headers: list[tuple[str, bytes]],
        partition: int | None,
    ) -> asyncio.Future[Any]: ...
    async def send_offsets_to_transaction(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], group_id: str
    ) -> None: ...
    async def commit_transaction(self) -> None: ...
    async def abort_transaction(self) -> None: ...


@final
class Transactions:
    """One member's transactional producers, one per owned input partition."""

    def __init__(
        self,
        *,
        group_id: str,
        bootstrap: str,
        new_producer: Callable[[str], TransactionalProducer],
    ) -> None:
        self.group_id = group_id
        self._bootstrap = bootstrap
        self._new_producer = new_producer
        self._producers: dict[TP, TransactionalProducer] = {}
        self._locks: dict[TP, anyio.Semaphore] = {}
        """One per partition: its publishes and its commit take turns. A semaphore, not
        a lock: a tick takes the locks it commits under, and each commit's own task
        lets its one go."""
        self._open: set[TP] = set()
        self._sent: dict[TP, list[asyncio.Future[object]]] = {}
        """Deliveries of the open transactions, awaited before their commit: a publish
        returns once its record is queued, since nobody can read it before the commit."""
        self._failure: BrokerError | None = None
        """A publish that failed (a fenced producer, say): its transaction cannot
        commit, and the handler saw it as its own error; the next commit stops the
        app with it."""
        self._outputs: dict[TP, set[int]] = {}
        """Per partition, the offsets of the inputs with outputs in the open transaction."""
        self._unfinished: set[TP] = set()
        """Partitions whose transaction held outputs of a record that never finished (a
        handler cancelled by a revoke or a stop): aborted, and never committed again
        by this member; their next owner handles the records again."""

    async def fence(self, tps: Collection[TP]) -> None:
        """Start ``tps``' producers: InitProducerId aborts a previous owner's transaction.

        Called on assignment before the committed offsets are read, so no zombie
        commit can land between the read and the first record.
        """
        for tp in sorted(tps):
            if tp in self._producers:
                continue
            producer = self._new_producer(transactional_id(self.group_id, tp))
            try:
                await producer.start()
            except KafkaError as exc:
                await producer.stop()
                raise self._error(
                    tp,
                    "starting the transactional producer (does the broker support "
                    "transactions? tansu does not)",
                    exc,
                ) from exc
            self._producers[tp] = producer
            self._locks[tp] = anyio.Semaphore(1)
            self._outputs.pop(tp, None)
        log.debug("transactions_fenced", partitions=sorted(tps))

    async def publish(
        self,
        tp: TP,
        offset: int,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None,
        headers: Headers,
        partition: int | None,
    ) -> None:
        """Send the output of input ``offset`` of ``tp`` into ``tp``'s open transaction
        (opened here if none is)."""
        if tp not in self._producers:
            await self.fence([tp])  # ours since the assignment, fenced lazily after a restart
        producer = self._producers[tp]
        async with self._locks[tp]:
            try:
                if tp not in self._open:
                    await producer.begin_transaction()
                    self._open.add(tp)
                delivery = await producer.send(
                    topic, value, key=key, headers=list(headers), partition=partition
                )
            except KafkaError as exc:
                self._failure = self._error(tp, f"publishing to topic {topic!r}", exc)
                raise self._failure from exc
            self._sent.setdefault(tp, []).append(delivery)
            outputs = self._outputs.get(tp)
            if outputs is None:
                self._outputs[tp] = {offset}
            else:
                outputs.add(offset)

    def has_open(self, tp: TP) -> bool:
        """``tp``'s transaction holds outputs (or offsets) not committed yet."""
        return tp in self._open

    async def commit(
        self,
        offsets: Mapping[TP, tuple[int, str]],
        busy: Mapping[TP, int | None],
        finished: Callable[[TP, int], bool],
        *,
        committed: Callable[[TP], None] = lambda tp: None,
    ) -> set[TP]:
        """Commit the partitions' transactions; those committed with their ``offsets``.

        ``offsets``: what to commit per partition (the watermark, with the offset map
        of a keyed lane). ``busy``: the partitions with a record in a handler, and its
        offset where every record before it is finished (ordering ``"partition"``, a
        batch: its first record); ``None`` where that is not known (a keyed lane that
        the barrier does not hold now). A busy partition commits up to its record in
        hand unless an output of that record (or one above it) is in the transaction,
        which would commit without its offset: the next tick tries again; where the
        record in hand is not known it commits only if nothing was published. A
        partition with no record in a handler commits with its ``offsets``, or is
        aborted if an output's record is not ``finished`` (its handler was cancelled:
        ``_unfinished``). The partitions are chosen and their locks taken before the
        first await, so no publish slips in between the choice and the commit; a
        publish waits for it. ``committed`` is told of each partition once its
        commit ended (the barrier lets it go on).

        :raises BrokerError: a transaction failed (aborted where it still could be).
        """
        if self._failure is not None:
            for tp, producer in self._producers.items():
                if tp in self._open:
                    await self._abort(tp, producer)
            raise self._failure
        if unfenced := [tp for tp in offsets if tp not in self._producers]:
            await self.fence(unfenced)  # not fenced at assignment (the in-memory broker)
        chosen: dict[TP, tuple[int, str] | None] = {}
        for tp in sorted(set(offsets) | self._open):
            lock = self._locks.get(tp)
            if lock is None or tp in self._unfinished:
                continue  # released meanwhile, or aborted for good
            outputs = self._outputs.get(tp, ())
            target = offsets.get(tp)
            cancelled = False
            if tp in busy:
                in_hand = busy[tp]
                if in_hand is None:
                    if tp in self._open:
                        continue
                elif tp not in self._open or any(offset >= in_hand for offset in outputs):
                    continue
                else:
                    target = (in_hand, "")
            else:
                cancelled = any(not finished(tp, offset) for offset in outputs)
            try:
                lock.acquire_nowait()
            except anyio.WouldBlock:
                continue  # a publish is under way: the next tick
            if cancelled:
                self._unfinished.add(tp)
            chosen[tp] = target
        done: set[TP] = set()
        failed: list[BrokerError] = []
        locks = {tp: self._locks[tp] for tp in chosen}

        async def commit_one(tp: TP, target: tuple[int, str] | None) -> None:
            try:
                await self._commit_one(tp, target)
            except BrokerError as exc:
                failed.append(exc)
                return
            finally:
                locks[tp].release()
                committed(tp)
            if target is not None and tp not in self._unfinished and target == offsets.get(tp):
                done.add(tp)

        # Side by side: each has its own producer, and a tick lasts as long as the
        # slowest commit, not their sum (a keyed partition stands still until its own).
        async with anyio.create_task_group() as tasks:
            for tp, target in chosen.items():
                tasks.start_soon(commit_one, tp, target)
        if failed:
            raise failed[0]
        return done

    async def _commit_one(self, tp: TP, target: tuple[int, str] | None) -> None:
        producer = self._producers[tp]
        if tp in self._unfinished:
            log.warning(
                "transaction_aborted",
                topic=tp[0],
                partition=tp[1],
                offsets=sorted(self._outputs.get(tp, ())),
                reason="a handler was cancelled after it published; the partition's "
                "records since its last commit are handled again by its next owner",
            )
            await self._abort(tp, producer)
            return
        try:
            if tp not in self._open:
                await producer.begin_transaction()
                self._open.add(tp)
            for delivery in self._sent.pop(tp, ()):
                await delivery
            if target is not None:
                offset, metadata = target
                await producer.send_offsets_to_transaction(
                    {TopicPartition(*tp): OffsetAndMetadata(offset, metadata)}, self.group_id
                )
            await producer.commit_transaction()
            self._open.discard(tp)
            self._outputs.pop(tp, None)
        except KafkaError as exc:
            await self._abort(tp, producer)
            raise self._error(tp, "committing the transaction", exc) from exc

    async def release(self, tps: Collection[TP]) -> None:
        """Close ``tps``' producers (revoked or lost); an open transaction is aborted.

        Their next owner fences the ids anyway; closing now frees the connections and
        lets this member fence afresh if a partition comes back. A commit of the
        partition under way (the periodic one, beside a revoke) ends first: aborting
        under it would leave it committing a transaction that is gone.
        """
        for tp in sorted(set(tps) & self._producers.keys()):
            lock = self._locks.get(tp)
            if lock is None:
                continue  # released meanwhile
            async with lock:
                if self._locks.get(tp) is not lock:
                    continue  # released (and perhaps fenced afresh) meanwhile
                producer = self._producers.pop(tp)
                del self._locks[tp]
                self._unfinished.discard(tp)
                if tp in self._open:
                    self._open.discard(tp)
                    await self._abort(tp, producer)
                await producer.stop()

    async def aclose(self) -> None:
        await self.release(list(self._producers))

    async def _abort(self, tp: TP, producer: TransactionalProducer) -> None:
        """Abort ``tp``'s transaction; a fenced producer cannot, and need not (its
        fencer aborted it)."""
        self._open.discard(tp)
        self._outputs.pop(tp, None)
        for delivery in self._sent.pop(tp, ()):
            delivery.cancel()
        try:
            await producer.abort_transaction()
        except KafkaError as exc:
            log.warning(
                "transaction_abort_failed",
                topic=tp[0],
                partition=tp[1],
                reason=f"{describe(exc)}; the partition's next owner aborts it when it "
                "fences the transactional id",
            )

    def _error(self, tp: TP, what: str, exc: KafkaError) -> BrokerError:
        return BrokerError(
            f"exactly-once: {what} for {tp[0]}[{tp[1]}] failed: {describe(exc)}; "
            "its outputs are aborted and the records are handled again from the last "
            "committed offset",
            bootstrap=self._bootstrap,
            retriable=False,
        )
