"""Fair admission, catch-up offsets and group commits of the streaming source: pure."""

from __future__ import annotations

import pytest

from fairstream.errors import ConfigError
from fairstream.ranges import OffsetRange, decode_shadow
from fairstream.spark.planning import Chunk, PartitionCommit
from fairstream.spark.streamplan import (
    Admission,
    Position,
    StreamOffset,
    admit,
    batch_ranges,
    group_commits,
    hold_new_reads,
    losses,
    plan_tasks,
    proportional_split,
    water_fill,
)

HOT, A, B = ("t", 0), ("t", 1), ("t", 2)


def test_water_fill_gives_small_demands_all_and_splits_the_rest_evenly() -> None:
    assert water_fill({HOT: 1_000_000, A: 30, B: 500}, 1000) == {A: 30, B: 485, HOT: 485}
    assert water_fill({HOT: 10, A: 10}, 5) == {HOT: 3, A: 2}  # ties: lower partition first
    assert water_fill({HOT: 7, A: 0}, 100) == {HOT: 7}


def test_proportional_is_spark_kafka_rule_and_starves_live_partitions() -> None:
    grants = proportional_split({HOT: 1_000_000, A: 300, B: 300}, 20_000)
    assert grants == {HOT: 19988, A: 5, B: 5}  # floor(20000 * 300 / 1000600) == 5
    assert proportional_split({HOT: 1_000_000, A: 10}, 1000) == {HOT: 999, A: 1}  # ceil below 1


def test_fair_admission_serves_live_partitions_whole_beside_a_backlog() -> None:
    start = {HOT: Position(0), A: Position(0), B: Position(0)}
    logs = {HOT: (0, 1_000_000), A: (0, 300), B: (0, 300)}
    fair = admit(start, logs, 20_000, Admission())
    assert (fair[A].next, fair[B].next, fair[HOT].next) == (300, 300, 19_400)
    spark = admit(start, logs, 20_000, Admission(mode="proportional"))
    assert (spark[A].next, spark[B].next) == (5, 5)


def test_no_limit_reads_everything_including_catch_up_ranges() -> None:
    start = {HOT: Position(500, (OffsetRange(10, 20),))}
    assert admit(start, {HOT: (0, 900)}, None, Admission()) == {HOT: Position(900)}


def test_a_lagging_partition_jumps_and_drains_its_backlog_from_a_bounded_share() -> None:
    start = {HOT: Position(0), A: Position(0)}
    logs = {HOT: (0, 10_000), A: (0, 2_000)}
    catch_up = Admission(parallel_catch_up=True, threshold=5000, share=0.25)
    end = admit(start, logs, 1000, catch_up)
    # HOT jumped to 10000; 250 of the budget drains its backlog, A's live records get 750.
    assert end == {HOT: Position(10_000, (OffsetRange(250, 10_000),)), A: Position(750)}
    assert batch_ranges(start, end) == [
        Chunk(topic="t", partition=0, start=0, end=250),
        Chunk(topic="t", partition=1, start=0, end=750),
    ]
    # With little live traffic the backlog takes the rest of the batch.
    later = admit(end, {HOT: (0, 10_010), A: (0, 800)}, 1000, catch_up)
    assert later == {HOT: Position(10_010, (OffsetRange(1190, 10_000),)), A: Position(800)}


def test_every_offset_is_read_once_until_drained() -> None:
    position = {HOT: Position(0), A: Position(0)}
    logs = {HOT: (0, 5000), A: (0, 700)}
    catch_up = Admission(parallel_catch_up=True, threshold=100, share=0.5)
    read: list[tuple[int, int]] = []
    for _ in range(50):
        end = admit(position, logs, 333, catch_up)
        batch = batch_ranges(position, end)
        assert sum(len(c) for c in batch) <= 333
        read += [(c.partition, o) for c in batch for o in range(c.start, c.end)]
        position = end
    assert sorted(read) == [(0, o) for o in range(5000)] + [(1, o) for o in range(700)]
    assert position == {HOT: Position(5000), A: Position(700)}


def test_retention_clips_and_new_partitions_enter_at_their_log_start() -> None:
    start = {HOT: Position(5, (OffsetRange(0, 3),))}
    end = admit(start, {HOT: (10, 20), A: (4, 9)}, 100, Admission())
    assert end == {HOT: Position(20), A: Position(4)}  # A is read from the next batch
    log_starts = {HOT: 10, A: 4}
    assert batch_ranges(start, end, log_starts) == [Chunk(topic="t", partition=0, start=10, end=20)]


def test_offsets_round_trip_json_and_reject_foreign_checkpoints() -> None:
    offset = StreamOffset("g", {HOT: Position(9, (OffsetRange(1, 4),)), A: Position(3)})
    assert StreamOffset.from_json(offset.to_json()) == offset
    with pytest.raises(ConfigError, match="did not write"):
        StreamOffset.from_json({"0": 12})


