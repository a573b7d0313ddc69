"""Fairness: live partitions' latency while one partition's backlog drains, one run.

One topic of ``1 + --live-partitions`` partitions. Partition 0 is filled with a
``--backlog`` of records before anything consumes; while a consumer drains it, a
separate producer process sends ``--rate`` records/s spread evenly over the live
partitions, each value starting with its send time (``time.time_ns()``). The same
handler runs for every way: it busy-waits ``--work-us`` microseconds (CPU work
that never yields, like parsing or a computation) and notes when it saw each
record. Ways, each with a fresh group id whose live partitions start at their
end offset (so every way sees the whole backlog and only fresh live records):

- ``raw aiokafka``: a ``getmany`` loop awaiting the handler per record and
  committing after every batch - what a user writes by hand;
- ``fairstream``: ``@app.subscriber(topic)`` with ``record: Record[bytes]`` and
  the default ``SchedulerConfig`` (``partition_quota=100``, ``max_batch=1000``).

Backlog records/s are given two ways: over the drain (first to last backlog record
handled), and from the consumer's start to the last backlog record. The first
leaves out what a way does before its first record; the raw loop does a lot
there: its first ``getmany`` fetches and decodes the whole backlog (1M
``ConsumerRecord`` objects, a second or more) before it handles one, while
fairstream decodes a pull at a time, inside the drain. Both ways do the same work
from their start (join, fetch, decode, handle), so the second compares like with
like. Beside it, the CPU time this process spent per backlog record over the same
span (the consumer runs here; the broker and the live producer do not): a
neighbour on a shared machine steals wall time but little CPU time, so this
compares two versions of fairstream where the rates are too noisy to.

Reported over the drain (first to last backlog record handled):

- end-to-end latency of live records produced during the drain (send -> handled),
  p50 / p99 / max;
- Jain's fairness index ``(sum x)^2 / (n * sum x^2)`` of per-partition throughput,
  each partition's throughput divided by its max-min fair share, per ``--window``
  and averaged over the windows. A window's capacity is what the consumer handled
  in it; a live partition's demand is the records it had waiting at some point in
  the window (sent before its end, handled after its start), the backlog's demand
  is unbounded, and water-filling gives each partition ``min(demand, level)``. So
  1.0 means every live record waiting was served within the window while the
  backlog took the rest; a live partition left waiting behind the backlog lowers it.

A record handled twice (a rejoin after a lost session) is counted as redelivered
and only its first handling is measured. Ways run interleaved, ``--repeat``
times; the table shows min / median / max over the runs.

The embedded noida broker answers a fetch with everything up to the log end, so
the raw loop's first ``getmany`` returns the whole backlog and it serves no live
record until the backlog is done. A real broker caps a fetch at
``max_partition_fetch_bytes`` (1 MiB, some 6-7k records of 100 B), so there the
raw loop gets back to the live partitions between chunks and its latency should
be far lower than on noida: measure on a real cluster (``--bootstrap``) before
reading the ratio as Kafka's. Against an embedded noida broker unless
``--bootstrap`` or ``FAIRSTREAM_BOOTSTRAP`` names a cluster::

    python benchmarks/fairness.py --backlog 1000000 --rate 1000 --work-us 10 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import statistics
import struct
import time
import uuid
from array import array
from bisect import bisect_left
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Protocol

from _common import (
    add_bootstrap_option,
    add_scheduler_option,
    cluster,
    create_topic,
    raw_aiokafka_loop,
    scheduler_fields,
)
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata

from fairstream import App, Record, SchedulerConfig, logs

BACKLOG = 0  # the backlog partition; partitions 1..n are live
STAMP = struct.Struct(">q")


class Keyed(Protocol):
    """What the handler reads of a record: aiokafka's and fairstream's both have it."""

    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def value(self) -> bytes | None: ...


@dataclass(slots=True)
class Probe:
    """The shared handler: burns ``work_ns`` of CPU and notes when it saw each record.

    Each partition is handled in offset order, so a record below the highest offset
    seen so far is a redelivery (after a rejoin): counted in ``duplicates`` and
    otherwise ignored, so every time kept is a record's first handling.
    """

    backlog: int
    work_ns: int
    started: int = 0
    cpu_started: int = 0
    """This process's CPU time (ns) when the consumer started."""
    cpu_drained: int = 0
    """The same at the last backlog record."""
    backlog_seen: array[int] = field(default_factory=lambda: array("q"))
    live_partition: array[int] = field(default_factory=lambda: array("q"))
    live_sent: array[int] = field(default_factory=lambda: array("q"))
    live_seen: array[int] = field(default_factory=lambda: array("q"))
    next_offset: dict[int, int] = field(default_factory=dict)
    duplicates: int = 0
    live_expected: int = -1
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def expect_live(self, count: int) -> None:
        """The producer stopped after ``count`` live records: set ``caught_up`` at that."""
        self.live_expected = count
        if len(self.live_seen) >= count:
            self.caught_up.set()

    async def handle(self, record: Keyed) -> None:
        now = time.time_ns()
        deadline = time.perf_counter_ns() + self.work_ns
        while time.perf_counter_ns() < deadline:
            pass
        partition = record.partition
        if record.offset < self.next_offset.get(partition, 0):
            self.duplicates += 1
            return
        self.next_offset[partition] = record.offset + 1
        if partition == BACKLOG:
            self.backlog_seen.append(now)
            if len(self.backlog_seen) == self.backlog:
                self.cpu_drained = time.process_time_ns()
                self.drained.set()
        else:
            self.live_partition.append(partition)
            self.live_sent.append(STAMP.unpack_from(record.value or bytes(8))[0])
            self.live_seen.append(now)
            if len(self.live_seen) == self.live_expected:
                self.caught_up.set()


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    bootstrap: str
    topic: str
    group_id: str
    probe: Probe
    scheduler: dict[str, float]
    """``SchedulerConfig`` fields of the fairstream way (``--scheduler``)."""


