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
from fairstream.logs import current_record
from fairstream.runtime._decode import DecodeError
from fairstream.runtime._offsets import OffsetTracker
from fairstream.runtime._record import Record
from fairstream.runtime._retry import call_with_retry
from fairstream.runtime._scheduler import TP, Dispatch, Slice
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime._subscriber import Subscriber

__all__ = ["DeadLetterSink", "DispatchRunner"]

log = structlog.get_logger(__name__)

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
        handler = subscriber.handler
        decode = subscriber.decoder
        set_current = current_record.set
        started = time.perf_counter()
        done: int | None = None
        handled = 0
        try:
            for raw in piece.records:
                try:
                    record = Record(
                        raw.topic,
                        raw.partition,
                        raw.offset,
                        raw.key,
                        decode(raw.value),
                        raw.headers,
                        raw.timestamp,
                        raw.value,
                        replay,
                    )
                except DecodeError as exc:
                    await self._give_up(subscriber, raw, exc, 0)
                else:
                    set_current(record)
                    try:
                        await handler(record)
                    except Exception as exc:
                        error, attempts = await call_with_retry(
                            handler, record, subscriber.retry, exc
                        )
                        if error is not None:
                            await self._give_up(subscriber, raw, error, attempts)
                done = raw.offset + 1
                handled += 1
        finally:
            set_current(None)
            if done is not None:
                self._advance(piece.tp, done, replay)
            self._stats.handled(piece.tp, handled, time.perf_counter() - started)

    async def _run_batch(
        self, subscriber: Subscriber, dispatch: Dispatch[Any], replay: bool
    ) -> None:
        decode = subscriber.decoder
        batch: list[Record[Any]] = []
        raws: list[Any] = []
        started = time.perf_counter()
        for piece in dispatch.slices:
            for raw in piece.records:
                try:
                    value = decode(raw.value)
                except DecodeError as exc:
                    await self._give_up(subscriber, raw, exc, 0)
                    continue
                raws.append(raw)
                batch.append(
                    Record(
                        raw.topic,
                        raw.partition,
                        raw.offset,
                        raw.key,
                        value,
                        raw.headers,
                        raw.timestamp,
                        raw.value,
                        replay,
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
                    for raw in raws:
                        await self._give_up(subscriber, raw, error, attempts)
        elapsed = time.perf_counter() - started
        for piece in dispatch.slices:
            if piece.records:
                self._advance(piece.tp, piece.records[-1].offset + 1, replay)
                self._stats.handled(piece.tp, len(piece.records), elapsed)

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
