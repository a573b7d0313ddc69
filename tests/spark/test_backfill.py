"""Backfills on a real broker and a local Spark session: exactly once, commit or nothing."""

from __future__ import annotations

import asyncio
import collections
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark import TaskContext
from pyspark.sql import SparkSession

from fairstream.errors import BackfillError, BrokerError
from fairstream.ranges import OffsetRange, encode_shadow
from fairstream.spark import (
    BackfillJob,
    BackfillRecord,
    Handler,
    run_backfill,
    submit_shadow_backfill,
)
from fairstream.spark.cluster import commit, read_states
from fairstream.spark.planning import Chunk, PartitionCommit, parse_bounds
from fairstream.spark.reading import ReadSettings, read_task
from fairstream.spark.source import read_chunks
from tests.conftest import Broker
from tests.spark.conftest import fill_topic, record_value

pytestmark = [pytest.mark.spark, pytest.mark.broker]

Seen = collections.Counter[tuple[str, int, int]]


def recorder(directory: Path, *, is_async: bool = False, fail_at: int | None = None) -> Handler:
    """A handler that appends ``topic partition offset task`` lines to a file per process."""

    def write(record: BackfillRecord) -> None:
        if record.offset == fail_at:
            raise ValueError(f"refusing offset {record.offset}")
        task = TaskContext.get().partitionId()  # type: ignore[union-attr]
        with open(directory / f"{os.getpid()}.txt", "a") as out:
            out.write(f"{record.topic} {record.partition} {record.offset} {task}\n")

    async def write_async(record: BackfillRecord) -> None:
        await asyncio.sleep(0)
        write(record)

    return write_async if is_async else write


def seen(directory: Path) -> tuple[Seen, dict[int, set[int]]]:
    """Records handled (with how often) and the Spark tasks that read each partition."""
    counts: Seen = collections.Counter()
    tasks: dict[int, set[int]] = collections.defaultdict(set)
    for path in directory.glob("*.txt"):
        for line in path.read_text().splitlines():
            topic, partition, offset, task = line.split()
            counts[(topic, int(partition), int(offset))] += 1
            tasks[int(partition)].add(int(task))
    return counts, tasks


def offsets(topic: str, partition: int, start: int, end: int) -> set[tuple[str, int, int]]:
    return {(topic, partition, offset) for offset in range(start, end)}


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_handler_sees_each_offset_once_then_commit_clears_shadow(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path, is_async: bool
) -> None:
    topic = fill_topic(noida.bootstrap, [3000, 1500, 300])
    shadow = encode_shadow([OffsetRange(100, 200)]) or ""
    commit(
        noida.bootstrap,
        group_id,
        [PartitionCommit(topic=topic, partition=1, offset=500, metadata=shadow)],
    )
    job = BackfillJob(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        topics=(topic,),
        handler=recorder(tmp_path, is_async=is_async),
        chunk=400,
        progress=lambda finished, tasks: reports.append((finished, tasks)),
    )
    reports: list[tuple[int, int]] = []

    result = run_backfill(job, spark=spark)

    counts, _ = seen(tmp_path)
    expected = (
        offsets(topic, 0, 0, 3000)
        | offsets(topic, 1, 100, 200)
        | offsets(topic, 1, 500, 1500)
        | offsets(topic, 2, 0, 300)
    )
    assert set(counts) == expected
    assert set(counts.values()) == {1}
    assert result.records == len(expected)
    states = read_states(noida.bootstrap, group_id, [topic])
    assert [(s.committed, s.metadata) for s in states] == [(3000, ""), (1500, ""), (300, "")]
    # The caller hears the finished tasks grow to the whole job (it draws them).
    assert reports[-1] == (result.tasks, result.tasks)
    assert [finished for finished, _ in reports] == sorted(finished for finished, _ in reports)


def test_skewed_partition_is_read_by_several_tasks(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [4000, 50, 50, 50])
    job = BackfillJob(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        topics=(topic,),
        handler=recorder(tmp_path),
        chunk=1000,
        tasks=2,
        commit=False,
    )

    result = run_backfill(job, spark=spark)

    counts, tasks = seen(tmp_path)
    assert result.tasks == 2
    assert tasks[0] == {0, 1}  # the hot partition is split over both tasks
    assert len(counts) == sum(counts.values()) == 4150


