"""Running one dispatch through its subscriber's handler.

This is the per-record hot path, so the loop body does the least it can: build
the record, decode, set one context variable, await the handler. Retries, dead
letters and logging happen only on the failure branch. Offsets advance once per
slice, after the records it holds were handled or dead-lettered: the live
watermark for live records, the shadow's progress for replayed ones.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from fairstream.errors import HandlerError
from fairstream.logs import RecordSlot, current_record
from fairstream.runtime._decode import DecodeError, passthrough
from fairstream.runtime._offsets import OffsetTracker
from fairstream.runtime._record import Record
from fairstream.runtime._retry import call_with_retry
from fairstream.runtime._scheduler import TP, Dispatch, Slice
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime._subscriber import Subscriber

__all__ = ["DeadLetterSink", "DispatchRunner"]

log = structlog.get_logger(__name__)

# Record(...) runs NamedTuple's generated __new__ (keyword handling, defaults);
# tuple.__new__ with the fields in order builds the same record for a third less.
_new_record = tuple.__new__

DeadLetterSink = Callable[[Subscriber, Any, BaseException, int], Awaitable[None]]


class DispatchRunner:
    """Handles dispatches and moves the offset watermark behind them."""

    def __init__(
        self, offsets: OffsetTracker, dead_letter: DeadLetterSink, stats: StatsRecorder
    ) -> None:
        self._offsets = offsets
        self._dead_letter = dead_letter
        self._stats = stats

    async def run(self, subscriber: Subscriber, dispatch: Dispatch[Any]) -> None:
        replay = dispatch.replay
        if subscriber.batch:
            await self._run_batch(subscriber, dispatch, replay)
        else:
            for piece in dispatch.slices:
                await self._run_slice(subscriber, piece, replay)

    def _advance(self, tp: TP, next_offset: int, replay: bool) -> None:
        if replay:
            self._offsets.advance_shadow(tp, next_offset)
        else:
            self._offsets.advance(tp, next_offset)

    async def _run_slice(self, subscriber: Subscriber, piece: Slice[Any], replay: bool) -> None:
        # The per-record loop: locals only, no call or attribute read that is not
        # needed (the bytes decoder is skipped, topic and partition come from the
        # slice, the record is built with tuple.__new__, the log context is a slot
        # set once per slice). benchmarks/throughput.py measures it.
        handler = subscriber.handler
        decode = subscriber.decoder
        decoding = decode is not passthrough
        topic, partition = piece.tp
        slot = RecordSlot()
        token = current_record.set(slot)
        records = piece.records
        started = time.perf_counter()
        last = None
        try:
            for raw in records:
                data = value = raw.value
                if decoding:
                    try:
                        value = decode(data)
                    except DecodeError as exc:
                        await self._give_up(subscriber, raw, exc, 0)
                        last = raw
                        continue
                record = _new_record(
                    Record,
                    (
                        topic,
                        partition,
                        raw.offset,
                        raw.key,
                        value,
                        raw.headers,
                        raw.timestamp,
                        data,
                        replay,
                    ),
                )
                slot.record = record
                try:
                    await handler(record)
                except Exception as exc:
                    error, attempts = await call_with_retry(handler, record, subscriber.retry, exc)
                    if error is not None:
                        await self._give_up(subscriber, raw, error, attempts)
                last = raw
        finally:
            current_record.reset(token)
            if last is not None:
                done = last.offset + 1
                self._advance(piece.tp, done, replay)
                handled = len(records)
                if last is not records[-1]:
                    handled = sum(1 for r in records if r.offset < done)
                self._stats.handled(piece.tp, handled, time.perf_counter() - started)

    async def _run_batch(
        self, subscriber: Subscriber, dispatch: Dispatch[Any], replay: bool
    ) -> None:
        decode = subscriber.decoder
        decoding = decode is not passthrough
        started = time.perf_counter()
        batch: list[Record[Any]] = []
        for piece in dispatch.slices:
            topic, partition = piece.tp
            for raw in piece.records:
                data = value = raw.value
                if decoding:
                    try:
                        value = decode(data)
                    except DecodeError as exc:
                        await self._give_up(subscriber, raw, exc, 0)
                        continue
                batch.append(
                    _new_record(
                        Record,
                        (
                            topic,
                            partition,
                            raw.offset,
                            raw.key,
                            value,
                            raw.headers,
                            raw.timestamp,
                            data,
                            replay,
                        ),
                    )
                )
        if batch:
            try:
                await subscriber.handler(batch)
            except Exception as exc:
                error, attempts = await call_with_retry(
                    subscriber.handler, batch, subscriber.retry, exc
                )
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
        dispatch: Dispatch[Any],
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
        self, subscriber: Subscriber, raw: Any, error: BaseException, attempts: int
    ) -> None:
        """The record failed for good: apply the subscriber's dead-letter policy."""
        policy = subscriber.dead_letter.on_error
        where = {"topic": raw.topic, "partition": raw.partition, "offset": raw.offset}
        reason = f"{type(error).__name__}: {error}"
        if policy == "stop":
            log.error("handler_failed", **where, attempts=attempts, error=reason)
            raise HandlerError(
                topic=raw.topic,
                partition=raw.partition,
                offset=raw.offset,
                attempts=attempts,
                cause=error,
            ) from error
        if policy == "dead_letter":
            await self._dead_letter(subscriber, raw, error, attempts)
            self._stats.dead_lettered((raw.topic, raw.partition))
            log.error("record_dead_lettered", **where, attempts=attempts, error=reason)
        else:
            self._stats.dead_lettered((raw.topic, raw.partition))
            log.error("record_skipped", **where, attempts=attempts, error=reason)
