"""KIP-333 logic as pure data: the jump decision, shadow progress, replay lanes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairstream import App, ParallelRebalance
from fairstream.errors import ConfigError
from fairstream.ranges import METADATA_LIMIT, OffsetRange, decode_shadow, encode_shadow
from fairstream.runtime.flow._offsets import OffsetTracker, clip_below
from fairstream.runtime.flow._scheduler import FairScheduler
from fairstream.runtime.group._shadow import plan_catch_up

TP = ("t", 0)


def _covered(ranges: list[OffsetRange] | tuple[OffsetRange, ...]) -> set[int]:
    return {o for r in ranges for o in range(r.start, r.end)}


ranges_st = st.lists(
    st.builds(lambda a, n: OffsetRange(a, a + n), st.integers(0, 300), st.integers(0, 40)),
    max_size=6,
)


def test_lag_above_the_threshold_jumps_to_the_end_and_records_the_range() -> None:
    plan = plan_catch_up((70, ""), (0, 120), threshold=10, reset="earliest")
    assert (plan.start, plan.jump, plan.lag) == (70, 120, 50)
    assert plan.shadow == (OffsetRange(70, 120),)
    assert plan.jump_metadata == '{"shadow":[[70,120]]}'
    assert plan.refused is None


def test_lag_at_the_threshold_reads_on_and_resumes_open_ranges() -> None:
    plan = plan_catch_up((110, '{"shadow":[[5,9]]}'), (0, 120), threshold=10, reset="earliest")
    assert plan.jump is None and plan.refused is None
    assert plan.shadow == (OffsetRange(5, 9),)


def test_parallel_rebalance_off_still_resumes_open_ranges() -> None:
    plan = plan_catch_up((500, '{"shadow":[[5,9]]}'), None, threshold=0, reset="earliest")
    assert plan.jump is None and plan.shadow == (OffsetRange(5, 9),)


def test_no_commit_starts_where_auto_offset_reset_says() -> None:
    earliest = plan_catch_up(None, (30, 1_000), threshold=10, reset="earliest")
    assert (earliest.start, earliest.jump) == (30, 1_000)
    latest = plan_catch_up(None, (30, 1_000), threshold=10, reset="latest")
    assert latest.jump is None and latest.shadow == ()


def test_a_commit_below_the_log_start_counts_from_the_log_start() -> None:
    plan = plan_catch_up((5, ""), (100, 1_000), threshold=10, reset="earliest")
    assert plan.shadow == (OffsetRange(100, 1_000),)


def test_ranges_that_would_not_fit_the_metadata_refuse_the_jump() -> None:
    # As many scattered open ranges as fit: one more range would pass the limit.
    many: list[OffsetRange] = []
    while encode_shadow([*many, OffsetRange(len(many) * 10, len(many) * 10 + 1)]) is not None:
        many.append(OffsetRange(len(many) * 10, len(many) * 10 + 1))
    metadata = encode_shadow(many)
    assert metadata is not None and len(metadata) <= METADATA_LIMIT
    plan = plan_catch_up((10**6, metadata), (0, 2 * 10**6), threshold=10, reset="earliest")
    assert plan.jump is None and plan.refused == "metadata_too_large"
    assert plan.lag == 10**6
    assert plan.shadow == tuple(many), "open ranges are still resumed"


@given(
    open_ranges=ranges_st,
    committed=st.integers(0, 400),
    log_start=st.integers(0, 100),
    extra=st.integers(0, 400),
    threshold=st.integers(0, 200),
)
def test_a_jump_leaves_every_unhandled_offset_recorded(
    open_ranges: list[OffsetRange], committed: int, log_start: int, extra: int, threshold: int
) -> None:
    end = committed + extra
    metadata = encode_shadow(open_ranges)
    assert metadata is not None
    plan = plan_catch_up(
        (committed, metadata), (log_start, end), threshold=threshold, reset="earliest"
    )
    start = max(committed, log_start)
    if end - start <= threshold:
        assert plan.jump is None
        return
    assert plan.jump == end
    # What the commit (J, metadata) still owes: every offset the old commit owed.
    owed_before = _covered(decode_shadow(metadata)) | set(range(start, end))
    assert owed_before <= _covered(decode_shadow(plan.jump_metadata))
    assert _covered(plan.shadow) == _covered(decode_shadow(plan.jump_metadata))


@given(ranges=ranges_st, offset=st.integers(0, 400))
def test_clipping_drops_exactly_the_offsets_below(ranges: list[OffsetRange], offset: int) -> None:
    clipped = clip_below(ranges, offset)
    assert _covered(clipped) == {o for o in _covered(ranges) if o >= offset}
    assert all(len(r) for r in clipped)


def test_shadow_progress_rewrites_the_metadata_until_nothing_is_open() -> None:
    tracker = OffsetTracker()
    tracker.assign(TP, committed=70, metadata="")
    tracker.jump(TP, 120, [OffsetRange(70, 120)], '{"shadow":[[70,120]]}')
    assert tracker.pending() == {TP: (120, '{"shadow":[[70,120]]}')}
    tracker.committed(tracker.pending())
    tracker.advance_shadow(TP, 100)
    assert tracker.pending() == {TP: (120, '{"shadow":[[100,120]]}')}
    tracker.advance_shadow(TP, 90)  # older progress changes nothing
    tracker.advance_shadow(TP, 120)
    assert tracker.pending() == {TP: (120, "")}
    assert tracker.shadow(TP) == ()


def test_resumed_ranges_come_from_the_committed_metadata() -> None:
    tracker = OffsetTracker()
    tracker.assign(TP, committed=500, metadata='{"shadow":[[5,9],[20,30]]}')
    assert tracker.shadow(TP) == (OffsetRange(5, 9), OffsetRange(20, 30))
    assert tracker.pending() == {}
    tracker.advance_shadow(TP, 25)
    assert tracker.pending() == {TP: (500, '{"shadow":[[25,30]]}')}


def test_foreign_metadata_is_kept_as_it_is() -> None:
    tracker = OffsetTracker()
    tracker.assign(TP, committed=5, metadata="written by another tool")
    tracker.advance(TP, 9)
    assert tracker.pending() == {TP: (9, "written by another tool")}


def _replaying(concurrency_limit: int) -> FairScheduler[int]:
    scheduler: FairScheduler[int] = FairScheduler(quota=10, shadow_limit=concurrency_limit)
    scheduler.add_partition(TP, lane=0, max_batch=10)
    scheduler.add_partition(TP, lane=0, max_batch=10, replay=True)
    return scheduler


def test_shadow_and_live_records_of_one_partition_may_be_in_flight_together() -> None:
    scheduler = _replaying(1)
    scheduler.push(TP, [100, 101], nbytes=2)
    scheduler.push(TP, [0, 1], nbytes=2, replay=True)
    first, second = scheduler.next_dispatch(), scheduler.next_dispatch()
    assert first is not None and second is not None
    assert {
        (first.replay, tuple(first.slices[0].records)),
        (second.replay, tuple(second.slices[0].records)),
    } == {
        (False, (100, 101)),
        (True, (0, 1)),
    }


def test_shadow_records_do_not_count_against_the_live_buffer() -> None:
    scheduler = _replaying(1)
    scheduler.push(TP, [100, 101, 102], nbytes=3)
    scheduler.push(TP, [0, 1], nbytes=2, replay=True)
    assert (scheduler.buffered, scheduler.live_buffered) == (5, 3)

    first = scheduler.next_dispatch()
    assert first is not None
    left = {True: (3, 3), False: (2, 0)}  # after taking the shadow's, or the live ones
    assert (scheduler.buffered, scheduler.live_buffered) == left[first.replay]
    assert scheduler.next_dispatch() is not None
    assert (scheduler.buffered, scheduler.live_buffered) == (0, 0)

    scheduler.push(TP, [103], nbytes=1)
    scheduler.push(TP, [2, 3], nbytes=2, replay=True)
    scheduler.revoke([TP], replay=True)
    assert (scheduler.buffered, scheduler.live_buffered, scheduler.replay_buffered) == (1, 1, 0)


@given(
    limit=st.integers(1, 3),
    steps=st.lists(st.sampled_from(["live", "shadow", "dispatch", "release"]), max_size=80),
)
def test_live_records_never_wait_behind_more_than_one_shadow_dispatch(
    limit: int, steps: list[str]
) -> None:
    scheduler: FairScheduler[int] = FairScheduler(quota=5, shadow_limit=limit)
    shadow_tps = [("s", p) for p in range(4)]
    scheduler.add_partition(("live", 0), lane=0, max_batch=5)
    for tp in shadow_tps:
        scheduler.add_partition(tp, lane=0, max_batch=5, replay=True)
    in_flight = []
    shadows_in_a_row = 0
    for n, step in enumerate(steps):
        if step == "live":
            scheduler.push(("live", 0), [n], nbytes=1)
        elif step == "shadow":
            scheduler.push(shadow_tps[n % 4], [n], nbytes=1, replay=True)
        elif step == "release" and in_flight:
            scheduler.release(in_flight.pop(0))
        elif step == "dispatch":
            live_ready = (
                scheduler.queues[("live", 0)].count and not scheduler.queues[("live", 0)].in_flight
            )
            dispatch = scheduler.next_dispatch()
            if dispatch is None:
                continue
            in_flight.append(dispatch)
            shadows_in_a_row = shadows_in_a_row + 1 if dispatch.replay and live_ready else 0
            assert shadows_in_a_row <= 1, "a ready live partition was passed over twice"
        assert scheduler.shadow_in_flight == sum(d.replay for d in in_flight) <= limit


def test_parallel_rebalance_needs_automatic_commits() -> None:
    with pytest.raises(ConfigError, match="parallel_rebalance=True: needs ack='auto'"):
        App(group_id="g", bootstrap="k:9092", ack="manual", parallel_rebalance=True)
    app = App(group_id="g", bootstrap="k:9092", ack="manual")
    with pytest.raises(ConfigError, match="needs ack='auto'"):
        app.subscriber("t", parallel_rebalance=True)


def test_a_negative_handoff_threshold_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"handoff_threshold=-1: must be >= 0"):
        ParallelRebalance(handoff_threshold=-1)


def test_parallel_rebalance_takes_a_bool_or_its_settings() -> None:
    app = App(group_id="g", bootstrap="k:9092", parallel_rebalance=True)
    assert app.parallel_rebalance == ParallelRebalance()
    with pytest.raises(ConfigError, match="must be a bool or a ParallelRebalance"):
        App(group_id="g", bootstrap="k:9092", parallel_rebalance=500)  # type: ignore[arg-type]
