"""Exactly-once vs at-least-once: a handler that publishes one output per input (#41).

Two phases per mode, on a 16-partition input topic:

- throughput: ``--records`` inputs are produced first, then the app starts; the rate is
  inputs over the time until the last output is visible to a ``read_committed`` reader;
- latency: with the backlog gone, inputs are produced at ``--rate`` a second for
  ``--seconds``; each carries its send time, and the end-to-end latency is the time
  until its output is visible to a ``read_committed`` reader (p50, p99).

    .venv/bin/python benchmarks/exactly_once.py            # --records 20000 --rate 500

Each mode runs twice: ``ordering="partition"`` with a handler that only publishes,
and ``ordering="key"`` (``concurrency=64``, inputs over 1,024 keys) with a handler
that awaits 5 ms of I/O first, where exactly-once commits through its barrier.

Under exactly-once an output becomes visible only when its partition's transaction
commits (every ``commit_interval``, 100 ms by default), so latency has that floor.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import time
import uuid
from typing import Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from benchmarks._common import add_bootstrap_option, cluster, create_topic
from fairstream import App, Record, logs

PARTITIONS = 16
KEYS = 1024
Mode = Literal["at_least_once", "exactly_once"]
Ordering = Literal["partition", "key"]
IO_DELAY = 0.005
"""Seconds the ``ordering="key"`` handler awaits before it publishes (its I/O)."""


async def _produce(bootstrap: str, topic: str, count: int, rate: float | None) -> None:
    """``count`` inputs whose values are their send times; paced at ``rate`` if given."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        started = time.monotonic()
        for n in range(count):
            if rate is not None:
                await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))
            value = struct.pack(">d", time.time())
            await producer.send(topic, value, key=b"k%d" % (n % KEYS), partition=n % PARTITIONS)
        await producer.flush()
    finally:
        await producer.stop()


async def _watch(bootstrap: str, topic: str, seen: list[tuple[float, float]]) -> None:
    """Append (sent, visible) for every output a read_committed reader gets."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        group_id=f"watch-{uuid.uuid4().hex[:8]}",
    )
    await consumer.start()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batches.values():
                seen += [(struct.unpack(">d", r.value)[0], now) for r in records if r.value]
    finally:
        await consumer.stop()


async def _wait_for(seen: list[tuple[float, float]], count: int) -> None:
    while len(seen) < count:  # noqa: ASYNC110 - counted outputs: no event to wait on
        await asyncio.sleep(0.02)


async def run(
    bootstrap: str, mode: Mode, ordering: Ordering, records: int, rate: float, seconds: float
) -> str:
    run_id = uuid.uuid4().hex[:8]
    source, sink = f"bench-in-{run_id}", f"bench-out-{run_id}"
    await create_topic(bootstrap, source, PARTITIONS)
    await create_topic(bootstrap, sink, PARTITIONS)
    await _produce(bootstrap, source, records, None)
    app = App(group_id=f"bench-{run_id}", bootstrap=bootstrap, processing=mode)

    delay = IO_DELAY if ordering == "key" else 0.0

    @app.subscriber(source, ordering=ordering, concurrency=64)
    async def transform(record: Record[bytes]) -> None:
        if delay:
            await asyncio.sleep(delay)
        await app.publish(sink, record.value)

    seen: list[tuple[float, float]] = []
    watcher = asyncio.create_task(_watch(bootstrap, sink, seen))
    try:
        started = time.monotonic()
        async with app:
            await _wait_for(seen, records)
            elapsed = time.monotonic() - started
            paced = int(rate * seconds)
            seen.clear()
            await _produce(bootstrap, source, paced, rate)
            await _wait_for(seen, paced)
    finally:
        watcher.cancel()
    latencies = sorted(visible - sent for sent, visible in seen)
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    handler = "key, 5 ms I/O" if ordering == "key" else "partition, publish only"
    return f"| {mode} | {handler} | {records / elapsed:,.0f} | {p50:.0f} | {p99:.0f} |"


async def main_async(args: argparse.Namespace) -> None:
    with cluster(args.bootstrap) as bootstrap:
        print("| processing | ordering, handler | inputs/s (backlog) | e2e p50 ms | e2e p99 ms |")
        print("|---|---|---:|---:|---:|")
        for ordering in ("partition", "key"):
            for mode in ("at_least_once", "exactly_once"):
                row = await run(bootstrap, mode, ordering, args.records, args.rate, args.seconds)
                print(row, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_bootstrap_option(parser)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    logs.configure("console", "WARNING")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
