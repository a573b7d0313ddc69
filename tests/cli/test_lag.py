"""`fairstream lag`: committed, end, lag, records deleted unread and open shadow ranges per
partition (a partition never committed: lag from --auto-offset-reset); bad input exits 2."""

from __future__ import annotations

import json
import uuid

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import OffsetAndMetadata

from fairstream.cli import main
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.broker


async def _commit(
    bootstrap: str, group_id: str, commits: dict[TopicPartition, tuple[int, str]]
) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
    await consumer.start()
    try:
        consumer.assign(list(commits))
        await consumer.commit({tp: OffsetAndMetadata(*c) for tp, c in commits.items()})
    finally:
        await consumer.stop()


@pytest.fixture
def group_with_shadow(noida: Broker, group_id: str) -> tuple[str, str]:
    """A 3-partition topic: p0 committed plainly at 70, then retention (delete_records)
    removed its first 100 records; p1 with open shadow ranges; p2 never committed."""
    topic = f"lag-{uuid.uuid4().hex[:10]}"

    async def prepare() -> None:
        await create_topic(noida.bootstrap, topic, 3)
        await produce(noida.bootstrap, topic, [(p, b"v") for p in range(3) for _ in range(200)])
        await _commit(
            noida.bootstrap,
            group_id,
            {
                TopicPartition(topic, 0): (70, ""),
                TopicPartition(topic, 1): (150, '{"shadow":[[5,9],[20,30]]}'),
            },
        )
        admin = AIOKafkaAdminClient(bootstrap_servers=noida.bootstrap)
        await admin.start()
        try:
            await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(100)})
        finally:
            await admin.close()

    anyio.run(prepare)
    return topic, group_id


def _lag(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["lag", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_json_shows_each_partition_with_its_shadow_ranges(
    noida: Broker, group_with_shadow: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = group_with_shadow
    status, out, err = _lag(
        capsys,
        "--bootstrap",
        noida.bootstrap,
        "--group",
        group,
        "--topics",
        topic,
        "--format",
        "json",
    )
    assert (status, err) == (0, "")
    assert json.loads(out) == {
        "group": group,
        "protocol": None,
        "auto_offset_reset": "latest",
        "partitions": [
            {
                "topic": topic,
                "partition": 0,
                "committed": 70,
                "end": 200,
                "lag": 100,
                "deleted_unread": 30,
                "shadow": [],
                "shadow_records": 0,
            },
            {
                "topic": topic,
                "partition": 1,
                "committed": 150,
                "end": 200,
                "lag": 50,
                "deleted_unread": 0,
                "shadow": [[5, 9], [20, 30]],
                "shadow_records": 14,
            },
            {
                "topic": topic,
                "partition": 2,
                "committed": None,
                "end": 200,
                "lag": 0,  # never committed: latest (the default) starts at the end
                "deleted_unread": None,
                "shadow": [],
                "shadow_records": 0,
            },
        ],
    }


def test_table_shows_the_same_facts(
    noida: Broker,
    group_with_shadow: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = group_with_shadow
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps to the terminal, 80 columns under capture
    status, out, _ = _lag(
        capsys, "--bootstrap", noida.bootstrap, "--group", group, "--topics", topic
    )
    assert status == 0
    lines = {line.split("│")[2].strip(): line for line in out.splitlines() if topic in line}
    assert lines.keys() == {"0", "1", "2"}
    assert [cell.strip() for cell in lines["0"].split("│")[3:9]] == [
        "70",
        "200",
        "100",
        "30",
        "0",
        "-",
    ]
    assert [cell.strip() for cell in lines["1"].split("│")[3:9]] == [
        "150",
        "200",
        "50",
        "0",
        "14",
        "[5, 9) [20, 30)",
    ]
    assert [cell.strip() for cell in lines["2"].split("│")[3:9]] == ["-", "200", "0", "-", "0", "-"]
    assert "committed -: never committed; its lag counts from auto.offset.reset=latest" in out


@pytest.mark.parametrize(("reset", "lag"), [("latest", 0), ("earliest", 200)])
def test_a_partition_never_committed_counts_lag_from_auto_offset_reset(
    noida: Broker,
    group_with_shadow: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    reset: str,
    lag: int,
) -> None:
    """The lag the assignor plans with: earliest means every retained record is behind."""
    topic, group = group_with_shadow
    args = ["--bootstrap", noida.bootstrap, "--group", group, "--topics", topic]
    status, out, _ = _lag(capsys, *args, "--auto-offset-reset", reset, "--format", "json")
    assert status == 0
    document = json.loads(out)
    assert document["auto_offset_reset"] == reset
    never = document["partitions"][2]
    assert (never["committed"], never["lag"]) == (None, lag)
    assert [row["lag"] for row in document["partitions"][:2]] == [100, 50]  # committed: as is


@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param(["--topics", "no-such-topic"], "not found on the cluster", id="unknown-topic"),
        pytest.param([], "has no active members to name its topics", id="idle-group"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    noida: Broker, group_id: str, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    status, out, err = _lag(capsys, "--bootstrap", noida.bootstrap, "--group", group_id, *args)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("fairstream lag: error: ")
    assert words in err


def test_unknown_group_is_named_not_shown_as_uncommitted(
    broker: Broker, group_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"lag-{uuid.uuid4().hex[:10]}"
    anyio.run(create_topic, broker.bootstrap, topic, 2)
    status, out, err = _lag(
        capsys, "--bootstrap", broker.bootstrap, "--group", group_id, "--topics", topic
    )
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert f"--group={group_id!r}: unknown group: no members and no committed offsets" in err


def test_no_cluster_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FAIRSTREAM_BOOTSTRAP", raising=False)
    status, _, err = _lag(capsys, "--group", "g", "--bootstrap", "")
    assert status == 2
    assert err.count("\n") == 1 and "pass --bootstrap or set FAIRSTREAM_BOOTSTRAP" in err