def test_group_commit_is_next_with_open_ranges_in_metadata_once() -> None:
    end = {HOT: Position(900, (OffsetRange(100, 400),)), A: Position(30)}
    commits = group_commits(end, {A: (30, "")})
    assert commits == [
        PartitionCommit(topic="t", partition=0, offset=900, metadata='{"shadow":[[100,400]]}')
    ]
    assert decode_shadow(commits[0].metadata + "\x00\x00") == [OffsetRange(100, 400)]


def test_bad_admission_settings_name_the_option() -> None:
    with pytest.raises(ConfigError, match="catchUpShare"):
        Admission(share=0)


def test_a_hot_partition_is_read_by_several_tasks_and_small_batches_by_one() -> None:
    hot = Chunk(topic="t", partition=0, start=0, end=40_000)
    live = [Chunk(topic="t", partition=p, start=0, end=300) for p in (1, 2, 3)]
    tasks = plan_tasks([hot, *live], max_tasks=3)
    assert len(tasks) == 3
    assert sum(1 for task in tasks if any(c.partition == 0 for c in task)) >= 2
    assert sorted(c for task in tasks for c in task if c.partition) == live
    assert sum(len(c) for task in tasks for c in task if c.partition == 0) == 40_000
    assert len(plan_tasks(live, max_tasks=8)) == 1
    assert plan_tasks([], max_tasks=8) == []


def test_a_large_read_of_a_partition_not_read_last_batch_waits_one_batch_for_its_readers() -> None:
    start = {HOT: Position(1000), A: Position(0), B: Position(0)}
    end = {HOT: Position(19_400), A: Position(300), B: Position(300)}
    held, warm = hold_new_reads(start, end, read_last=[A, B])
    # HOT reads nothing this batch; every task starts a reader at its first offset.
    assert held == {HOT: Position(1000), A: Position(300), B: Position(300)}
    assert warm == [Chunk(topic="t", partition=0, start=1000, end=19_400)]
    # The batch after, HOT was warmed (the source counts it as read): nothing is held.
    assert hold_new_reads(start, end, read_last=[HOT, A, B]) == (end, [])


def test_small_reads_and_batches_with_nothing_else_are_not_held() -> None:
    start = {HOT: Position(0), A: Position(0)}
    small = {HOT: Position(10_000), A: Position(300)}  # at most TASK_RECORDS
    assert hold_new_reads(start, small, read_last=[]) == (small, [])
    alone = {HOT: Position(20_000), A: Position(0)}  # held, the batch would be empty
    assert hold_new_reads(start, alone, read_last=[]) == (alone, [])
    entering = {**small, B: Position(5)}  # a new partition is read from the next batch
    assert hold_new_reads(start, entering, read_last=[]) == (entering, [])
    many = {("t", p): Position(0) for p in range(3, 6)}  # more than HOLD_LIMIT: a replay
    replay = ({**start, **many}, {HOT: Position(11_000), A: Position(300)})
    replay[1].update({tp: Position(11_000) for tp in many})
    assert hold_new_reads(*replay, read_last=[]) == (replay[1], [])


def test_a_held_catch_up_partition_warms_at_its_first_owed_offset() -> None:
    start = {HOT: Position(900_000, (OffsetRange(100, 900_000),)), A: Position(0)}
    end = {HOT: Position(900_050, (OffsetRange(15_000, 900_000),)), A: Position(40)}
    held, warm = hold_new_reads(start, end, read_last=[A])
    assert held[HOT] == start[HOT]
    assert warm == [Chunk(topic="t", partition=0, start=100, end=15_000)]


def test_losses_name_owed_offsets_retention_deleted_and_logs_that_went_back() -> None:
    start = {
        HOT: Position(20, (OffsetRange(5, 10),)),
        A: Position(7),
        B: Position(30),
    }
    logs = {HOT: (15, 40), A: (0, 9), B: (0, 4)}
    found = {(loss.topic, loss.partition): loss for loss in losses(start, logs)}
    assert set(found) == {HOT, B}  # A owes nothing its log lost
    assert found[HOT].lost == "offsets 5-9 were deleted before they were read (log start 15)"
    assert found[HOT].restart is None  # the log start clips it
    assert found[B].lost.startswith("the log ends at 4 but the query read up to 30")
    assert found[B].restart == Position(0)  # read the new log from its start


def test_a_log_that_went_back_is_read_again_from_its_start() -> None:
    start, end = {B: Position(30)}, {B: Position(4)}
    assert batch_ranges(start, end, {B: 0}) == [Chunk(topic="t", partition=2, start=0, end=4)]
