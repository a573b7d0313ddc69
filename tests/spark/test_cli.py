"""``fairstream backfill``: every option explained, bad arguments exit 2 with one clear line."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from fairstream.cli import build_parser, main
from fairstream.spark import BackfillRecord
from fairstream.spark.cluster import read_states
from fairstream.spark.handlers import load_handler
from tests.conftest import Broker
from tests.spark.conftest import fill_topic

OPTIONS = [
    "--bootstrap",
    "--group",
    "--topics",
    "--handler",
    "--output",
    "--master",
    "--chunk",
    "--tasks",
    "--from",
    "--to",
    "--no-commit",
    "--timeout",
    "--kafka-config",
    "--no-progress",
]


def test_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["backfill", "--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    text = "".join(shown.split())  # argparse wraps lines, also after hyphens
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {
        option: action.help
        for action in commands.choices["backfill"]._actions
        for option in action.option_strings
    }
    for option in OPTIONS:
        explained = helps[option]
        assert explained, f"{option} has no help text"
        assert "".join(explained.split()).replace("%%", "%") in text
    assert "FAIRSTREAM_BOOTSTRAP" in shown and "TOPIC:PARTITION=OFFSET" in shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--topics", "t", "--output", "x"], "--group", id="no-group"),
        pytest.param(["--group", "g", "--output", "x"], "--topics", id="no-topics"),
        pytest.param(["--group", "g", "--topics", "t"], "--handler", id="no-sink"),
        pytest.param(
            ["--group", "g", "--topics", "t", "--handler", "m:f", "--output", "x"],
            "not allowed with",
            id="both-sinks",
        ),
        pytest.param(
            ["--group", "g", "--topics", "t", "--output", "x", "--chunk", "big"],
            "invalid int",
            id="chunk-not-int",
        ),
    ],
)
def test_usage_errors_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["backfill", "--bootstrap", "127.0.0.1:1", *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


BASE = ["backfill", "--group", "g", "--topics", "t", "--no-progress"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--output", "x", "--from", "t:x=1"], "--from='t:x=1': expected TOPIC", id="from"
        ),
        pytest.param(
            ["--output", "x", "--chunk", "0"], "--chunk=0: must be at least 1", id="chunk"
        ),
        pytest.param(
            ["--output", "x", "--tasks", "0"], "--tasks=0: must be at least 1", id="tasks"
        ),
        pytest.param(["--handler", "nocolon"], "expected MODULE:FUNCTION", id="handler-ref"),
        pytest.param(["--handler", "no_such_module:f"], "cannot import", id="handler-import"),
        pytest.param(
            ["--output", "x", "--kafka-config", "novalue"], "expected KEY=VALUE", id="kafka"
        ),
    ],
)
def test_bad_values_print_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, "--bootstrap", "127.0.0.1:1", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fairstream backfill: error: ") and err.count("\n") == 1
    assert message in err


def test_missing_bootstrap_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FAIRSTREAM_BOOTSTRAP", raising=False)
    assert main([*BASE, "--output", "x"]) == 2
    assert "FAIRSTREAM_BOOTSTRAP" in capsys.readouterr().err


def test_existing_output_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "old.parquet").write_bytes(b"")
    assert main([*BASE, "--bootstrap", "127.0.0.1:1", "--output", str(tmp_path)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err


def test_unreachable_broker_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*BASE, "--bootstrap", "127.0.0.1:1", "--output", "x", "--timeout", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "cannot read offsets of group 'g'" in err and "bootstrap 127.0.0.1:1" in err


@pytest.mark.broker
def test_unknown_topic_is_a_clear_error(noida: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["backfill", "--bootstrap", noida.bootstrap, "--group", "g", "--output", "x"]
    assert main([*args, "--topics", "no-such-topic-here"]) == 2
    assert "--topics='no-such-topic-here': no such topic" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.broker
def test_cli_writes_parquet_and_commits(
    spark: SparkSession,
    noida: Broker,
    group_id: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = fill_topic(noida.bootstrap, [400, 100])
    output = tmp_path / "out"
    args = ["backfill", "--bootstrap", noida.bootstrap, "--group", group_id, "--topics", topic]

    assert main([*args, "--output", str(output), "--chunk", "150", "--no-progress"]) == 0

    assert "backfilled 500 records" in capsys.readouterr().out
    assert pq.read_table(output).num_rows == 500
    assert [s.committed for s in read_states(noida.bootstrap, group_id, [topic])] == [400, 100]


def test_example_handler_loads_and_summarizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKFILL_OUT", str(tmp_path))
    handle = load_handler("examples.backfill_handler:handle")
    value = json.dumps({"customer": "c7", "amount": 12}).encode()
    handle(BackfillRecord("orders", 2, 41, b"k", value, (), 1_700_000_000_000))
    (written,) = tmp_path.glob(f"orders-{os.getpid()}.jsonl")
    summary = json.loads(written.read_text())
    assert summary["customer"] == "c7" and summary["offset"] == 41 and not summary["deleted"]
