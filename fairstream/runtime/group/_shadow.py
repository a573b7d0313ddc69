"""KIP-333 parallel rebalance: jump to the end on assignment, replay the rest in a shadow.

When a partition is assigned with more lag than its subscriber's threshold, the
group consumer seeks to the partition's end offset J at assignment and serves new
records at once, while a *shadow task* - its own group-less consumer - reads the
backlog [C, J) from the committed offset C and feeds the same handler with
``record.replay=True``. The shadow's records go through the fair scheduler in a
replay lane (see ``_scheduler``), so they share handler concurrency, never take
all of it, and live records wait for at most one shadow dispatch.

What the KIP leaves open is crash safety. Here the group's committed offset
advances with the live records, and the commit metadata carries the ranges the
shadow has not finished, ``{"shadow": [[C, J]]}`` (:mod:`fairstream.ranges`):

- before jumping, the member commits (C, metadata) and reads it back: a broker that
  drops metadata (tansu answers an empty string) makes it refuse to jump;
- at the jump it commits (J, metadata), so a crash right after leaves [C, J) recorded;
- the shadow's progress clips the ranges, and every commit writes them again; a
  range is gone only when every record in it was handled or dead-lettered;
- whoever owns the partition next reads the metadata and resumes the open ranges,
  whatever its lag; a revoked shadow stops, and the revoke commit records how far
  it got.

Order holds inside each range (the shadow reads its ranges in ascending order,
one dispatch at a time), not between the shadow's records and the live ones.

:func:`plan_catch_up` is the decision, pure; :class:`ShadowTasks` runs the shadows.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import anyio
import anyio.abc
import structlog

from fairstream.config import ParallelRebalance, ShadowHandoff
from fairstream.errors import BrokerError, FairstreamError, HandoffFailed, describe
from fairstream.ranges import OffsetRange, decode_shadow, encode_shadow, merge_ranges
from fairstream.runtime._ports import ShadowClients, ShadowReader
from fairstream.runtime._record import TP, record_bytes
from fairstream.runtime.flow._offsets import OffsetTracker
from fairstream.runtime.flow._scheduler import FairScheduler

__all__ = ["CatchUp", "ShadowTasks", "plan_catch_up"]

log = structlog.get_logger(__name__)

_UNKNOWN = -1
"""What :meth:`ShadowTasks._hand_off` returns when a handoff failed without saying where."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUp:
    """What to do with one newly assigned partition.

    ``committed``/``metadata`` are what the group committed; ``start`` is where
    the group would read on from (the committed offset, or the log start without
    one) and ``lag`` how far that is behind the end; ``shadow`` the ranges the
    shadow task reads. With ``jump`` set the live consumer seeks there and
    ``jump_metadata`` is committed with it.
    """

    committed: int | None
    metadata: str
    start: int | None = None
    lag: int = 0
    shadow: tuple[OffsetRange, ...] = ()
    jump: int | None = None
    jump_metadata: str = ""
    refused: str | None = None

    def refuse(self, reason: str) -> CatchUp:
        """No jump after all: the shadow reads only the ranges already open."""
        return replace(self, shadow=tuple(decode_shadow(self.metadata)), jump=None, refused=reason)


def plan_catch_up(
    committed: tuple[int, str] | None,
    bounds: tuple[int, int] | None,
    *,
    threshold: int,
    reset: Literal["earliest", "latest"],
) -> CatchUp:
    """Decide for one partition from its commit and, if parallel rebalance is on, its bounds.

    ``bounds`` is (log start, end offset), ``None`` when the subscriber has
    parallel rebalance off: open ranges are still resumed, nothing new is opened.
    Without a commit, ``reset`` says where the group starts (KAFKA-5337's rule).
    """
    offset, metadata = committed if committed is not None else (None, "")
    stay = CatchUp(committed=offset, metadata=metadata, shadow=tuple(decode_shadow(metadata)))
    if bounds is None:
        return stay
    log_start, end = bounds
    if offset is not None:
        start = max(offset, log_start)
    else:
        start = log_start if reset == "earliest" else end
    if end - start <= threshold:
        return stay
    ranges = merge_ranges([*stay.shadow, OffsetRange(start, end)])
    encoded = encode_shadow(ranges)
    if encoded is None:
        return replace(stay, start=start, lag=end - start, refused="metadata_too_large")
    return replace(
        stay,
        start=start,
        lag=end - start,
        shadow=tuple(ranges),
        jump=end,
        jump_metadata=encoded,
    )


