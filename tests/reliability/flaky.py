"""The flaky-network scenario: records consumed through a fault proxy in front of tansu.

tansu advertises the proxy's port (noida cannot advertise another one), so every
connection of every client passes through the :class:`FaultProxy`, which adds
latency, resets every connection and blackholes them on a schedule while the app
consumes. The quick suite runs it with a few thousand records, ``benchmarks/soak.py``
with more.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from fairstream import App, Record, SchedulerConfig
from fairstream.testing import EmbeddedBroker, free_port
from tests.reliability.checker import Result, Sink, check, make_ids, produce_ids, read_sightings
from tests.reliability.fault_proxy import FaultProxy
from tests.support.kafka_helpers import create_topic

__all__ = ["Flaky", "flaky_network", "proxied_tansu", "sink_app"]


@asynccontextmanager
async def proxied_tansu() -> AsyncIterator[tuple[FaultProxy, str]]:
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


def sink_app(bootstrap: str, topic: str, sink: Sink, delay: float = 0, **settings: Any) -> App:
    """An app of a fresh group writing each record to ``sink``, ``delay`` s a record."""
    app = App(bootstrap=bootstrap, group_id=f"g-flaky-{uuid.uuid4().hex[:8]}", **settings)

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, Any]]) -> None:
        sink.write_record(record)
        await anyio.sleep(delay)

    return app


async def _faults(proxy: FaultProxy, rounds: int) -> None:
    """Per round: 20 ms latency for 2 s, then a reset, a 3 s blackhole, a reset, a 2 s
    blackhole and a reset, a second apart."""
    for _ in range(rounds):
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Flaky:
    result: Result
    resets: int
    commit_failures: int


async def flaky_network(
    *, records: int, partitions: int, workdir: Path, rounds: int = 1, wait_limit: float = 120
) -> Flaky:
    """The faults start once a tenth of the records were handled, and repeat ``rounds``
    times; the handler takes 3 ms a record, so they land while it consumes."""
    started = time.monotonic()
    async with proxied_tansu() as (proxy, bootstrap):
        topic = f"flaky-{uuid.uuid4().hex[:10]}"
        await create_topic(bootstrap, topic, partitions)
        ids = make_ids("flaky", records)
        await produce_ids(bootstrap, topic, ids, partitions)
        sink = Sink(workdir / f"{topic}.sink", "flaky")
        app = sink_app(
            bootstrap, topic, sink, delay=0.003, scheduler=SchedulerConfig(commit_interval=0.2)
        )
        async with app:
            await sink.wait_unique(records // 10, wait_limit)
            await _faults(proxy, rounds)
            await sink.wait_unique(records, wait_limit)
            commit_failures = app.stats().commit_failures
        sink.close()
    seen = [s.id for s in read_sightings(sink.path)]
    label = f"flaky network x{rounds}"
    result = check(label, ids, seen, seconds=time.monotonic() - started)
    return Flaky(result=result, resets=proxy.resets, commit_failures=commit_failures)