# --- the ways ------------------------------------------------------------------------


async def raw_aiokafka(run: Run) -> None:
    probe = run.probe

    async def handle(record: ConsumerRecord[bytes, bytes]) -> None:
        await probe.handle(record)

    await raw_aiokafka_loop(
        bootstrap=run.bootstrap,
        topic=run.topic,
        group_id=run.group_id,
        handle=handle,
        until=probe.finished,
    )


async def fairstream_records(run: Run) -> None:
    probe = run.probe
    app = App(
        bootstrap=run.bootstrap,
        group_id=run.group_id,
        assignor="fair",
        scheduler=SchedulerConfig(**run.scheduler),
    )

    @app.subscriber(run.topic)
    async def handle(record: Record[bytes]) -> None:
        await probe.handle(record)

    async with app:
        await probe.finished.wait()


WAYS: dict[str, tuple[str, Callable[[Run], Coroutine[None, None, None]]]] = {
    "raw": ("raw aiokafka", raw_aiokafka),
    "fairstream": ("fairstream", fairstream_records),
}


# --- the data ------------------------------------------------------------------------


async def produce_backlog(
    bootstrap: str, topic: str, partitions: int, backlog: int, value_bytes: int
) -> None:
    """Create the topic and fill the backlog partition in whole batches."""
    await create_topic(bootstrap, topic, partitions)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, max_batch_size=1 << 20, max_request_size=4 << 20
    )
    await producer.start()
    value, left, sent = b"x" * value_bytes, backlog, []
    try:
        while left:
            batch = producer.create_batch()
            while left and batch.append(key=None, value=value, timestamp=None) is not None:
                left -= 1
            batch.close()
            sent.append(await producer.send_batch(batch, topic, partition=BACKLOG))
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def start_live_at_end(bootstrap: str, topic: str, group_id: str, partitions: int) -> None:
    """Commit offset 0 for the backlog and the end offset of each live partition."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        ends[TopicPartition(topic, BACKLOG)] = 0
        await consumer.commit({tp: OffsetAndMetadata(end, "") for tp, end in ends.items()})
    finally:
        await consumer.stop()


def feed_live(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    rate: float,
    value_bytes: int,
    ready: Event,
    stop: Event,
    report: Connection,
) -> None:
    """Producer process: stamped records at ``rate``/s until ``stop``; sends back counts."""
    report.send(asyncio.run(_feed(bootstrap, topic, partitions, rate, value_bytes, ready, stop)))


async def _feed(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    rate: float,
    value_bytes: int,
    ready: Event,
    stop: Event,
) -> dict[int, int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    pad = b"x" * max(0, value_bytes - STAMP.size)
    sent: dict[int, int] = dict.fromkeys(partitions, 0)
    acks = []
    try:
        ready.set()
        began, total = time.monotonic(), 0
        while not stop.is_set():
            due = int((time.monotonic() - began) * rate)
            while total < due:
                partition = partitions[total % len(partitions)]
                value = STAMP.pack(time.time_ns()) + pad
                acks.append(await producer.send(topic, value, partition=partition))
                sent[partition] += 1
                total += 1
            await asyncio.sleep(0.001)
        await asyncio.gather(*acks)
    finally:
        await producer.stop()
    return sent


# --- the metrics ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    way: str
    drain_s: float
    backlog_rate: float
    cold_rate: float
    live: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    jain: float
    duplicates: int
    cpu_us: float
    """This process's CPU time per backlog record from the consumer's start."""


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fair_shares(capacity: int, live_demands: Sequence[int]) -> tuple[list[float], float]:
    """Max-min fair shares of ``capacity``: the live partitions' and the backlog's.

    Water-filling, smallest demand first; the backlog's demand is unbounded, so it
    always claims a share and takes what the live partitions leave.
    """
    order = sorted(range(len(live_demands)), key=live_demands.__getitem__)
    shares = [0.0] * len(live_demands)
    left = float(capacity)
    for k, i in enumerate(order):
        level = left / (len(order) - k + 1)
        if live_demands[i] >= level:
            for j in order[k:]:
                shares[j] = level
            return shares, level
        shares[i] = live_demands[i]
        left -= live_demands[i]
    return shares, left


def jain(values: Sequence[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def by_partition(partitions: Sequence[int], times: Sequence[int]) -> dict[int, list[int]]:
    grouped: dict[int, list[int]] = {}
    for partition, at in zip(partitions, times, strict=True):
        grouped.setdefault(partition, []).append(at)
    return {partition: sorted(ats) for partition, ats in grouped.items()}


def window_jain(probe: Probe, start: int, end: int, window_ns: int) -> float:
    """Mean Jain's index of fair-share-normalised throughput over the drain's windows.

    Windows in which nothing at all was handled (a stall) have no shares to compare
    and are left out.
    """
    sent = by_partition(probe.live_partition, probe.live_sent)
    seen = by_partition(probe.live_partition, probe.live_seen)
    live = sorted(sent)
    indices = []
    for a in range(start, end - window_ns + 1, window_ns):
        b = a + window_ns
        backlog = bisect_left(probe.backlog_seen, b) - bisect_left(probe.backlog_seen, a)
        served = [bisect_left(seen[p], b) - bisect_left(seen[p], a) for p in live]
        waiting = [bisect_left(sent[p], b) - bisect_left(seen[p], a) for p in live]
        capacity = backlog + sum(served)
        if not capacity:
            continue
        shares, backlog_share = fair_shares(capacity, waiting)
        ratios = [n / share for n, share in zip(served, shares, strict=True) if share > 0]
        indices.append(jain([*ratios, backlog / backlog_share]))
    return statistics.fmean(indices) if indices else float("nan")


def summarize(way: str, probe: Probe, window_s: float) -> Result:
    start, end = probe.backlog_seen[0], probe.backlog_seen[-1]
    latencies = [
        (seen - sent) / 1e6
        for sent, seen in zip(probe.live_sent, probe.live_seen, strict=True)
        if start <= sent <= end
    ]
    if not latencies:
        raise SystemExit(f"{way}: no live record was sent during the drain; raise --rate")
    drain_s = (end - start) / 1e9
    return Result(
        way=way,
        drain_s=drain_s,
        backlog_rate=probe.backlog / drain_s,
        cold_rate=probe.backlog * 1e9 / (end - probe.started),
        live=len(latencies),
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        max_ms=max(latencies),
        jain=window_jain(probe, start, end, int(window_s * 1e9)),
        duplicates=probe.duplicates,
        cpu_us=(probe.cpu_drained - probe.cpu_started) / 1e3 / probe.backlog,
    )


# --- running and reporting -----------------------------------------------------------


async def measure(args: argparse.Namespace, way: str, bootstrap: str, topic: str) -> Result:
    """One way, one fresh group: drain the backlog under live traffic, then catch up."""
    name, consume = WAYS[way]
    group_id = f"bench-{uuid.uuid4().hex[:8]}"
    partitions = 1 + args.live_partitions
    await start_live_at_end(bootstrap, topic, group_id, partitions)
    probe = Probe(backlog=args.backlog, work_ns=int(args.work_us * 1000))
    spawn = multiprocessing.get_context("spawn")
    ready, stop = spawn.Event(), spawn.Event()
    receiver, sender = spawn.Pipe(duplex=False)
    live = list(range(1, partitions))
    feeder = spawn.Process(
        target=feed_live,
        args=(bootstrap, topic, live, args.rate, args.value_bytes, ready, stop, sender),
        daemon=True,
    )
    feeder.start()
    try:
        if not await asyncio.to_thread(ready.wait, 60):
            raise SystemExit("the live producer did not start within 60 s")
        async with asyncio.timeout(args.timeout), asyncio.TaskGroup() as tasks:
            probe.started = time.time_ns()
            probe.cpu_started = time.process_time_ns()
            tasks.create_task(
                consume(
                    Run(
                        bootstrap=bootstrap,
                        topic=topic,
                        group_id=group_id,
                        probe=probe,
                        scheduler=args.scheduler,
                    )
                )
            )
            await probe.drained.wait()
            stop.set()
            sent: dict[int, int] = await asyncio.to_thread(receiver.recv)
            probe.expect_live(sum(sent.values()))
            await probe.caught_up.wait()
            probe.finished.set()
    finally:
        stop.set()
        await asyncio.to_thread(feeder.join, 30)
    if len(probe.live_seen) != sum(sent.values()):
        raise SystemExit(
            f"{name} handled {len(probe.live_seen):,} live records of {sum(sent.values()):,} sent"
        )
    return summarize(name, probe, args.window)


def spread(values: Sequence[float], fmt: str) -> str:
    ordered = sorted(values)
    return " / ".join(format(v, fmt) for v in (ordered[0], statistics.median(ordered), ordered[-1]))


def print_table(results: list[Result]) -> None:
    by_way: dict[str, list[Result]] = {}
    for result in results:
        by_way.setdefault(result.way, []).append(result)
    print(
        "\n| way | runs | live p50 ms | live p99 ms | live max ms | Jain's index "
        "| backlog records/s | from the start | CPU us/backlog record | live records/run "
        "| redelivered |"
        "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for way, group in by_way.items():
        print(
            f"| {way} | {len(group)} | {spread([r.p50_ms for r in group], '.1f')} "
            f"| {spread([r.p99_ms for r in group], '.1f')} "
            f"| {spread([r.max_ms for r in group], '.1f')} "
            f"| {spread([r.jain for r in group], '.3f')} "
            f"| {spread([r.backlog_rate for r in group], ',.0f')} "
            f"| {spread([r.cold_rate for r in group], ',.0f')} "
            f"| {spread([r.cpu_us for r in group], '.2f')} "
            f"| {statistics.median(r.live for r in group):,.0f} "
            f"| {sum(r.duplicates for r in group):,} |"
        )
    print("\n(cells: min / median / max over the runs)")
    raw, fair = by_way.get(WAYS["raw"][0]), by_way.get(WAYS["fairstream"][0])
    if raw and fair:
        # Every repeat runs every way, so the i-th runs of two ways were taken together.
        paired = [f.p99_ms / r.p99_ms for r, f in zip(raw, fair, strict=True)]
        print(
            "fairstream live p99 / raw aiokafka live p99, paired per repeat "
            f"(min / median / max): {spread(paired, '.3f')} (goal <= 0.1)"
        )
        drains = [f.backlog_rate / r.backlog_rate for r, f in zip(raw, fair, strict=True)]
        colds = [f.cold_rate / r.cold_rate for r, f in zip(raw, fair, strict=True)]
        print(
            "fairstream backlog records/s / raw aiokafka's, paired per repeat "
            f"(min / median / max): from the first backlog record {spread(drains, '.2f')}, "
            f"from the consumer's start {spread(colds, '.2f')} (goal >= 0.95)"
        )
        cpus = [f.cpu_us / r.cpu_us for r, f in zip(raw, fair, strict=True)]
        print(
            "fairstream CPU per backlog record / raw aiokafka's, from the consumer's start, "
            f"paired per repeat (min / median / max): {spread(cpus, '.3f')}"
        )


async def bench(args: argparse.Namespace, bootstrap: str) -> None:
    topic = f"bench-fairness-{uuid.uuid4().hex[:8]}"
    began = time.perf_counter()
    await produce_backlog(
        bootstrap, topic, 1 + args.live_partitions, args.backlog, args.value_bytes
    )
    print(
        f"produced a backlog of {args.backlog:,} records in {time.perf_counter() - began:.1f} s",
        flush=True,
    )
    results = []
    for repeat in range(1, args.repeat + 1):
        for way in args.ways:
            result = await measure(args, way, bootstrap, topic)
            results.append(result)
            print(
                f"run {repeat}/{args.repeat} {result.way}: drain {result.drain_s:.1f} s, "
                f"live p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, "
                f"Jain {result.jain:.3f}",
                flush=True,
            )
    print_table(results)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--backlog", type=int, default=1_000_000, help="records in the backlog partition"
    )
    parser.add_argument(
        "--live-partitions", type=int, default=7, help="partitions fed while the backlog drains"
    )
    parser.add_argument(
        "--rate", type=float, default=1_000.0, help="live records/s, over all live partitions"
    )
    parser.add_argument(
        "--work-us", type=float, default=10.0, help="CPU microseconds the handler spends per record"
    )
    parser.add_argument("--value-bytes", type=int, default=100, help="size of each record value")
    parser.add_argument(
        "--window",
        type=float,
        default=1.0,
        help="seconds per window of Jain's index (nan if the drain is shorter than one)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of every way (min/median/max over them)"
    )
    parser.add_argument(
        "--ways",
        nargs="+",
        choices=list(WAYS),
        default=list(WAYS),
        help="which ways to run, in this order within each repeat",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds one run may take before failing"
    )
    add_bootstrap_option(parser)
    add_scheduler_option(parser)
    args = parser.parse_args()
    args.scheduler = scheduler_fields(parser, args.scheduler)
    if min(args.backlog, args.live_partitions, args.rate, args.window, args.repeat) <= 0:
        parser.error("--backlog, --live-partitions, --rate, --window and --repeat must be > 0")
    if args.value_bytes < STAMP.size:
        parser.error(f"--value-bytes must be >= {STAMP.size} (the send time is stamped in it)")
    return args


def main() -> None:
    args = parse_args()
    logs.configure("console", "WARNING")
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    with cluster(args.bootstrap) as bootstrap:
        asyncio.run(bench(args, bootstrap))


if __name__ == "__main__":
    main()
