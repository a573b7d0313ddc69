"""``fairstream stream``: a query from the command line, batch lines, one-line errors."""

from __future__ import annotations

import collections
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from fairstream.cli import main
from fairstream.spark import BackfillRecord
from fairstream.spark.cluster import read_states
from fairstream.spark.handlers import load_handler
from fairstream.spark.streamjob import BatchProgress, StreamJob, run_stream
from tests.conftest import Broker
from tests.spark.conftest import fill_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def test_stream_writes_parquet_prints_batches_and_commits(
    spark: SparkSession,
    noida: Broker,
    group_id: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = fill_topic(noida.bootstrap, [900, 200])
    args = ["stream", "--bootstrap", noida.bootstrap, "--group", group_id, "--topics", topic]
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    assert (
        main(
            [
                *args,
                *("--output", str(out), "--checkpoint", str(checkpoint), "--max-records", "500"),
                *("--poll-timeout-ms", "20000", "--fetch-offset-retries", "5"),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert f"streamed 1100 records of group {group_id!r}" in captured.out
    # 1100 records at most 500 a batch; the small partition is served whole first.
    assert "batch 0: 500 records; lag " + topic + " 600" in captured.err
    assert "batch 2: 100 records; lag " + topic + " 0" in captured.err
    assert pq.read_table(out).num_rows == 1100
    states = read_states(noida.bootstrap, group_id, [topic])
    assert [s.committed for s in states] == [900, 200]


def test_run_stream_calls_the_handler_for_every_record(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [300, 300])
    handled = tmp_path / "handled"
    handled.mkdir()

    def handle(record: BackfillRecord) -> None:
        with open(handled / f"{os.getpid()}.txt", "a") as out:
            out.write(f"{record.partition} {record.offset}\n")

    batches: list[BatchProgress] = []
    job = StreamJob(  # by pattern (--topic-pattern), its one topic matching
        bootstrap=noida.bootstrap,
        group_id=group_id,
        topics=(),
        topic_pattern=re.escape(topic),
        checkpoint=str(tmp_path / "ck"),
        handler=handle,
        options={"maxOffsetsPerTrigger": "400"},
        progress=batches.append,
    )
    assert run_stream(job, spark=spark) == 600
    lines = [line for path in handled.glob("*.txt") for line in path.read_text().splitlines()]
    assert collections.Counter(lines) == {f"{p} {o}": 1 for p in (0, 1) for o in range(300)}
    assert [b.records for b in batches] == [400, 200]
    assert batches[-1].lag == {topic: 0}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--topics", "no-such-topic-here"], "'no-such-topic-here': no such topic"),
        (["--topics", "t", "--trigger", "soon"], "--trigger='soon': not available-now"),
        (["--topic-pattern", "t-["], "--topic-pattern='t-[': not a regular expression"),
        (["--topics", "t", "--poll-timeout-ms", "0"], "--poll-timeout-ms='0': not a positive"),
        (
            ["--topics", "t", "--fetch-offset-retries", "none"],
            "--fetch-offset-retries='none': not a positive integer",
        ),
        (
            ["--topics", "t", "--fetch-offset-retry-interval-ms", "-5"],
            "--fetch-offset-retry-interval-ms='-5': negative",
        ),
    ],
)
def test_bad_input_prints_one_line_and_exits_2(
    spark: SparkSession,
    noida: Broker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    args = [
        "stream",
        "--bootstrap",
        noida.bootstrap,
        "--group",
        "g",
        "--output",
        str(tmp_path / "o"),
    ]
    assert main([*args, "--checkpoint", str(tmp_path / "ck"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1, err


def test_example_stream_handler_writes_a_line_per_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAM_OUT", str(tmp_path))
    handle = load_handler("examples.stream_handler:handle")
    handle(BackfillRecord("clicks", 3, 17, None, b"checkout", (), 1_700_000_000_000))
    (written,) = tmp_path.glob(f"clicks-{os.getpid()}.txt")
    assert written.read_text() == "3 17 checkout\n"
