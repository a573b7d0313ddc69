"""The committer: turns the watermarks of ``_offsets`` into broker commits.

A commit that times out because the topic was deleted (or shrank) would be retried
by aiokafka forever, so those partitions are forgotten; a broker that drops commit
metadata (tansu) turns the offset maps off after the first read-back, so a restart
repeats records rather than trusting a map that was never stored.

Under exactly-once the offsets go into each partition's transaction instead
(``_transactions``), committed only for partitions with no record in a handler
(or, under ordering ``"partition"``, up to the record in hand); a keyed lane's
partitions are held still for that by ``_barrier``.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import structlog
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from fairstream.errors import FairstreamError, describe
from fairstream.ranges import to_commit
from fairstream.runtime._ports import KafkaClients, ShadowClients
from fairstream.runtime._record import TP
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime.flow._barrier import HOLD_LIMIT, Barrier
from fairstream.runtime.flow._offsets import OffsetTracker
from fairstream.runtime.flow._transactions import Transactions

__all__ = ["Committer"]

log = structlog.get_logger(__name__)


class Committer:
    """Commits one member's offsets; every caller (loop, revoke, manual ack) goes here."""

    def __init__(
        self,
        *,
        group_id: str,
        clients: KafkaClients,
        offsets: OffsetTracker,
        stats: StatsRecorder,
        timeout: float,
        transactions: Transactions | None = None,
        busy: Callable[[], dict[TP, int]] = dict,
        barrier: Barrier | None = None,
    ) -> None:
        self.group_id = group_id
        self._clients = clients
        self._offsets = offsets
        self._stats = stats
        self._timeout = timeout
        self._map_checked = False
        self._transactions = transactions
        self._busy = busy
        self._barrier = barrier or Barrier(())  # no keyed lane: it holds nothing

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
        if self._offsets.out_of_order(tp):
            self._offsets.finish(tp, next_offset - 1)  # a keyed lane: this record only
        else:
            self._offsets.advance(tp, next_offset)
        return await self.commit({tp})

    async def commit(self, tps: set[TP] | None = None) -> bool:
        """Commit the watermarks of ``tps`` (all by default); ``False``: retried later."""
        if self._transactions is not None:
            return await self._commit_transactions(tps)
        pending = self._pending(tps)
        if not pending:
            return True
        request = {
            TopicPartition(*tp): OffsetAndMetadata(offset, to_commit(metadata))
            for tp, (offset, metadata) in pending.items()
        }
        try:
            with anyio.fail_after(self._timeout):
                await self._clients.consumer.commit(request)
        except KafkaError as exc:
            self._stats.commit_failures += 1
            log.warning("commit_failed", reason=describe(exc), partitions=len(pending))
            return False
        except TimeoutError:
            gone = await self._deleted(set(pending))
            if gone:
                return await self.commit(set(pending) - gone)
            self._stats.commit_failures += 1
            log.warning(
                "commit_failed",
                reason=f"no answer within commit_timeout={self._timeout} s",
                partitions=len(pending),
            )
            return False
        self._stats.commits += 1
        self._offsets.committed(pending)
        log.debug("offsets_committed", partitions=len(pending))
        if not self._map_checked:
            await self._check_map_kept(pending)
        return True

    def _pending(self, tps: set[TP] | None) -> dict[TP, tuple[int, str]]:
        pending = self._offsets.pending(tps)
        for tp, ranges in self._offsets.overflowed:
            log.warning(
                "offset_map_dropped",
                topic=tp[0],
                partition=tp[1],
                ranges=ranges,
                reason="the finished offsets do not fit the commit metadata; "
                + (
                    "the partition's transaction waits until they do"
                    if self._transactions is not None
                    else "committing the plain watermark, so a restart repeats more records"
                ),
            )
        self._offsets.overflowed.clear()
        return pending

    async def _commit_transactions(self, tps: set[TP] | None) -> bool:
        """Exactly-once: each partition's outputs and offset in one transaction.

        A busy partition (a record in a handler) commits up to that record; a keyed
        one with an open transaction is held still by the barrier first, until none
        of its records is in a handler, and commits only with its offset map (it
        waits while the map does not fit). A failed transaction raises
        ``BrokerError`` and the app stops (``_transactions``).
        """
        transactions, barrier = self._transactions, self._barrier
        assert transactions is not None
        owned = self._offsets.partitions.keys() if tps is None else tps
        keyed = {tp for tp in owned if barrier.covers(tp)}
        held = {tp for tp in keyed if transactions.has_open(tp)}
        async with barrier.hold(held, limit=HOLD_LIMIT) as still:
            pending = self._pending(tps)
            offsets = {tp: (offset, to_commit(meta)) for tp, (offset, meta) in pending.items()}
            busy: dict[TP, int | None] = {
                tp: offset for tp, offset in self._busy().items() if tp not in keyed
            }
            for tp in keyed:
                missing = self._offsets.map_missing(tp)
                if missing:
                    offsets.pop(tp, None)
                if missing or tp not in still:
                    busy[tp] = None  # its records may be in a handler, or it lacks its map
            with anyio.fail_after(self._timeout):
                done = await transactions.commit(
                    offsets, busy, self._offsets.finished, committed=still.let_go
                )
        committed = {tp: pending[tp] for tp in done if tp in pending}
        if committed:
            self._stats.commits += 1
            self._offsets.committed(committed)
            log.debug("transactions_committed", partitions=len(done))
        return done >= set(pending)

    async def _deleted(self, tps: set[TP]) -> set[TP]:
        """The partitions of ``tps`` whose topic is gone (or shrank), now forgotten.

        A commit for them would be retried by aiokafka forever; their records cannot
        be read again, so there is nothing left to commit for them.
        """
        topics = {topic for topic, _ in tps}
        try:
            counts = await self._clients.partition_counts(topics)
        except FairstreamError:
            return set()  # the cluster does not answer: keep everything, retry later
        gone = {tp for tp in tps if tp[1] >= counts.get(tp[0], 0)}
        # A revoke's commit and the periodic one may time out together: warn once.
        dropped = gone & self._offsets.partitions.keys()
        if dropped:
            log.warning(
                "topic_deleted",
                topics=sorted({topic for topic, _ in dropped}),
                partitions=sorted(dropped),
                reason="the commit for them cannot succeed; they are dropped and the "
                "group's other partitions go on",
            )
            self._offsets.forget(dropped)
        return gone

    async def _check_map_kept(self, sent: dict[TP, tuple[int, str]]) -> None:
        """Read the first offset map back once; a broker that drops it turns maps off."""
        mapped = {tp for tp, (_, metadata) in sent.items() if '"done"' in metadata}
        if not mapped or not isinstance(self._clients, ShadowClients):
            return
        self._map_checked = True
        try:
            found = await self._clients.committed_offsets(mapped)
        except FairstreamError:
            self._map_checked = False  # try again on a later commit
            return
        if any((got := found.get(tp)) is not None and not got[1] for tp in mapped):
            self._offsets.maps = False
            log.warning(
                "offset_map_unavailable",
                group_id=self.group_id,
                reason="the broker dropped commit metadata; committing the plain watermark, "
                "so a restart repeats the records finished above it",
            )
