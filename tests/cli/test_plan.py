"""`fairstream plan`: the JSON output contract, the table, and one stderr line per bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fairstream.assign import parse_document
from fairstream.cli import main

EXAMPLE = Path(__file__).parents[2] / "examples" / "plan_whatif.json"

KAFKA5337 = {
    "members": {"C0": ["t0"], "C1": ["t0"]},
    "partitions": {"t0": 3},
    "lag": {"t0": [100_000, 60_000, 50_000]},
}


def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    stdin: str = "",
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    status = main(["plan", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_json_output_contract(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(
        monkeypatch, capsys, ["--strategy", "lag", "--format", "json"], json.dumps(KAFKA5337)
    )
    assert (status, err) == (0, "")
    assert json.loads(out) == {
        "strategy": "lag",
        "assignment": {"C0": {"t0": [0]}, "C1": {"t0": [1, 2]}},
        "stats": {
            "max_member_lag": 110_000,
            "lag_lower_bound": 105_000.0,
            "count_spread": 1,
            "moved": 0,
        },
    }


def test_idle_members_appear_with_empty_objects(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    document = {"members": {"a": ["t"], "b": ["t"], "c": []}, "partitions": {"t": 1}}
    _, out, _ = run(
        monkeypatch, capsys, ["--strategy", "range", "--format", "json"], json.dumps(document)
    )
    assert json.loads(out)["assignment"] == {"a": {"t": [0]}, "b": {}, "c": {}}


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky", "fair", "lag"])
def test_example_file_plans_with_every_strategy(
    strategy: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(
        monkeypatch, capsys, ["--strategy", strategy, "--input", str(EXAMPLE), "--format", "json"]
    )
    result = json.loads(out)
    assert status == 0
    assert sorted(result["assignment"]) == ["c0", "c1", "c2"]
    assert set(result["stats"]) == {"max_member_lag", "lag_lower_bound", "count_spread", "moved"}


def test_table_shows_members_counts_lags_and_figures(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(
        monkeypatch, capsys, ["--strategy", "lag", "--input", "-"], json.dumps(KAFKA5337)
    )
    assert status == 0
    for text in ("C0", "C1", "100,000", "110,000", "105,000", "max member lag", "moved"):
        assert text in out


@pytest.mark.parametrize(
    ("args", "stdin", "words"),
    [
        pytest.param(
            ["--strategy", "lag"],
            '{"members": {',
            "malformed JSON at line 1 column 14",
            id="malformed-json",
        ),
        pytest.param(
            ["--strategy", "fastest"],
            "{}",
            "--strategy='fastest': unknown assignment strategy; "
            "choose one of range, roundrobin, sticky, fair, lag",
            id="unknown-strategy",
        ),
        pytest.param([], "{}", "--strategy: no strategy given", id="no-strategy"),
        pytest.param(
            ["--strategy", "lag"],
            json.dumps({**KAFKA5337, "lag": {"t0": [1, -5, 0]}}),
            "(input key lag.t0[1])",
            id="negative-lag",
        ),
        pytest.param(
            ["--strategy", "lag"],
            json.dumps({**KAFKA5337, "lag": {"t0": [1, 2]}}),
            "lag for topic 't0' has 2 values but the topic has 3 partitions "
            "(input key lag.t0); give one value per partition",
            id="lag-length",
        ),
        pytest.param(
            ["--strategy", "fair"],
            json.dumps({**KAFKA5337, "members": {"C0": ["t0", "t9"]}}),
            "member 'C0' subscribes to unknown topic 't9' (input key members.C0)",
            id="unknown-topic",
        ),
        pytest.param(
            ["--strategy", "sticky"],
            json.dumps({**KAFKA5337, "previous": {"C0": {"t0": [7]}}}),
            "partition t0[7] does not exist; the topic has 3 partitions (input key previous.C0.t0)",
            id="previous-unknown-partition",
        ),
        pytest.param(
            ["--strategy", "sticky"],
            json.dumps({**KAFKA5337, "previous": {"C0": {"t5": [0]}}}),
            "(input key previous.C0.t5)",
            id="previous-unknown-topic",
        ),
        pytest.param(
            ["--strategy", "fair"],
            json.dumps({"members": {}}),
            "(input key partitions)",
            id="missing-key",
        ),
        pytest.param(
            ["--strategy", "fair"],
            json.dumps({**KAFKA5337, "lags": {}}),
            "unknown key 'lags'",
            id="unknown-key",
        ),
        pytest.param(
            ["--strategy", "fair"],
            json.dumps({**KAFKA5337, "partitions": {"t0": "3"}}),
            'must be a whole number, not "3" (input key partitions.t0)',
            id="count-type",
        ),
        pytest.param(
            ["--strategy", "fair"],
            "[1, 2]",
            "the input document must be a JSON object",
            id="not-an-object",
        ),
        pytest.param(
            ["--strategy", "fair"],
            json.dumps({**KAFKA5337, "partitions": {"t0": 100_000_000}}),
            "100,000,000 partitions in all, more than the planner takes (1,000,000 at most; "
            "it is measured at 100,000 partitions x 1,000 members) (input key partitions.t0)",
            id="a-topic-too-large-to-plan",
        ),
        pytest.param(
            ["--strategy", "lag"],
            json.dumps(
                {
                    "members": {"C0": ["a", "b", "c"]},
                    "partitions": {"a": 400_000, "b": 500_000, "c": 400_000},
                }
            ),
            "1,300,000 partitions in all, more than the planner takes (1,000,000 at most; "
            "it is measured at 100,000 partitions x 1,000 members) (input key partitions.b)",
            id="topics-too-large-to-plan-together",
        ),
        pytest.param(
            ["--strategy", "fair", "--input", "/nonexistent/plan.json"],
            "",
            "cannot read the file",
            id="missing-file",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    args: list[str],
    stdin: str,
    words: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(monkeypatch, capsys, args, stdin)
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("fairstream plan: error: ")
    assert words in err


def test_group_without_a_cluster_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FAIRSTREAM_BOOTSTRAP", raising=False)
    status, _, err = run(monkeypatch, capsys, ["--group", "g", "--bootstrap", ""])
    assert status == 2
    assert "--group needs a cluster" in err


def test_the_document_shown_in_help_plans(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--help shows the input format inline (the examples/ folder is not in the wheel)."""
    from fairstream.cli import build_parser

    plan = build_parser()._subparsers._group_actions[0].choices["plan"]
    (help_text,) = [a.help for a in plan._actions if a.dest == "input"]
    document = help_text[help_text.index("{") : help_text.rindex("}") + 1]
    monkeypatch.setattr("sys.stdin", io.StringIO(document))
    assert main(["plan", "--strategy", "lag", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["assignment"] == {"c0": {"t1": [0]}, "c1": {"t1": [1, 2]}}


# The previous plan's busiest member carries 960, the best plan's 950: within 10%.
NEAR_BEST = {
    "members": {"c0": ["t1"], "c1": ["t1"]},
    "partitions": {"t1": 4},
    "lag": {"t1": [900, 50, 60, 800]},
    "previous": {"c0": {"t1": [0, 2]}, "c1": {"t1": [1, 3]}},
}


@pytest.mark.parametrize(("args", "moved"), [([], 0), (["--min-improvement", "0"], 2)])
def test_lag_keeps_a_previous_plan_within_min_improvement(
    args: list[str],
    moved: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run(
        monkeypatch, capsys, ["--strategy", "lag", "--format", "json", *args], json.dumps(NEAR_BEST)
    )
    assert status == 0
    assert json.loads(out)["stats"]["moved"] == moved


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "lag", "--min-improvement", "1"], "--min-improvement=1.0: must be"),
        (["--strategy", "fair", "--min-improvement", "0.2"], "only the lag strategy takes it"),
    ],
)
def test_min_improvement_is_checked(
    args: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, _, err = run(monkeypatch, capsys, args, json.dumps(NEAR_BEST))
    assert status == 2
    assert message in err


def test_the_largest_group_it_plans_is_accepted() -> None:
    document = {"members": {"C0": ["a", "b"]}, "partitions": {"a": 999_999, "b": 1}}
    snapshot, _ = parse_document(document)
    assert sum(snapshot.partitions.values()) == 1_000_000
