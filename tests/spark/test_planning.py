"""Pure planning: ranges, chunks, placement on tasks, commits. No broker, no Spark."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairstream.errors import ConfigError, PlanError
from fairstream.ranges import OffsetRange, encode_shadow
from fairstream.spark.planning import (
    Bound,
    Chunk,
    PartitionState,
    parse_bounds,
    place_chunks,
    plan_commits,
    plan_ranges,
    split_ranges,
)


def state(partition: int = 0, **fields: object) -> PartitionState:
    values: dict[str, object] = {"topic": "t", "log_start": 0, "log_end": 1000} | fields
    return PartitionState(partition=partition, **values)  # type: ignore[arg-type]


def chunk(start: int, end: int, partition: int = 0, topic: str = "t") -> Chunk:
    return Chunk(topic=topic, partition=partition, start=start, end=end)


# --- bounds ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("orders:3=150", [Bound(topic="orders", partition=3, offset=150)], id="one"),
        pytest.param("orders=0", [Bound(topic="orders", partition=None, offset=0)], id="topic"),
        pytest.param(
            "a:0=1, b=2",
            [Bound(topic="a", partition=0, offset=1), Bound(topic="b", partition=None, offset=2)],
            id="list",
        ),
        pytest.param(
            "ns:orders:1=9", [Bound(topic="ns:orders", partition=1, offset=9)], id="colon"
        ),
    ],
)
def test_parse_bounds(text: str, expected: list[Bound]) -> None:
    assert parse_bounds("--from", [text]) == expected


@pytest.mark.parametrize(
    "text", ["orders", "orders:x=1", "orders:0=-1", "=5", "orders:0=1,orders:0=2", "orders:-1=3"]
)
def test_parse_bounds_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="--from"):
        parse_bounds("--from", [text])


# --- ranges ---------------------------------------------------------------------------


def test_ranges_default_to_committed_through_end_plus_shadow() -> None:
    states = [
        state(0, committed=400, metadata=encode_shadow([OffsetRange(10, 20)]) or ""),
        state(1),  # never committed: from the log start
        state(2, committed=1000),  # caught up: nothing to read
    ]
    assert plan_ranges(states) == [chunk(10, 20), chunk(400, 1000), chunk(0, 1000, 1)]


def test_ranges_are_clipped_to_what_retention_kept() -> None:
    states = [state(0, log_start=300, committed=100, metadata='{"shadow":[[50,120]]}')]
    assert plan_ranges(states) == [chunk(300, 1000)]


def test_explicit_bounds_replace_the_defaults() -> None:
    states = [state(0, committed=400), state(1, committed=400)]
    starts = parse_bounds("--from", ["t=100", "t:1=50"])
    ends = parse_bounds("--to", ["t:0=200"])
    assert plan_ranges(states, starts=starts, ends=ends) == [chunk(100, 200), chunk(50, 1000, 1)]


@pytest.mark.parametrize(
    ("starts", "ends", "message"),
    [
        pytest.param([], ["t:0=1001"], "ends at offset 1000", id="to-past-end"),
        pytest.param(["t:0=500"], ["t:0=100"], "lies after the end", id="from-after-to"),
        pytest.param(["u=1"], [], "not being backfilled", id="unknown-topic"),
        pytest.param(["t:7=1"], [], "partitions 0..1", id="unknown-partition"),
    ],
)
def test_bad_bounds_are_config_errors(starts: list[str], ends: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_ranges(
            [state(0), state(1)],
            starts=parse_bounds("--from", starts),
            ends=parse_bounds("--to", ends),
        )


# --- chunks and placement -------------------------------------------------------------

ranges_st = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 10_000), st.integers(0, 3_000)), max_size=12
).map(lambda items: [chunk(s, s + n, p) for p, s, n in items])


@given(ranges_st, st.integers(1, 2_000))
def test_chunks_cover_each_range_exactly(ranges: list[Chunk], size: int) -> None:
    assert split_ranges(ranges, size) == [c for r in ranges for c in split_ranges([r], size)]
    for r in ranges:
        chunks = split_ranges([r], size)
        assert all(1 <= len(c) <= size and c.partition == r.partition for c in chunks)
        edges = [r.start] + [c.end for c in chunks]
        assert [c.start for c in chunks] == edges[:-1]
        assert edges[-1] == r.end


@given(ranges_st, st.integers(1, 2_000), st.integers(1, 8))
def test_placement_uses_every_chunk_once_and_balances_counts(
    ranges: list[Chunk], size: int, tasks: int
) -> None:
    chunks = split_ranges(ranges, size)
    placed = place_chunks(chunks, tasks)
    flat = [c for task in placed for c in task]
    assert sorted(flat) == sorted(chunks)
    assert len(placed) == min(tasks, len(chunks))
    counts = [len(task) for task in placed]
    assert not counts or max(counts) - min(counts) <= 1
    assert all(task == sorted(task) for task in placed)


def test_skewed_partition_is_spread_over_tasks() -> None:
    hot = chunk(0, 1_000_000, 0)
    cold = [chunk(0, 5_000, p) for p in range(1, 8)]
    placed = place_chunks(split_ranges([hot, *cold], 100_000), 4)
    sizes = [sum(len(c) for c in task) for task in placed]
    assert len(placed) == 4
    assert sum(1 for task in placed if any(c.partition == 0 for c in task)) == 4
    # 17 chunks, counts within one (5, 4, 4, 4): some task takes 3 hot chunks and a cold one.
    assert max(sizes) == 305_000


def test_placement_rejects_no_tasks() -> None:
    with pytest.raises(ConfigError, match=r"^tasks=0:"):
        place_chunks([chunk(0, 1)], 0)


def test_chunk_rejects_inverted_range() -> None:
    with pytest.raises(PlanError, match=r"t\[0\]"):
        chunk(5, 1)


# --- commits --------------------------------------------------------------------------


def owed(offset: int, metadata: str, horizon: int) -> set[int]:
    """Offsets below ``horizon`` the group still has to process after a commit."""
    shadow = plan_ranges([state(0, log_end=horizon, committed=offset, metadata=metadata)])
    return {o for r in shadow for o in range(r.start, r.end)}


def test_commit_moves_to_the_end_and_clears_finished_shadow() -> None:
    states = [state(0, committed=400, metadata='{"shadow":[[10,20]]}')]
    (commit,) = plan_commits(states, plan_ranges(states))
    assert (commit.offset, commit.metadata) == (1000, "")


def test_commit_leaves_the_gap_below_an_explicit_range_open() -> None:
    states = [state(0, committed=100)]
    (commit,) = plan_commits(states, [chunk(500, 800)])
    assert (commit.offset, commit.metadata) == (800, '{"shadow":[[100,500]]}')
    assert owed(commit.offset, commit.metadata, 1000) == set(range(100, 500)) | set(
        range(800, 1000)
    )


def test_commit_skips_unchanged_and_untouched_partitions() -> None:
    states = [state(0, committed=400), state(1, committed=0)]
    assert plan_commits(states, [chunk(10, 20)]) == []  # below the committed offset: no change


def test_commit_refuses_metadata_that_does_not_fit() -> None:
    states = [state(0, log_end=10**6, committed=0)]
    holes = [chunk(s, s + 1) for s in range(1, 1000, 2)]  # 500 gaps: about 6 kB of JSON
    with pytest.raises(PlanError, match="do not fit"):
        plan_commits(states, holes)


@given(
    st.integers(0, 300),
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), max_size=4),
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 80)), max_size=4),
    st.integers(0, 50),
)
def test_commit_owes_exactly_what_was_owed_minus_what_was_done(
    committed: int,
    shadow: list[tuple[int, int]],
    done: list[tuple[int, int]],
    log_start: int,
) -> None:
    ranges = [OffsetRange(s, min(s + n, committed)) for s, n in shadow if s < committed]
    metadata = encode_shadow(ranges) or ""
    finished = [chunk(s, s + n) for s, n in done]
    now = state(0, committed=committed, metadata=metadata, log_start=log_start, log_end=1000)
    commits = plan_commits([now], finished)
    offset, after = (commits[0].offset, commits[0].metadata) if commits else (committed, metadata)
    expected = owed(committed, metadata, 1000)
    if finished:
        expected -= {o for c in finished for o in range(c.start, c.end)} | set(range(log_start))
    assert owed(offset, after, 1000) == expected
    assert offset >= committed
