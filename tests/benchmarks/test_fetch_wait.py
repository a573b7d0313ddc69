"""``throughput.py --kafka-fetch-wait``: noida's empty fetch answers held as Kafka holds them.

The benchmark's figures at thousands of partitions quote this emulation beside the plain
broker (``benchmarks/notes/per_record_cost.md``, "The tail of a drain"), so it must do
what it says against the pinned aiokafka: hold an answer that brought no record for
``fetch_max_wait_ms``, pass records through, and leave aiokafka as it was afterwards.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.fetcher import Fetcher

from benchmarks._fetch_wait import held_empty_fetches
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.broker

WAIT_MS = 300
SPAN = 1.5
"""Seconds a consumer at the log end is watched."""


async def _answers_at_log_end(bootstrap: str, topic: str) -> int:
    """Read the topic's two records, then count fetch answers over ``SPAN`` at its end."""
    answered: list[float] = []
    inner = Fetcher._proc_fetch_request

    async def counted(self: Any, *args: Any) -> Any:
        try:
            return await inner(self, *args)
        finally:
            answered.append(anyio.current_time())

    Fetcher._proc_fetch_request = counted  # type: ignore[method-assign]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=WAIT_MS
    )
    try:
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(2)])
            got = 0
            with anyio.fail_after(30):
                while got < 2:
                    got += sum(map(len, (await consumer.getmany(timeout_ms=1_000)).values()))
            start = anyio.current_time()
            await anyio.sleep(SPAN)
            return sum(1 for at in answered if at > start)
        finally:
            await consumer.stop()
    finally:
        Fetcher._proc_fetch_request = inner  # type: ignore[method-assign]


async def test_an_empty_fetch_is_held_for_fetch_max_wait(noida: Broker) -> None:
    original = Fetcher._proc_fetch_request
    topic = f"wait-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 2)
    await produce(noida.bootstrap, topic, [(0, b"a"), (1, b"b")])
    with held_empty_fetches():
        with_hold = await _answers_at_log_end(noida.bootstrap, topic)
    assert Fetcher._proc_fetch_request is original  # aiokafka as it was
    without = await _answers_at_log_end(noida.bootstrap, topic)
    # Held: one answer per fetch_max_wait_ms at most (a slow machine only lowers it).
    assert with_hold <= SPAN / (WAIT_MS / 1_000) + 1, with_hold
    # Without it noida answers at once, as its row of docs/testing.md says; were that
    # fixed, the benchmark would no longer need the option.
    assert without > 4 * (SPAN / (WAIT_MS / 1_000) + 1), without
