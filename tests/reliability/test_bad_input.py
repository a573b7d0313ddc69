"""Failing handlers and poison records: retried or dead-lettered, counted, never
lost, and the partition keeps flowing past them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from fairstream import App, Record, RetryPolicy, SchedulerConfig
from fairstream.runtime._decode import DecodeError, decoder_for
from tests.conftest import Broker
from tests.reliability.checker import summary
from tests.reliability.scenarios import handler_failures, poison_records
from tests.support.backends import QUICK_JOIN
from tests.support.kafka_helpers import committed, create_topic, read_all

pytestmark = [pytest.mark.broker, pytest.mark.reliability]


def _static(broker: Broker) -> bool:
    return broker.instance_id("member") is not None


@pytest.mark.parametrize("seed", [8, 2026])
async def test_handler_exceptions_at_a_set_rate_are_retried_or_dead_lettered(
    broker: Broker, tmp_path: Path, seed: int
) -> None:
    """5% of records always fail, 10% fail once: the first go to the DLQ after
    three attempts, the others succeed on their retry; nothing is lost or doubled."""
    outcome = await handler_failures(
        broker.bootstrap,
        static=_static(broker),
        records=1_500,
        partitions=3,
        permanent_rate=0.05,
        transient_rate=0.10,
        seed=seed,
        workdir=tmp_path,
    )
    result = outcome.result
    assert outcome.permanent and outcome.transient, "the seed drew no failures"
    assert result.lost == 0, summary(result)
    assert result.duplicated == 0, summary(result)
    dead_ids = {d.value.decode().split('"')[3] for d in outcome.dead}
    assert dead_ids == outcome.permanent
    for dead in outcome.dead:
        headers = dict(dead.headers)
        assert headers["fairstream.error.type"] == b"RuntimeError"
        assert headers["fairstream.error.message"].startswith(b"permanent failure for ")
        assert headers["fairstream.attempts"] == b"3"
    assert all(outcome.attempts[i] == 3 for i in outcome.permanent)
    assert all(outcome.attempts[i] == 2 for i in outcome.transient)
    # Everything handled or dead-lettered is committed, so a restart re-reads nothing.
    assert outcome.committed == [500, 500, 500]


async def test_poison_records_are_dead_lettered_and_the_partition_keeps_flowing(
    broker: Broker, tmp_path: Path
) -> None:
    """Invalid UTF-8, invalid JSON, a ~1 MB record (noida's default max.message.bytes
    is 1 MiB) that is invalid and one that is valid, an empty key and value."""
    outcome = await poison_records(
        broker.bootstrap,
        static=_static(broker),
        records=600,
        partitions=2,
        every=20,
        large=1_000_000,
        workdir=tmp_path,
    )
    result = outcome.result
    assert result.lost == 0, summary(result)
    assert result.duplicated == 0, summary(result)
    dead_kinds = {}
    for dead in outcome.dead:
        headers = dict(dead.headers)
        partition = int(headers["fairstream.source.partition"])
        offset = int(headers["fairstream.source.offset"])
        record_id = outcome.source[(partition, offset)]
        kind = outcome.poison[record_id]
        dead_kinds[record_id] = kind
        assert headers["fairstream.source.topic"] == dead.topic.removesuffix(".dlq").encode()
        assert headers["fairstream.error.type"] == b"DecodeError"
        assert headers["fairstream.attempts"] == b"0", "a record that cannot decode is not retried"
        message = headers["fairstream.error.message"]
        assert message.startswith((b"value is not valid JSON: ", b"value is not valid UTF-8: ")), (
            message
        )
        if kind == "invalid_utf8":
            assert b"'utf-8' codec can't decode byte 0xc3 in position 0" in message
        # The DLQ keeps the record as it was, so it can be inspected and replayed.
        assert dead.key == (b"" if kind == "empty" else record_id.encode())
        if kind == "large_invalid":
            assert len(dead.value) == 1_000_000
    expected_dead = {i: k for i, k in outcome.poison.items() if k != "large_valid"}
    assert dead_kinds == expected_dead
    assert set(expected_dead.values()) == {"invalid_utf8", "invalid_json", "large_invalid", "empty"}
    # The good records after each poison one were handled and committed: the
    # partitions kept flowing to their end.
    assert outcome.committed == outcome.ends


def test_invalid_utf8_that_looks_like_a_bom_is_reported_as_invalid_utf8() -> None:
    async def handle(record: Record[dict[str, object]]) -> None: ...

    decode = decoder_for(handle, batch=False, decoder=None)
    with pytest.raises(DecodeError) as caught:
        decode(b"\xff\xfe\xfdpoison-0000019")
    assert "utf-16" not in str(caught.value)
    assert "utf-8" in str(caught.value).lower()


async def test_poison_record_at_the_size_limit_is_dead_lettered_not_fatal(
    broker: Broker, group_id: str
) -> None:
    """1,048,400 bytes: the broker took it (noida's max.message.bytes is 1 MiB), so
    the consumer must get past it like any other poison record."""
    topic = f"big-{uuid.uuid4().hex[:10]}"
    await create_topic(broker.bootstrap, topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=2_000_000)
    await producer.start()
    try:
        for value in (b'{"n": 0}', b"[" + b"x" * 1_048_399, b'{"n": 2}'):
            await producer.send_and_wait(topic, value, key=b"k", partition=0)
    finally:
        await producer.stop()
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        instance_id=broker.instance_id("big-0"),
        consumer=QUICK_JOIN,
        scheduler=SchedulerConfig(commit_interval=0.1),
    )
    handled: list[int] = []
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, Any]]) -> None:
        handled.append(record.offset)
        if record.offset == 2:
            done.set()

    async with app:
        with anyio.fail_after(30):
            await done.wait()
    assert handled == [0, 2]
    with anyio.fail_after(30):
        (dead,) = await read_all(broker.bootstrap, f"{topic}.dlq", 1, expected=1)
    headers = dict(dead.headers)
    assert headers["fairstream.source.offset"] == b"1"
    assert headers["fairstream.error.type"] == b"DecodeError"
    assert await committed(broker.bootstrap, group_id, topic, 1) == [3]


def _headers_filling(size: int) -> list[tuple[str, bytes]]:
    """16 headers of ``size`` bytes in all (keys and values), as a tracing layer might add."""
    keys = [f"x-blob-{i:02d}" for i in range(16)]
    room = size - sum(len(k) for k in keys)
    return [(k, b"h" * (room // 16 + (i < room % 16))) for i, k in enumerate(keys)]


async def test_failing_record_with_over_a_megabyte_of_headers_is_dead_lettered_without_them(
    broker: Broker, group_id: str
) -> None:
    """The copy plus fairstream's headers is over the 1 MiB request limit even with
    its value dropped; the headers go instead, and the partition keeps flowing."""
    topic = f"big-headers-{uuid.uuid4().hex[:10]}"
    await create_topic(broker.bootstrap, topic, 1)
    headers = _headers_filling(1_048_000)
    assert sum(len(k) + len(v) for k, v in headers) == 1_048_000
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=2_000_000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b'{"n": 0}', key=b"k", partition=0)
        await producer.send_and_wait(topic, b'{"n": 1}', key=b"k", partition=0, headers=headers)
        await producer.send_and_wait(topic, b'{"n": 2}', key=b"k", partition=0)
    finally:
        await producer.stop()
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        instance_id=broker.instance_id("big-headers-0"),
        consumer=QUICK_JOIN,
        retry=RetryPolicy(attempts=2, backoff=0.01),
        scheduler=SchedulerConfig(commit_interval=0.1),
    )
    handled: list[int] = []
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, int]]) -> None:
        handled.append(record.offset)
        if record.offset == 1:
            raise RuntimeError("cannot handle n=1: " + "why " * 200)
        if record.offset == 2:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()
    assert handled == [0, 1, 1, 2]
    with anyio.fail_after(30):
        (dead,) = await read_all(broker.bootstrap, f"{topic}.dlq", 1, expected=1)
    dead_headers = dict(dead.headers)
    assert dead.value == b'{"n": 1}'  # only the headers had to go
    assert dead.key == b"k"
    assert not any(k.startswith("x-blob-") for k in dead_headers)
    assert dead_headers["fairstream.headers.dropped"] == str(1_048_000).encode()
    assert "fairstream.value.dropped" not in dead_headers
    assert dead_headers["fairstream.source.offset"] == b"1"
    assert dead_headers["fairstream.error.type"] == b"RuntimeError"
    assert dead_headers["fairstream.attempts"] == b"2"
    assert await committed(broker.bootstrap, group_id, topic, 1) == [3]
