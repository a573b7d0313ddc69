"""A dead letter that waits on the network is never silent, and never given up
(issue #38, defect 5): tansu behind a fault proxy that blackholes every connection
while the dead letter is on its way."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from fairstream import App, Record, RetryPolicy, SchedulerConfig
from fairstream.runtime.flow._handling import DEAD_LETTER_SLOW
from tests.conftest import EXTERNAL
from tests.reliability.flaky import proxied_tansu
from tests.support.kafka_helpers import committed, create_topic, produce, read_all

pytestmark = [
    pytest.mark.broker,
    pytest.mark.reliability,
    pytest.mark.skipif(
        EXTERNAL is not None, reason="puts a proxy in front of a dedicated embedded broker"
    ),
]

STALL = DEAD_LETTER_SLOW + 3
"""Seconds the network is a blackhole: past the warning, within the send's timeout."""


async def test_a_dead_letter_that_waits_warns_then_arrives_and_is_committed() -> None:
    async with proxied_tansu() as (proxy, bootstrap):
        topic = f"dlq-wait-{uuid.uuid4().hex[:10]}"
        await create_topic(bootstrap, topic, 1)
        await produce(bootstrap, topic, [(0, b"poison")])
        group_id = f"g-dlq-wait-{uuid.uuid4().hex[:8]}"
        app = App(
            bootstrap=bootstrap,
            group_id=group_id,
            retry=RetryPolicy(attempts=1),
            scheduler=SchedulerConfig(commit_interval=0.2),
        )
        dead_lettered: list[dict[str, Any]] = []

        async with anyio.create_task_group() as tasks:
            blackholed = anyio.Event()

            async def blackhole() -> None:
                blackholed.set()
                await proxy.stall(STALL)  # stops the bytes before it first awaits

            @app.subscriber(topic)
            async def handle(record: Record[bytes]) -> None:
                tasks.start_soon(blackhole)
                await blackholed.wait()
                raise RuntimeError("poison")

            with capture_logs() as logs:
                async with app:
                    with anyio.fail_after(60):
                        while not dead_lettered:
                            await anyio.sleep(0.1)
                            dead_lettered = [
                                e for e in logs if e["event"] == "record_dead_lettered"
                            ]
                    with anyio.fail_after(30):
                        while True:
                            if await committed(bootstrap, group_id, topic, 1) == [1]:
                                break
                            await anyio.sleep(0.2)

        (dead,) = await read_all(bootstrap, f"{topic}.dlq", 1, expected=1)
    assert dead.value == b"poison"  # type: ignore[attr-defined]
    slow = [e for e in logs if e["event"] == "dead_letter_slow"]
    assert slow, "the dead letter waited for the blackhole without a word"
    assert slow[0]["log_level"] == "warning"
    assert (slow[0]["topic"], slow[0]["partition"], slow[0]["offset"]) == (topic, 0, 0)
    assert slow[0]["dead_letter_topic"] == f"{topic}.dlq"
    assert slow[0]["waited_s"] >= DEAD_LETTER_SLOW
    # The warning came while the dead letter waited, before it was acknowledged.
    assert logs.index(slow[0]) < logs.index(dead_lettered[0])