def test_failing_handler_commits_nothing(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [1000, 1000])
    job = BackfillJob(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        topics=(topic,),
        handler=recorder(tmp_path, fail_at=700),
        chunk=250,
    )

    with pytest.raises(
        BackfillError, match=r"ValueError: refusing offset 700.*nothing was committed"
    ):
        run_backfill(job, spark=spark)

    states = read_states(noida.bootstrap, group_id, [topic])
    assert [s.committed for s in states] == [None, None]


def test_parquet_output_reads_back_with_pyarrow(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [2500, 700])
    output = tmp_path / "out"
    job = BackfillJob(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        topics=(topic,),
        output=str(output),
        chunk=1000,
        starts=tuple(parse_bounds("--from", [f"{topic}:0=100"])),
        ends=tuple(parse_bounds("--to", [f"{topic}:0=2100"])),
        commit=False,
    )

    result = run_backfill(job, spark=spark)

    table = pq.read_table(output)
    assert table.column_names == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
    ]
    rows = set(
        zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True)
    )
    assert rows == offsets(topic, 0, 100, 2100) | offsets(topic, 1, 0, 700)
    assert table.num_rows == result.records == 2700
    by_offset = {(r["partition"], r["offset"]): r for r in table.to_pylist()}
    assert by_offset[(1, 0)]["value"] is None
    assert by_offset[(0, 1234)]["value"] == record_value(0, 1234)
    assert by_offset[(0, 1234)]["key"] == b"k1234"
    assert by_offset[(0, 1234)]["headers"] == [{"key": "source", "value": b"test"}]
    assert by_offset[(0, 1234)]["timestamp"] is not None
    assert [s.committed for s in read_states(noida.bootstrap, group_id, [topic])] == [None, None]


def test_shadow_backfill_hook_reads_one_range_and_commits_nothing(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [800, 800])
    commit(
        noida.bootstrap,
        group_id,
        [PartitionCommit(topic=topic, partition=1, offset=700, metadata='{"shadow":[[50,650]]}')],
    )

    result = submit_shadow_backfill(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        topic=topic,
        partition=1,
        shadow=OffsetRange(50, 650),
        handler=recorder(tmp_path),
        chunk=200,
    )

    counts, _ = seen(tmp_path)
    assert set(counts) == offsets(topic, 1, 50, 650) and set(counts.values()) == {1}
    assert result.ranges == (Chunk(topic=topic, partition=1, start=50, end=650),)
    assert result.commits == ()
    states = read_states(noida.bootstrap, group_id, [topic])
    assert states[1].committed == 700 and states[1].metadata == '{"shadow":[[50,650]]}'


def test_stalled_range_fails_with_a_clear_error(spark: SparkSession, noida: Broker) -> None:
    topic = fill_topic(noida.bootstrap, [10])
    past_the_end = [[Chunk(topic=topic, partition=0, start=0, end=20)]]
    frame = read_chunks(
        spark, past_the_end, ReadSettings(bootstrap=noida.bootstrap, stall_timeout=2)
    )

    with pytest.raises(
        Exception, match=r"no progress reading spark-\w+\[0\] at offset 10 of \[0, 20\)"
    ):
        frame.collect()


def test_a_fetch_answer_above_the_readers_limit_fails_at_once_saying_what_to_raise(
    noida: Broker,
) -> None:
    # noida ignores fetch size limits and answers with the whole partition (~150 kB);
    # the reader takes 20 kB. librdkafka refuses that answer on every try.
    topic = fill_topic(noida.bootstrap, [2_000])
    settings = ReadSettings(
        bootstrap=noida.bootstrap,
        stall_timeout=5,
        kafka_config={
            "receive.message.max.bytes": "20000",
            "fetch.max.bytes": "10000",
            "message.max.bytes": "5000",
        },
    )

    with pytest.raises(BrokerError) as raised:
        list(read_task(settings, [Chunk(topic=topic, partition=0, start=0, end=2_000)]))
    # Not the stall error after 5 s: the error that says what to change.
    assert "no progress" not in str(raised.value)
    assert "raise the option kafka.receive.message.max.bytes" in str(raised.value)
    assert "Invalid response size" in str(raised.value)
