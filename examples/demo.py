"""``make demo``: a skewed backlog drains while live partitions stay fresh.

Starts an embedded broker (or uses FAIRSTREAM_BOOTSTRAP), writes a 200k-record
backlog into partition 0, keeps a steady live stream flowing into partitions
1-7, and runs a fairstream App with the lag assignor and fair batching. A live
table shows each partition's progress and the latency of live records; the
summary at the end says how long the backlog took and how fresh live data stayed.

    python examples/demo.py [--backlog 200000] [--rate 300]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
import uuid
from collections import defaultdict
from contextlib import ExitStack

import anyio
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from rich.console import Console
from rich.live import Live
from rich.table import Table

from fairstream import App, Record, SchedulerConfig, logs
from fairstream.testing import EmbeddedBroker

PARTITIONS = 8
console = Console(stderr=True)


class Progress:
    """What the handler saw: counts per partition, and live-record latencies."""

    def __init__(self, backlog: int) -> None:
        self.backlog = backlog
        self.handled: dict[int, int] = defaultdict(int)
        self.produced: dict[int, int] = defaultdict(int)
        self.live_latency_ms: list[float] = []
        self.started = time.monotonic()
        self.backlog_done_at: float | None = None
        self.fetching = anyio.Event()

    def seen(self, record: Record[bytes]) -> None:
        self.fetching.set()
        self.handled[record.partition] += 1
        if record.partition == 0:
            if self.handled[0] == self.backlog:
                self.backlog_done_at = time.monotonic()
        else:
            self.live_latency_ms.append(time.time() * 1000 - record.timestamp)

    def p99(self) -> float:
        recent = self.live_latency_ms[-2000:]
        return statistics.quantiles(recent, n=100)[98] if len(recent) >= 100 else 0.0

    def table(self, app: App) -> Table:
        table = Table(title="fairstream demo: partition 0 holds the backlog, 1-7 are live")
        for column in ("partition", "handled", "produced", "lag", "queue", "paused"):
            table.add_column(column, justify="right")
        lag = {p.partition: p for p in app.stats().partitions}
        for partition in range(PARTITIONS):
            stats = lag.get(partition)
            table.add_row(
                str(partition),
                f"{self.handled[partition]:,}",
                f"{self.produced[partition]:,}",
                f"{stats.lag:,}" if stats and stats.lag is not None else "-",
                f"{stats.queue_depth:,}" if stats else "-",
                "yes" if stats and stats.paused else "",
            )
        table.caption = (
            f"live latency p99 {self.p99():.0f} ms over the last 2000 live records; "
            f"elapsed {time.monotonic() - self.started:.1f} s"
        )
        return table


async def create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()


async def write_backlog(producer: AIOKafkaProducer, topic: str, progress: Progress) -> None:
    payload = b"b" * 100
    for start in range(0, progress.backlog, 10_000):
        batch = [
            await producer.send(topic, payload, partition=0)
            for _ in range(min(10_000, progress.backlog - start))
        ]
        await batch[-1]
        progress.produced[0] += len(batch)


async def live_stream(
    producer: AIOKafkaProducer, topic: str, rate: int, progress: Progress
) -> None:
    """``rate`` records/s into each live partition until cancelled."""
    while True:
        for partition in range(1, PARTITIONS):
            await producer.send(topic, b"live", partition=partition)
            progress.produced[partition] += 1
        await anyio.sleep(1 / rate)


async def main(bootstrap: str, backlog: int, rate: int) -> None:
    topic = f"demo-{uuid.uuid4().hex[:6]}"
    await create_topic(bootstrap, topic)
    progress = Progress(backlog)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    app = App(
        bootstrap=bootstrap,
        group_id=f"demo-{uuid.uuid4().hex[:6]}",
        assignor="lag",
        scheduler=SchedulerConfig(partition_quota=200, max_batch=1_000),
    )

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        hashlib.blake2b(record.value * 20).digest()  # a little CPU work per record
        progress.seen(record)

    try:
        console.print(f"writing a backlog of {backlog:,} records into partition 0 ...")
        await write_backlog(producer, topic, progress)
        async with app, anyio.create_task_group() as tasks:
            # Live latency is measured from the first fetch on: joining the group
            # and the first offset lookup are start-up, not fairness.
            with anyio.fail_after(60):
                await progress.fetching.wait()
            tasks.start_soon(live_stream, producer, topic, rate, progress)
            with Live(progress.table(app), console=console, refresh_per_second=4) as live:
                while progress.backlog_done_at is None:
                    await anyio.sleep(0.25)
                    live.update(progress.table(app))
                await anyio.sleep(1)  # one more second of live traffic after the drain
                live.update(progress.table(app))
            tasks.cancel_scope.cancel()
    finally:
        await producer.stop()

    drained = progress.backlog_done_at - progress.started if progress.backlog_done_at else 0
    latencies = progress.live_latency_ms
    console.print()
    console.print(
        f"[bold]summary[/]: backlog of {backlog:,} drained in {drained:.1f} s "
        f"({backlog / max(drained, 1e-9):,.0f} records/s) while "
        f"{sum(progress.handled[p] for p in range(1, PARTITIONS)):,} live records were "
        f"handled; live latency p50 {statistics.median(latencies):.0f} ms, "
        f"p99 {statistics.quantiles(latencies, n=100)[98]:.0f} ms"
    )


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backlog", type=int, default=200_000, help="records in partition 0 (default 200000)"
    )
    parser.add_argument(
        "--rate",
        type=int,
        default=300,
        help="live records per second into each of partitions 1-7 (default 300)",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("FAIRSTREAM_BOOTSTRAP"),
        help="use this Kafka instead of an embedded broker (default: $FAIRSTREAM_BOOTSTRAP)",
    )
    args = parser.parse_args()
    logs.configure("console", "WARNING")
    with ExitStack() as stack:
        bootstrap = args.bootstrap
        if not bootstrap:
            broker = stack.enter_context(EmbeddedBroker("noida"))
            console.print(f"embedded noida broker at {broker.bootstrap}")
            bootstrap = broker.bootstrap
        anyio.run(main, bootstrap, args.backlog, args.rate)
    console.print("broker stopped, demo done")


if __name__ == "__main__":
    cli()
