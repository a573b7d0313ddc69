"""The handler room: running one dispatch through its subscriber's handler.

This is the per-record hot path. Queued records are already Records
(built as they were fetched), so a subscriber that takes bytes gets them as they
are: the loop only sets the log context slot and awaits the handler. Retries,
dead letters and logging happen only on the failure branch. Offsets advance once
per slice, after the records it holds were handled or dead-lettered: the live
watermark for live records (unless acks are manual: then only ``App.commit`` moves
it), the shadow's progress for replayed ones.

Once :attr:`DispatchRunner.halted` is set (shutdown), no record that has not started
is handed to a handler; the ones in hand finish. A ``BaseException`` that is not an
error (``KeyboardInterrupt``, ``SystemExit``) leaves the runner as it is, after the
offsets of what was handled were advanced; a ``CancelledError`` fairstream did not
cause is a handler failure (:func:`~fairstream.runtime._retry.stray_cancellation`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from fairstream.errors import HandlerAborted, HandlerError
from fairstream.logs import RecordSlot, current_record
from fairstream.ranges import OffsetRange
from fairstream.runtime._decode import DecodeError, passthrough
from fairstream.runtime._record import TP, Record, with_value
from fairstream.runtime._retry import (
    call_with_retry,
    retry_broker,
    stray_cancellation,
    warn_while_slow,
)
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime.flow._barrier import OPEN, Gate
from fairstream.runtime.flow._offsets import OffsetTracker
from fairstream.runtime.flow._scheduler import Dispatch, Slice
from fairstream.runtime.flow._transactions import current_batch

__all__ = ["DeadLetterSink", "DispatchRunner"]

log = structlog.get_logger(__name__)

DEAD_LETTER_SLOW = 5.0
"""Seconds a dead letter may wait for its acknowledgement before ``dead_letter_slow``."""
DEAD_LETTER_SLOW_REPEAT = 30.0
"""Seconds between ``dead_letter_slow`` warnings while the same dead letter waits."""

DeadLetterSink = Callable[[Subscriber, Record[bytes], BaseException, int], Awaitable[None]]


class DispatchRunner:
    """Handles dispatches and moves the offset watermark behind them."""

    def __init__(
        self,
        offsets: OffsetTracker,
        dead_letter: DeadLetterSink,
        stats: StatsRecorder,
        *,
        manual_ack: bool = False,
    ) -> None:
        self._offsets = offsets
        self._dead_letter = dead_letter
        self._stats = stats
        self._manual_ack = manual_ack
        self.in_hand: set[RecordSlot] = set()
        """The slot of each slice, keyed run and batch in hand: added and dropped once
        per run, never per record; :mod:`~fairstream.runtime.flow._stuck` reads them."""
        self.halted = False
        """Set on shutdown: records not started yet stay unhandled (and uncommitted)."""

    async def run(self, subscriber: Subscriber, dispatch: Dispatch[Record[bytes]]) -> None:
        replay = dispatch.replay
        if subscriber.batch:
            # A batch is in hand as its first record (no log context: it holds several;
            # exactly-once's transactions know its partition from current_batch).
            slot = RecordSlot()
            first = slot.record = next((p.records[0] for p in dispatch.slices if p.records), None)
            self.in_hand.add(slot)
            token = current_batch.set(
                None if first is None else ((first.topic, first.partition), first.offset)
            )
            try:
                await self._run_batch(subscriber, dispatch, replay)
            finally:
                current_batch.reset(token)
                self.in_hand.discard(slot)
        else:
            for piece in dispatch.slices:
                if self.halted:
                    return
                await self._run_slice(subscriber, piece, replay)

    async def run_chain(
        self,
        subscriber: Subscriber,
        tp: TP,
        chain: list[Record[bytes]],
        limit: int,
        popped: Callable[[int], None],
        gate: Gate = OPEN,
    ) -> None:
        """Handle up to ``limit`` records from the front of a keyed lane's chain.

        The same loop as a slice's (decode, handler, retry, dead letter) over the
        first records of the chain (the lane only appends to it meanwhile). The ones
        done (handled or given up) are then finished and dropped from the chain in one
        step each, also when the run is cut short: a cancel or a ``stop`` leaves the
        one in hand unfinished and in the chain, a closed ``gate`` (exactly-once's
        commit barrier) the first one not started. ``popped`` is told how many.
        """
        # With manual acks the user's commit finishes a record, not its handling.
        finish = _unfinished if self._manual_ack else self._offsets.finisher(tp)
        records = chain[:limit]
        slot = RecordSlot()
        token = current_record.set(slot)
        self.in_hand.add(slot)
        started = time.perf_counter()
        finished = False
        try:
            finished = await self._handle_each(subscriber, records, slot, gate)
        except (Exception, asyncio.CancelledError):
            raise
        except BaseException as exc:
            raise _aborted(slot.record, exc) from exc
        finally:
            current_record.reset(token)
            self.in_hand.discard(slot)
            progress = _progress(records, finished, slot.record)
            done = progress[1] if progress is not None else 0
            if done:
                finish(records[:done] if done < len(records) else records)
                del chain[:done]
                self._stats.handled(tp, done, time.perf_counter() - started)
                popped(done)

    def admit(self, tp: TP, records: list[Record[bytes]]) -> bool:
        """``records`` of ``tp`` are about to run out of order: the watermark stays below
        them until they finish (``False``: ``tp`` is not owned)."""
        return self._offsets.admit_all(tp, records)

    def busy(self) -> dict[TP, int]:
        """Partition -> offset of its record in a handler (exactly-once's commit barrier)."""
        in_hand = (slot.record for slot in self.in_hand)
        return {(record.topic, record.partition): record.offset for record in in_hand if record}

    def skip(self, tp: TP) -> tuple[OffsetRange, ...]:
        """Offsets of ``tp`` a previous owner finished: not to be run again."""
        return self._offsets.skip(tp)

    def skipped(self, record: Record[bytes]) -> None:
        """``record`` (admitted) was finished by a previous owner: finish it unrun."""
        self._offsets.finish((record.topic, record.partition), record.offset)

    def _advance(self, tp: TP, next_offset: int, replay: bool) -> None:
        if replay:
            self._offsets.advance_shadow(tp, next_offset)
        elif not self._manual_ack:
            self._offsets.advance(tp, next_offset)

    async def _run_slice(
        self, subscriber: Subscriber, piece: Slice[Record[bytes]], replay: bool
    ) -> None:
        slot = RecordSlot()
        token = current_record.set(slot)
        self.in_hand.add(slot)
        records = piece.records
        started = time.perf_counter()
        finished = False
        try:
            finished = await self._handle_each(subscriber, records, slot, OPEN)
        except (Exception, asyncio.CancelledError):
            raise
        except BaseException as exc:
            raise _aborted(slot.record, exc) from exc
        finally:
            current_record.reset(token)
            self.in_hand.discard(slot)
            progress = _progress(records, finished, slot.record)
            if progress is not None:
                self._advance(piece.tp, progress[0], replay)
                self._stats.handled(piece.tp, progress[1], time.perf_counter() - started)

    async def _handle_each(
        self, subscriber: Subscriber, records: list[Record[bytes]], slot: RecordSlot, gate: Gate
    ) -> bool:
        """Each record through decoder, handler, retry and dead letter, in order (a
        slice's, or a run of a keyed chain's); ``True``: all of them. On a halt or a
        closed ``gate``, ``slot`` holds the first record not started: done up to it.
        """
        # benchmarks/throughput.py measures these loops: no call or attribute read in
        # them that is not needed, the log context is a slot set once per call.
        handler = subscriber.handler
        decode = subscriber.decoder
        if decode is passthrough:
            for record in records:
                slot.record = record
                if self.halted or gate.closed:
                    return False
                try:
                    await handler(record)
                except Exception as exc:
                    await self._retry(subscriber, record, record, exc)
                except asyncio.CancelledError as exc:
                    await self._retry(subscriber, record, record, stray_cancellation(exc))
            return True
        for queued in records:
            slot.record = queued
            if self.halted or gate.closed:
                return False
            try:
                decoded = with_value(queued, decode(queued.raw))
            except DecodeError as exc:
                await self._give_up(subscriber, queued, exc, 0)
                continue
            try:
                await handler(decoded)
            except Exception as exc:
                await self._retry(subscriber, decoded, queued, exc)
            except asyncio.CancelledError as exc:
                await self._retry(subscriber, decoded, queued, stray_cancellation(exc))
        return True

    async def _retry(
        self, subscriber: Subscriber, handled: Any, queued: Record[bytes], exc: Exception
    ) -> None:
        """``handled`` (a record or a batch) raised ``exc``: retry, then give ``queued`` up."""
        error, attempts = await call_with_retry(subscriber.handler, handled, subscriber.retry, exc)
        self._stats.retries += attempts - 1
        if error is not None:
            await self._give_up(subscriber, queued, error, attempts)

    async def _run_batch(
        self, subscriber: Subscriber, dispatch: Dispatch[Record[bytes]], replay: bool
    ) -> None:
        if self.halted:
            return
        decode = subscriber.decoder
        started = time.perf_counter()
        batch: list[Record[Any]] = []
        for piece in dispatch.slices:
            if decode is passthrough:
                batch += piece.records
                continue
            for queued in piece.records:
                try:
                    batch.append(with_value(queued, decode(queued.raw)))
                except DecodeError as exc:
                    await self._give_up(subscriber, queued, exc, 0)
        if batch:
            first: Exception | None = None
            try:
                await subscriber.handler(batch)
            except Exception as exc:
                first = exc
            except asyncio.CancelledError as exc:
                first = stray_cancellation(exc)
            except BaseException as exc:
                raise _aborted(batch[0], exc) from exc
            if first is not None:
                error, attempts = await call_with_retry(
                    subscriber.handler, batch, subscriber.retry, first
                )
                self._stats.retries += attempts - 1
                if error is not None:
                    await self._give_up_batch(subscriber, dispatch, batch, error, attempts)
        elapsed = time.perf_counter() - started
        for piece in dispatch.slices:
            if piece.records:
                self._advance(piece.tp, piece.records[-1].offset + 1, replay)
                self._stats.handled(piece.tp, len(piece.records), elapsed)

    async def _give_up_batch(
        self,
        subscriber: Subscriber,
        dispatch: Dispatch[Record[bytes]],
        batch: list[Record[Any]],
        error: BaseException,
        attempts: int,
    ) -> None:
        """Every record the failed batch held goes to the policy (decode failures already did)."""
        in_batch = {(r.topic, r.partition, r.offset) for r in batch}
        for piece in dispatch.slices:
            for raw in piece.records:
                if (raw.topic, raw.partition, raw.offset) in in_batch:
                    await self._give_up(subscriber, raw, error, attempts)

    async def _give_up(
        self, subscriber: Subscriber, raw: Record[bytes], error: BaseException, attempts: int
    ) -> None:
        """The record failed for good: apply the subscriber's dead-letter policy.

        Its one error event carries the traceback (``exc_info``): structured frames
        under JSON logs, Python's usual text on the console; the retries before it
        logged one line each, without.
        """
        policy = subscriber.dead_letter.on_error
        where = {"topic": raw.topic, "partition": raw.partition, "offset": raw.offset}
        reason = f"{type(error).__name__}: {error}"
        if policy == "stop":
            log.error("handler_failed", **where, attempts=attempts, error=reason, exc_info=error)
            raise HandlerError(
                topic=raw.topic,
                partition=raw.partition,
                offset=raw.offset,
                attempts=attempts,
                cause=error,
            ) from error
        if policy == "dead_letter":
            # Acknowledged before the record counts as done (its offset may be committed):
            # however long that takes, with a warning while it does.
            dead_letter_topic = subscriber.dead_letter.topic_for(raw.topic)
            with warn_while_slow(
                "dead_letter_slow",
                after=DEAD_LETTER_SLOW,
                every=DEAD_LETTER_SLOW_REPEAT,
                **where,
                dead_letter_topic=dead_letter_topic,
                reason="the dead letter is not acknowledged yet; retrying, the record "
                "stays uncommitted until it is",
            ):
                await retry_broker(
                    lambda: self._dead_letter(subscriber, raw, error, attempts),
                    event="dead_letter_retry",
                    **where,
                    dead_letter_topic=dead_letter_topic,
                )
            self._stats.dead_lettered((raw.topic, raw.partition))
            log.error(
                "record_dead_lettered", **where, attempts=attempts, error=reason, exc_info=error
            )
        else:
            self._stats.skipped((raw.topic, raw.partition))
            log.error("record_skipped", **where, attempts=attempts, error=reason, exc_info=error)


def _aborted(record: Record[Any] | None, cause: BaseException) -> HandlerAborted:
    """Log that ``cause`` ends the app, and the error that carries it out of the task."""
    topic, partition, offset = (
        ("?", -1, -1) if record is None else (record.topic, record.partition, record.offset)
    )
    log.error(
        "handler_aborted",
        topic=topic,
        partition=partition,
        offset=offset,
        error=type(cause).__name__,
        reason="a handler raised a BaseException; committing what was handled, then stopping",
    )
    return HandlerAborted(topic=topic, partition=partition, offset=offset, cause=cause)


def _progress(
    records: list[Record[bytes]], finished: bool, in_hand: Record[bytes] | None
) -> tuple[int, int] | None:
    """The next offset to commit after a slice (or a keyed run: its records are in
    offset order too), and how many of its records were handled.

    A slice cut short (cancelled, or a record failed under the ``stop`` policy) has
    its records before the one in hand done, and that one not.
    """
    if finished and records:
        return records[-1].offset + 1, len(records)
    if finished or in_hand is None:
        return None
    done = in_hand.offset
    return done, sum(1 for r in records if r.offset < done)


def _unfinished(records: Sequence[Record[bytes]]) -> None:
    """Manual acks: handling a record does not finish it (``app.commit`` does)."""
