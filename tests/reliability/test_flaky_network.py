"""A network that drops and stalls connections, between the app and a real broker.

tansu advertises the port of a :class:`~tests.reliability.fault_proxy.FaultProxy`
in front of it (noida cannot advertise another port), so every connection of every
client passes through the proxy, which resets, stalls and slows them on command.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from fairstream import App, DeadLetterPolicy, Record, SchedulerConfig
from fairstream.testing import EmbeddedBroker, free_port
from tests.conftest import EXTERNAL
from tests.kafka_helpers import create_topic
from tests.reliability.checker import Sink, check, make_ids, produce_ids, read_sightings, summary
from tests.reliability.fault_proxy import FaultProxy

pytestmark = [
    pytest.mark.broker,
    pytest.mark.reliability,
    pytest.mark.skipif(
        EXTERNAL is not None, reason="puts a proxy in front of a dedicated embedded broker"
    ),
]


@asynccontextmanager
async def _proxied_tansu() -> AsyncIterator[tuple[FaultProxy, str]]:
    """A tansu broker that advertises a fault proxy; yields the proxy and the bootstrap."""
    proxy_port = free_port()
    broker = EmbeddedBroker("tansu", advertised_port=proxy_port)
    await anyio.to_thread.run_sync(broker.start)
    try:
        proxy = FaultProxy(broker.port, proxy_port)
        async with anyio.create_task_group() as tasks:
            await tasks.start(proxy.serve)
            yield proxy, f"127.0.0.1:{proxy_port}"
            tasks.cancel_scope.cancel()
    finally:
        await anyio.to_thread.run_sync(broker.stop)


def _sink_app(bootstrap: str, topic: str, sink: Sink, delay: float = 0, **settings: Any) -> App:
    app = App(bootstrap=bootstrap, group_id=f"g-flaky-{uuid.uuid4().hex[:8]}", **settings)

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, Any]]) -> None:
        sink.write_record(record)
        await anyio.sleep(delay)

    return app


async def test_offsets_read_for_an_assignment_are_retried_when_connections_fail(
    tmp_path: Path,
) -> None:
    """The admin client's first three connections are closed by the network while the
    app reads its committed offsets on assignment (KIP-333's jump decision): the read
    is retried with backoff instead of stopping the app, and every record is handled."""
    async with _proxied_tansu() as (proxy, bootstrap):
        topic = f"flaky-{uuid.uuid4().hex[:10]}"
        await create_topic(bootstrap, topic, 3)
        ids = make_ids("assign", 300)
        await produce_ids(bootstrap, topic, ids, 3)
        proxy.refuse("fairstream-admin", 3)
        sink = Sink(tmp_path / "assign.sink", "assign")
        # No dead-letter topic to create: the admin client's first use is the assignment.
        app = _sink_app(bootstrap, topic, sink, dead_letter=DeadLetterPolicy(on_error="skip"))
        with capture_logs() as logs:
            async with app:
                await sink.wait_unique(len(ids), 60)
        sink.close()
    retries = [e for e in logs if e["event"] == "assignment_read_retry"]
    assert retries, "the proxy refused no read made for the assignment"
    assert retries[0]["partitions"] == [(topic, p) for p in range(3)]
    result = check("assignment reads", ids, [s.id for s in read_sightings(sink.path)], seconds=0)
    assert result.lost == 0, summary(result)


async def _faults(proxy: FaultProxy) -> None:
    """Latency, then resets and blackholes, a few seconds apart."""
    proxy.latency = 0.02
    await anyio.sleep(2)
    proxy.latency = 0
    proxy.reset()
    await anyio.sleep(1)
    await proxy.stall(3)
    proxy.reset()
    await anyio.sleep(1)
    await proxy.stall(2)
    proxy.reset()


async def test_no_record_is_lost_while_connections_are_reset_stalled_and_slowed(
    tmp_path: Path,
) -> None:
    """3,000 records handled through added latency, three resets of every connection
    and two blackholes (3 s and 2 s): none lost, and the app never stops."""
    async with _proxied_tansu() as (proxy, bootstrap):
        topic = f"flaky-{uuid.uuid4().hex[:10]}"
        await create_topic(bootstrap, topic, 3)
        ids = make_ids("flaky", 3_000)
        await produce_ids(bootstrap, topic, ids, 3)
        sink = Sink(tmp_path / "flaky.sink", "flaky")
        app = _sink_app(
            bootstrap, topic, sink, delay=0.003, scheduler=SchedulerConfig(commit_interval=0.2)
        )
        async with app:
            await sink.wait_unique(len(ids) // 10, 60)
            await _faults(proxy)
            await sink.wait_unique(len(ids), 120)
            stats = app.stats()
        sink.close()
    result = check("flaky network", ids, [s.id for s in read_sightings(sink.path)], seconds=0)
    print(summary(result), f"resets={proxy.resets} commit_failures={stats.commit_failures}")
    assert proxy.resets > 0, "no connection was open to reset"
    assert result.lost == 0, summary(result)