@dataclass(slots=True, eq=False)
class _Running:
    tp: TP
    lane: int
    max_batch: int
    ranges: tuple[OffsetRange, ...]
    settings: ParallelRebalance | None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)


def _where(tp: TP) -> dict[str, Any]:
    return {"topic": tp[0], "partition": tp[1]}


def _spans(ranges: Sequence[OffsetRange]) -> list[list[int]]:
    return [[r.start, r.end] for r in ranges]


class ShadowTasks:
    """The shadow tasks of one engine, one per partition with open ranges.

    :meth:`run` owns their task group (the engine starts it in its own); a shadow
    asked for before that starts when it does.
    """

    def __init__(
        self,
        *,
        clients: ShadowClients,
        scheduler: FairScheduler[Any],
        offsets: OffsetTracker,
        wake: Callable[[], None],
        fail: Callable[[FairstreamError], None],
        queue_target_records: int,
    ) -> None:
        self._clients = clients
        self._scheduler = scheduler
        self._offsets = offsets
        self._wake = wake
        self._fail = fail
        self._queue_target = queue_target_records
        self._running: dict[TP, _Running] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        self._changed = anyio.Event()

    async def run(self) -> None:
        """Host the shadow tasks until cancelled."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            for running in self._running.values():
                tasks.start_soon(self._run, running)
            try:
                await anyio.sleep_forever()
            finally:
                self._tasks = None

    def start(
        self,
        tp: TP,
        lane: int,
        max_batch: int,
        ranges: Sequence[OffsetRange],
        settings: ParallelRebalance | None,
    ) -> None:
        """Replay ``ranges`` of ``tp`` (ascending, disjoint) through ``lane``'s replay queue.

        ``settings`` are the subscriber's (``None`` when it has parallel rebalance off
        and only resumes ranges a previous owner left open): they say which ranges go
        to a handoff.
        """
        running = _Running(tp, lane, max_batch, tuple(ranges), settings)
        self._running[tp] = running
        if self._tasks is not None:
            self._tasks.start_soon(self._run, running)

    async def stop(self, tps: Collection[TP]) -> None:
        """Cancel the shadows of ``tps`` and wait until each has closed its reader."""
        stopping = [r for tp, r in self._running.items() if tp in tps]
        for running in stopping:
            running.scope.cancel()
            if self._tasks is None:  # never started
                del self._running[running.tp]
                running.done.set()
        for running in stopping:
            await running.done.wait()

    def notify(self) -> None:
        """A shadow dispatch finished: waiting shadows look at their queues again."""
        self._changed.set()
        self._changed = anyio.Event()

    async def _run(self, running: _Running) -> None:
        tp = running.tp
        try:
            with running.scope:
                self._scheduler.add_partition(tp, running.lane, running.max_batch, replay=True)
                await self._catch_up(tp, running.ranges, running.settings)
        except FairstreamError as exc:
            log.error("shadow_failed", **_where(tp), error=str(exc))
            self._fail(exc)
        finally:
            if self._running.get(tp) is running:
                del self._running[tp]
            running.done.set()

    async def _catch_up(
        self, tp: TP, ranges: tuple[OffsetRange, ...], settings: ParallelRebalance | None
    ) -> None:
        records = sum(map(len, ranges))
        log.info("shadow_started", **_where(tp), ranges=_spans(ranges), records=records)
        began = time.monotonic()
        handoff = settings.handoff if settings is not None else None
        threshold = settings.handoff_threshold if settings is not None else 0
        async with self._clients.shadow_reader(tp) as reader:
            for shadow in ranges:
                rest: OffsetRange | None = shadow
                while rest is not None:
                    if handoff is None or len(rest) <= threshold:
                        await self._replay(tp, reader, rest)
                        break
                    rest = await self._hand_off_rest(handoff, tp, reader, rest)
                self._offsets.advance_shadow(tp, shadow.end)
        self._scheduler.revoke([tp], replay=True)
        log.info(
            "shadow_finished",
            **_where(tp),
            records=records,
            seconds=round(time.monotonic() - began, 3),
        )

    async def _replay(self, tp: TP, reader: ShadowReader, shadow: OffsetRange) -> None:
        """Queue every record of ``shadow`` and return once all of them were handled."""
        queue = self._scheduler.shadows[tp]
        reader.seek(shadow.start)
        while True:
            try:
                records = await reader.read(shadow.end)
            except BrokerError as exc:
                if not exc.retriable:
                    raise
                log.warning("shadow_fetch_failed", **_where(tp), reason=str(exc))
                await anyio.sleep(0.5)
                continue
            if records is None:
                break
            if records:
                self._scheduler.push(tp, records, record_bytes(records), replay=True)
                self._wake()
            while queue.count >= self._queue_target:
                await self._changed.wait()
        # Records past the last one read (control batches, compaction) never come:
        # the range is done when the queue is empty and nothing of it is in flight.
        while queue.count or queue.in_flight:
            await self._changed.wait()

    async def _hand_off_rest(
        self, handoff: ShadowHandoff, tp: TP, reader: ShadowReader, shadow: OffsetRange
    ) -> OffsetRange | None:
        """Give ``shadow`` to ``handoff``; return what is left to hand off (``None``: done).

        On :class:`~fairstream.errors.HandoffFailed` at offset N the records below N
        are done, the record at N is replayed here, one record through the replay
        lane, so the App's retry and dead-letter policy applies to it as to any
        record (its first attempt is the App's handler: the handoff's failure may be
        its own, a Spark executor short of memory), and ``[N + 1, end)`` goes back to
        the handoff, not to the shadow: it exists because a range this large is too
        much for the process, and one bad record does not change that. Each round
        moves past one record, so the loop ends. Any other exception says nothing of
        what was done: the shadow replays all of ``shadow`` (at-least-once).
        """
        failed = await self._hand_off(handoff, tp, shadow)
        if failed is None:
            return None
        if failed == _UNKNOWN:
            await self._replay(tp, reader, shadow)
            return None
        self._offsets.advance_shadow(tp, failed)
        await self._replay(tp, reader, OffsetRange(failed, failed + 1))
        self._offsets.advance_shadow(tp, failed + 1)
        rest = OffsetRange(failed + 1, shadow.end)
        return rest if len(rest) else None

    async def _hand_off(self, handoff: ShadowHandoff, tp: TP, shadow: OffsetRange) -> int | None:
        """Let ``handoff`` handle ``shadow``: ``None`` when it did, else the offset it
        failed at (:class:`~fairstream.errors.HandoffFailed`), or ``_UNKNOWN``."""
        where = {**_where(tp), "range": [shadow.start, shadow.end]}
        log.info("shadow_handoff_started", **where)
        began = time.monotonic()
        try:
            if inspect.iscoroutinefunction(handoff):
                await handoff(tp[0], tp[1], shadow)
            else:
                # Abandon on cancel: a revoke must not wait for a Spark job. The range
                # stays open in the metadata, so its next owner handles it again.
                await anyio.to_thread.run_sync(
                    handoff, tp[0], tp[1], shadow, abandon_on_cancel=True
                )
        except HandoffFailed as exc:
            if shadow.start <= exc.offset < shadow.end:
                log.warning("shadow_handoff_failed", **where, offset=exc.offset, reason=str(exc))
                return exc.offset
            log.warning(
                "shadow_handoff_failed",
                **where,
                reason=f"{exc}, outside the range: the shadow replays all of it",
            )
            return _UNKNOWN
        except Exception as exc:
            log.warning("shadow_handoff_failed", **where, reason=describe(exc))
            return _UNKNOWN
        log.info("shadow_handoff_finished", **where, seconds=round(time.monotonic() - began, 3))
        return None
