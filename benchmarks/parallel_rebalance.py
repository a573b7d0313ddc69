"""Parallel rebalance (KIP-333): a member joins onto a deep backlog while live records flow.

Once with ``parallel_rebalance`` off and once on, in the same run: fills a fresh
topic with ``--records`` backlog records (default 1M, ``--value-bytes`` each, over
``--partitions``), then starts a producer thread writing live records at
``--live-rate`` per second and an App (a fresh group, from the log start) with a
no-op handler, and measures, from the App's start:

- ``join``: until the App holds its partitions;
- ``first live``: until the first live record (produced after the start) is handled;
- ``live p50 / p99``: end-to-end latency (produced -> handled) of the live records
  produced between the join and the end of the backlog (with it off they wait behind
  the backlog; the run goes on until each partition handled a later live record);
- ``backlog done``: until every record that was in the topic at the start is handled.

Against the embedded noida broker (it keeps commit metadata) unless ``--bootstrap``
or ``FAIRSTREAM_BOOTSTRAP`` names a cluster::

    python benchmarks/parallel_rebalance.py --records 1000000 --live-rate 500
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field

import anyio
from _common import add_bootstrap_option, cluster
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from fairstream import App, ParallelRebalance, Record, SchedulerConfig, logs

LIVE = ord("L")


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    mode: str
    join: float
    first_live: float
    live_p50_ms: float
    live_p99_ms: float
    live_samples: int
    backlog_done: float
    backlog: int


@dataclass(slots=True)
class Progress:
    """What the handler saw; filled per record, so kept to a few operations."""

    started: float
    backlog_end: dict[int, int]
    seen: dict[int, bytearray]
    remaining: int
    ready_at: float = float("inf")
    done_at: float = float("inf")
    first_live: float | None = None
    live: list[tuple[float, float]] = field(default_factory=list)
    caught_up: set[int] = field(default_factory=set)
    finished: anyio.Event = field(default_factory=anyio.Event)

    def handle(self, record: Record[bytes]) -> None:
        now = time.time()
        value = record.value
        if record.offset < self.backlog_end[record.partition]:
            marks = self.seen[record.partition]
            if not marks[record.offset]:
                marks[record.offset] = 1
                self.remaining -= 1
                if not self.remaining:
                    self.done_at = now
        elif value and value[0] == LIVE:
            produced = float(value[1:18])
            if self.first_live is None:
                self.first_live = now - self.started
            self.live.append((produced, now - produced))
            if produced > self.done_at:
                self.caught_up.add(record.partition)
                if len(self.caught_up) == len(self.backlog_end):
                    self.finished.set()

    def catch_up_latencies(self) -> list[float]:
        """Latencies of live records produced after the join, before the backlog was done."""
        return sorted(lat for at, lat in self.live if self.ready_at <= at <= self.done_at)


def producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )


def fill(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)
    out = producer(bootstrap)
    value = b"B" * value_bytes
    began = time.perf_counter()
    for i in range(records):
        while True:
            try:
                out.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                out.poll(0.05)
        out.poll(0)
    if out.flush(120):
        raise SystemExit("the backlog could not be written within 120 s")
    return time.perf_counter() - began


def live_stream(
    bootstrap: str, topic: str, partitions: int, rate: int, value_bytes: int, stop: threading.Event
) -> None:
    """Produce ``rate`` records/s, each carrying its send time, until ``stop``."""
    out = producer(bootstrap) if rate else None
    began = time.time()
    sent = 0
    while out is not None and not stop.is_set():
        due = began + sent / rate
        if time.time() < due:
            time.sleep(min(due - time.time(), 0.01))
            continue
        value = f"L{time.time():17.6f}".encode().ljust(value_bytes, b" ")
        out.produce(topic, value, partition=sent % partitions)
        out.poll(0)
        sent += 1
    if out is not None:
        out.flush(30)


async def measure(args: argparse.Namespace, bootstrap: str, topic: str, on: bool) -> Row:
    # fill() wrote record i to partition i % partitions.
    ends = {p: len(range(p, args.records, args.partitions)) for p in range(args.partitions)}
    app = App(
        bootstrap=bootstrap,
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        parallel_rebalance=ParallelRebalance(threshold=args.threshold) if on else False,
        scheduler=SchedulerConfig(concurrency=args.concurrency),
    )
    progress = Progress(
        started=time.time(),
        backlog_end=ends,
        seen={p: bytearray(end) for p, end in ends.items()},
        remaining=sum(ends.values()),
    )

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        progress.handle(record)

    stop = threading.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(
            anyio.to_thread.run_sync,
            live_stream,
            bootstrap,
            topic,
            args.partitions,
            args.live_rate,
            args.value_bytes,
            stop,
        )
        progress.started = time.time()
        try:
            async with app:
                with anyio.fail_after(args.timeout):
                    await app.wait_ready()
                    progress.ready_at = time.time()
                    await progress.finished.wait()
        finally:
            stop.set()
    latencies = progress.catch_up_latencies() or [float("nan")]
    return Row(
        mode="on" if on else "off",
        join=progress.ready_at - progress.started,
        first_live=progress.first_live if progress.first_live is not None else float("nan"),
        live_p50_ms=statistics.median(latencies) * 1000,
        live_p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        live_samples=len(progress.catch_up_latencies()),
        backlog_done=progress.done_at - progress.started,
        backlog=sum(ends.values()),
    )


def report(rows: list[Row]) -> str:
    lines = [
        "| parallel_rebalance | join | first live record | live p50 | live p99 "
        "(during catch-up, n) | backlog done | backlog records/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.mode} | {r.join:.2f} s | {r.first_live:.2f} s | {r.live_p50_ms:,.0f} ms | "
            f"{r.live_p99_ms:,.0f} ms ({r.live_samples:,}) | {r.backlog_done:.1f} s | "
            f"{r.backlog / r.backlog_done:,.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="backlog records")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions")
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes per value")
    parser.add_argument(
        "--live-rate", type=int, default=500, help="live records per second while measuring"
    )
    parser.add_argument(
        "--threshold", type=int, default=10_000, help="ParallelRebalance.threshold (records)"
    )
    parser.add_argument("--concurrency", type=int, default=2, help="SchedulerConfig.concurrency")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds one mode may take before it fails"
    )
    add_bootstrap_option(parser)
    args = parser.parse_args()
    logs.configure("console", os.environ.get("BENCH_LOG", "WARNING"))
    rows = []
    with cluster(args.bootstrap) as bootstrap:
        for on in (False, True):
            topic = f"pr-bench-{uuid.uuid4().hex[:8]}"
            seconds = fill(bootstrap, topic, args.partitions, args.records, args.value_bytes)
            print(f"backlog: {args.records:,} records in {seconds:.1f} s", flush=True)
            rows.append(anyio.run(measure, args, bootstrap, topic, on))
    print(report(rows))


if __name__ == "__main__":
    main()
