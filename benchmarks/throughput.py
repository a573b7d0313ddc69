"""Throughput with a no-op handler: fairstream vs a raw aiokafka loop vs FastStream, one run.

Produces ``--records`` records of ``--value-bytes`` bytes over ``--partitions``
partitions once, then consumes all of them in a consumer group, several ways in
turn, each with a fresh group id, on the same broker and data:

- ``raw aiokafka``: a ``getmany`` loop awaiting a no-op async handler per record
  and committing after every batch - what a user writes by hand;
- ``raw aiokafka, max_records``: the same loop with ``getmany(max_records=--max-batch)``,
  aiokafka's own bound, which keeps it from decoding a whole fetch at once;
- ``raw aiokafka, max_records, 1 s commits``: that loop committing after handling at
  most once a second, and on stop - fairstream's own policy, at-least-once;
- ``raw aiokafka, max_records, auto-commit``: that loop with aiokafka's default
  auto-commit, which commits what ``getmany`` returned on a timer (a crash can lose
  records returned but not handled): the least a raw loop can do;
- ``fairstream``: ``@app.subscriber(topic)`` with ``record: Record[bytes]``;
- ``fairstream ordering=key``: the same with ``SchedulerConfig(ordering="key")``
  (records run per key, out of partition order, with the offset map);
- ``fairstream batch``: ``batch=True`` with ``records: list[Record[bytes]]``;
- ``faststream``: FastStream's plainest handler, ``msg: bytes``, with
  ``apply_types=False`` and ``logger=None`` (its fastest documented settings);
- ``faststream batch``: the same with ``batch=True`` and ``msgs: list[bytes]``.

A run has two clocks, both started before the consumer starts (group join
included): one stops at the last record handled, the other once the consumer
has stopped (its final commit made, its records freed). The second is the
throughput of the whole job; the first leaves out what a way defers past its
last record (see "Two clocks" below). Each run checks its count: every way that
consumes the whole topic must handle exactly ``--records`` records, and raw
aiokafka and fairstream must have committed the end offset of every partition.
FastStream's per-record path handles ~20k records/s, so it stops after
``--faststream-records`` (a prefix of the same topic). Ways run interleaved,
``--repeat`` times, so a noisy neighbour hurts them alike; the table shows min /
median / max records/s by each clock, the same of each run's rate over the fastest
raw aiokafka way's in that repeat (raw aiokafka at its best: the raw way with the
best median in this run), and how long after the start each way handled its first
record. It also shows the CPU time this process spent per record (the broker runs in
its own process and is not counted): on a shared machine a neighbour steals wall
time but not much CPU time, so this column compares two versions of fairstream
where the rates are too noisy to.

A second table gives the steady state, from the first record handled to the last:
records/s and this process's CPU per record over that span (read at the first and
the last handler call; every way's consumer runs in this process), each paired with
the raw way of the best steady median in the same repeat. The group join and the
first fetch, the same for every way, fill most of a short run and pull the first
table's ratios toward 1; the steady state is what a service pays all day
(``benchmarks/notes/per_record_cost.md`` says where each microsecond goes).

The embedded noida broker answers a fetch with everything up to the log end, so
the raw loop's first ``getmany`` decodes the whole topic at once, and the garbage
collector walks that growing heap of records again and again (a third of its
run). fairstream pulls only what its queues have room for, so its records are
decoded just ahead of their handler. Two clocks: the raw loop holds its one
1M-record batch until its loop ends, so freeing it (~0.15 s) falls after its
last record, while fairstream frees records as its dispatches finish. On a
broker that caps fetches (Kafka: ``max_partition_fetch_bytes``) the raw loop
frees each batch before the next ``getmany`` and the clocks nearly agree.
Against noida unless ``--bootstrap`` or ``FAIRSTREAM_BOOTSTRAP`` names a
cluster::

    python benchmarks/throughput.py --records 1000000 --repeat 3

To compare two versions of fairstream on the same data, keep one broker up across
the runs and name the topic: the first run produces it, the next ones consume it as
it is (``PYTHONPATH`` at a ``git archive`` of the other version picks the package)::

    python -c 'import time; from fairstream.testing import EmbeddedBroker as B; \
        print(B().start().bootstrap, flush=True); time.sleep(1e9)' &
    python benchmarks/throughput.py --bootstrap 127.0.0.1:PORT --topic steady-512 \
        --records 3000000 --partitions 512 --ways raw-auto fairstream --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from _common import (
    Commits,
    add_bootstrap_option,
    add_scheduler_option,
    cluster,
    create_topic,
    fairstream_in_use,
    raw_aiokafka_loop,
    scheduler_fields,
)
from _fetch_wait import held_empty_fetches
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord
from faststream.kafka import KafkaBroker

from fairstream import App, Record, SchedulerConfig, logs


@dataclass(slots=True)
class Tally:
    """Counts handled records and notes when the first and the ``target``-th were handled.

    It also reads this process's CPU time at both, for the steady state: the records
    after the first call (``first_count`` came with it) over the wall and CPU time
    between the two calls.
    """

    target: int
    seen: int = 0
    first: float = 0.0
    first_cpu: float = 0.0
    first_count: int = 0
    finished: float = 0.0
    finished_cpu: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, count: int) -> None:
        if not self.seen:
            self.first, self.first_cpu = time.perf_counter(), time.process_time()
            self.first_count = count
        self.seen += count
        if self.seen >= self.target and not self.finished:
            self.finished, self.finished_cpu = time.perf_counter(), time.process_time()
            self.done.set()


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One consumption: where to read, as which group, and the tally to feed."""

    bootstrap: str
    topic: str
    group_id: str
    tally: Tally
    max_batch: int
    scheduler: dict[str, float]
    """``SchedulerConfig`` fields of every fairstream way (``--scheduler``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Way:
    """A way to consume the topic, and what its check and its commits are."""

    name: str
    consume: Callable[[Run], Awaitable[None]]
    commits: str
    whole_topic: bool = True
    check_commits: bool = True
    raw: bool = False


class WarningCounter(logging.Handler):
    """Counts aiokafka's warnings (heartbeat lost, rejoin, failed commit) per run."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


class CollectorClock:
    """Notes each pass of the garbage collector (``gc.callbacks``): when it began, its CPU."""

    def __init__(self) -> None:
        self.passes: list[tuple[float, float]] = []
        self._began = (0.0, 0.0)
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = (time.perf_counter(), time.process_time())
        else:
            at, cpu = self._began
            self.passes.append((at, time.process_time() - cpu))

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds of the passes that began between two ``perf_counter`` readings."""
        return sum(cpu for at, cpu in self.passes if start <= at <= end)


# --- the ways ------------------------------------------------------------------------


async def raw_aiokafka(run: Run, *, bounded: bool = False, commits: Commits = "batch") -> None:
    tally = run.tally

    async def handle(record: ConsumerRecord[bytes, bytes]) -> None:
        tally.add(1)

    await raw_aiokafka_loop(
        bootstrap=run.bootstrap,
        topic=run.topic,
        group_id=run.group_id,
        handle=handle,
        until=tally.done,
        max_records=run.max_batch if bounded else None,
        commits=commits,
    )


async def fairstream_records(run: Run) -> None:
    tally = run.tally
    app = App(
        bootstrap=run.bootstrap,
        group_id=run.group_id,
        assignor="fair",
        scheduler=SchedulerConfig(**run.scheduler),
    )

    @app.subscriber(run.topic)
    async def handle(record: Record[bytes]) -> None:
        tally.add(1)

    async with app:
        await tally.done.wait()


async def fairstream_key(run: Run) -> None:
    tally = run.tally
    app = App(
        bootstrap=run.bootstrap,
        group_id=run.group_id,
        assignor="fair",
        scheduler=SchedulerConfig(ordering="key", **run.scheduler),
    )

    @app.subscriber(run.topic)
    async def handle(record: Record[bytes]) -> None:
        tally.add(1)

    async with app:
        await tally.done.wait()


async def fairstream_batch(run: Run) -> None:
    tally = run.tally
    app = App(
        bootstrap=run.bootstrap,
        group_id=run.group_id,
        assignor="fair",
        scheduler=SchedulerConfig(**run.scheduler),
    )

    @app.subscriber(run.topic, batch=True, max_batch=run.max_batch)
    async def handle(records: list[Record[bytes]]) -> None:
        tally.add(len(records))

    async with app:
        await tally.done.wait()


def faststream_broker(run: Run) -> KafkaBroker:
    # apply_types=False skips FastDepends' per-message argument validation and
    # logger=None its per-message log lines: FastStream's fastest documented settings.
    return KafkaBroker(run.bootstrap, logger=None, apply_types=False)


async def faststream_records(run: Run) -> None:
    tally = run.tally
    broker = faststream_broker(run)

    @broker.subscriber(run.topic, group_id=run.group_id, auto_offset_reset="earliest")
    async def handle(msg: bytes) -> None:
        tally.add(1)

    async with broker:
        await broker.start()
        await tally.done.wait()


async def faststream_batch(run: Run) -> None:
    tally = run.tally
    broker = faststream_broker(run)

    @broker.subscriber(run.topic, group_id=run.group_id, auto_offset_reset="earliest", batch=True)
    async def handle(msgs: list[bytes]) -> None:
        tally.add(len(msgs))

    async with broker:
        await broker.start()
        await tally.done.wait()


WAYS = {
    "raw": Way(name="raw aiokafka", consume=raw_aiokafka, commits="after every batch", raw=True),
    "raw-bounded": Way(
        name="raw aiokafka, max_records",
        consume=partial(raw_aiokafka, bounded=True),
        commits="after every batch",
        raw=True,
    ),
    "raw-interval": Way(
        name="raw aiokafka, max_records, 1 s commits",
        consume=partial(raw_aiokafka, bounded=True, commits="interval"),
        commits="after handling, at most once a second, and on stop",
        raw=True,
    ),
    "raw-auto": Way(
        name="raw aiokafka, max_records, auto-commit",
        consume=partial(raw_aiokafka, bounded=True, commits="auto"),
        commits="aiokafka auto-commit (may commit unhandled records)",
        # Not checked, as FastStream's auto-commit ways are not: aiokafka commits on its
        # own timer and on stop, logging (not raising) a failure, and under load the
        # group had committed nothing when checked in 3 of 8 processes, which ended the
        # run and lost its pairs. Auto-commit promises no commit at the end.
        check_commits=False,
        raw=True,
    ),
    "fairstream": Way(
        name="fairstream", consume=fairstream_records, commits="every 1 s and on stop"
    ),
    "fairstream-key": Way(
        name="fairstream ordering=key", consume=fairstream_key, commits="every 1 s and on stop"
    ),
    "fairstream-batch": Way(
        name="fairstream batch", consume=fairstream_batch, commits="every 1 s and on stop"
    ),
    "faststream": Way(
        name="faststream",
        consume=faststream_records,
        commits="aiokafka auto-commit (ACK_FIRST)",
        whole_topic=False,
        check_commits=False,
    ),
    "faststream-batch": Way(
        name="faststream batch",
        consume=faststream_batch,
        commits="aiokafka auto-commit (ACK_FIRST)",
        check_commits=False,
    ),
}


# --- data and checks -----------------------------------------------------------------


WAVE_BYTES = 16 << 20
"""Bytes of batches a produce sends before it waits for them to be acknowledged.

aiokafka puts every ready batch of a broker, one per partition, into one produce
request; ``max_request_size`` bounds a batch, not the request. Sent all at once, 1M
records of 100 B over 512 partitions made one ~110 MB request, over the broker's
limit on a request (Kafka's ``socket.request.max.bytes``: 100 MiB), and the embedded
noida broker closed the connection. Waves of 16 MiB keep every request under it.
"""


async def produce(
    bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int
) -> dict[TopicPartition, int]:
    """Create the topic, fill it in whole batches, a wave at a time, and return its end offsets."""
    await create_topic(bootstrap, topic, partitions)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, max_batch_size=1 << 20, max_request_size=4 << 20
    )
    await producer.start()
    value = b"x" * value_bytes
    try:
        sent: list[asyncio.Future[object]] = []
        unacknowledged = 0
        for partition in range(partitions):
            left = records // partitions + (partition < records % partitions)
            while left:
                batch = producer.create_batch()
                while left and batch.append(key=None, value=value, timestamp=None) is not None:
                    left -= 1
                batch.close()
                sent.append(await producer.send_batch(batch, topic, partition=partition))
                unacknowledged += batch.size()
                if unacknowledged >= WAVE_BYTES:
                    await asyncio.gather(*sent)
                    sent, unacknowledged = [], 0
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    return await end_offsets(bootstrap, topic, partitions)


async def topic_exists(bootstrap: str, topic: str) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return topic in await admin.list_topics()
    finally:
        await admin.close()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends: dict[TopicPartition, int] = await consumer.end_offsets(
            [TopicPartition(topic, p) for p in range(partitions)]
        )
        return ends
    finally:
        await consumer.stop()


async def check_committed(bootstrap: str, group_id: str, ends: dict[TopicPartition, int]) -> None:
    """Fail unless the group committed the end offset of every partition."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
    await consumer.start()
    try:
        short = {tp.partition: (await consumer.committed(tp), end) for tp, end in ends.items()}
    finally:
        await consumer.stop()
    short = {p: pair for p, pair in short.items() if pair[0] != pair[1]}
    if short:
        raise SystemExit(f"group {group_id} left partitions uncommitted (committed, end): {short}")


# --- running and reporting -----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    way: Way
    repeat: int
    records: int
    seconds: float
    stopped_seconds: float
    first_seconds: float
    cpu_seconds: float
    warnings: int
    steady_records: int
    """Records handled after the first handler call (the steady state's)."""
    steady_seconds: float
    steady_cpu_seconds: float
    steady_gc_seconds: float
    """Of ``steady_cpu_seconds``, the garbage collector's."""

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def rate_stopped(self) -> float:
        return self.records / self.stopped_seconds

    @property
    def rate_steady(self) -> float:
        return self.steady_records / self.steady_seconds

    @property
    def cpu_steady(self) -> float:
        """CPU seconds of this process per record in the steady state."""
        return self.steady_cpu_seconds / self.steady_records

    @property
    def gc_steady(self) -> float:
        """The garbage collector's CPU seconds per record in the steady state."""
        return self.steady_gc_seconds / self.steady_records


async def measure(
    way: Way,
    repeat: int,
    run: Run,
    ends: dict[TopicPartition, int],
    limit: float,
    warnings: WarningCounter,
    collector: CollectorClock,
) -> Sample:
    warnings.count = 0
    collector.passes.clear()
    began, cpu_began = time.perf_counter(), time.process_time()
    try:
        async with asyncio.timeout(limit):
            await way.consume(run)
        stopped, cpu = time.perf_counter(), time.process_time() - cpu_began
    except TimeoutError:
        raise SystemExit(
            f"{way.name} handled {run.tally.seen:,} of {run.tally.target:,} records "
            f"in {limit:.0f} s; raise --timeout or lower the record counts"
        ) from None
    tally = run.tally
    if way.whole_topic and tally.seen != tally.target:
        raise SystemExit(f"{way.name} handled {tally.seen:,} records, expected {tally.target:,}")
    if way.check_commits:
        await check_committed(run.bootstrap, run.group_id, ends)
    return Sample(
        way=way,
        repeat=repeat,
        records=tally.target,
        seconds=tally.finished - began,
        stopped_seconds=stopped - began,
        first_seconds=tally.first - began,
        cpu_seconds=cpu,
        warnings=warnings.count,
        steady_records=tally.target - tally.first_count,
        steady_seconds=tally.finished - tally.first,
        steady_cpu_seconds=tally.finished_cpu - tally.first_cpu,
        steady_gc_seconds=collector.cpu_between(tally.first, tally.finished),
    )


def spread(values: list[float], fmt: str) -> str:
    ordered = sorted(values)
    return " / ".join(format(v, fmt) for v in (ordered[0], statistics.median(ordered), ordered[-1]))


def fastest_raw(
    by_way: dict[str, list[Sample]], rate: Callable[[Sample], float] = lambda s: s.rate
) -> str | None:
    """The raw aiokafka way with the best median ``rate`` in this run: raw aiokafka at its best."""
    raw = {name: group for name, group in by_way.items() if group[0].way.raw}
    if not raw:
        return None
    return max(raw, key=lambda name: statistics.median(rate(s) for s in raw[name]))


def print_steady(by_way: dict[str, list[Sample]]) -> None:
    """The steady state: from the first record handled to the last, rate and CPU.

    What a service pays all day, with the group join and the first fetch left out
    (the same for every way, they fill most of a short run and pull the ratios
    toward 1). The CPU is this process's, where the consumer runs (the broker has
    its own), read at the first and the last handler call; both ratios are paired
    with the raw way of the best median steady rate, in the same repeat.
    """
    baseline = fastest_raw(by_way, lambda s: s.rate_steady)
    base = {s.repeat: s for s in by_way.get(baseline, [])} if baseline else {}
    print(
        f"\nSteady state, from the first record handled to the last; paired with "
        f"{baseline or '(no raw way)'} in the same repeat."
        "\n\n| way | runs | records/s min / median / max | ratio, paired "
        "| CPU us/record min / median / max | CPU ratio, paired "
        "| of which the garbage collector, us/record |"
        "\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for name, group in by_way.items():
        paired = [s.rate_steady / base[s.repeat].rate_steady for s in group if s.repeat in base]
        cpu = [s.cpu_steady / base[s.repeat].cpu_steady for s in group if s.repeat in base]
        print(
            f"| {name} | {len(group)} "
            f"| {spread([s.rate_steady for s in group], ',.0f')} "
            f"| {spread(paired, '.2f') if paired else '-'} "
            f"| {spread([s.cpu_steady * 1e6 for s in group], '.2f')} "
            f"| {spread(cpu, '.2f') if cpu else '-'} "
            f"| {spread([s.gc_steady * 1e6 for s in group], '.2f')} |"
        )


def print_table(samples: list[Sample]) -> None:
    """Rates per way, and each run's rate over the fastest raw way's in the same repeat.

    The paired ratio compares runs taken seconds apart, so a neighbour's load that
    comes and goes between repeats cancels out of it.
    """
    by_way: dict[str, list[Sample]] = {}
    for sample in samples:
        by_way.setdefault(sample.way.name, []).append(sample)
    baseline = fastest_raw(by_way)
    base = {s.repeat: s for s in by_way.get(baseline, [])} if baseline else {}
    print(
        f"\nPaired ratios: each run over the run of {baseline or '(no raw way)'} in the same "
        "repeat, the fastest raw aiokafka way of this run by median."
        "\n\n| way | records/run | runs "
        "| to last record: records/s min / median / max | ratio, paired "
        "| to stopped: records/s min / median / max | ratio, paired "
        "| first record after, s: min / median / max "
        "| CPU of this process, us/record: min / median / max | commits | aiokafka warnings |"
        "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"
    )
    for name, group in by_way.items():
        paired = [s.rate / base[s.repeat].rate for s in group if s.repeat in base]
        # A way that stops after a prefix has the rest of the topic to drop on stop.
        whole = group[0].way.whole_topic
        stopped = [s.rate_stopped for s in group] if whole else []
        paired_stopped = [
            s.rate_stopped / base[s.repeat].rate_stopped
            for s in group
            if whole and s.repeat in base
        ]
        print(
            f"| {name} | {group[0].records:,} | {len(group)} "
            f"| {spread([s.rate for s in group], ',.0f')} "
            f"| {spread(paired, '.2f') if paired else '-'} "
            f"| {spread(stopped, ',.0f') if stopped else '-'} "
            f"| {spread(paired_stopped, '.2f') if paired_stopped else '-'} "
            f"| {spread([s.first_seconds for s in group], '.2f')} "
            f"| {spread([s.cpu_seconds / s.records * 1e6 for s in group], '.2f')} "
            f"| {group[0].way.commits} | {sum(s.warnings for s in group)} |"
        )
    print_steady(by_way)


async def bench(args: argparse.Namespace, bootstrap: str, warnings: WarningCounter) -> None:
    """One table per partition count, each over a topic of its own."""
    collector = CollectorClock()
    for partitions in args.partitions:
        await bench_topic(args, partitions, bootstrap, warnings, collector)


async def bench_topic(
    args: argparse.Namespace,
    partitions: int,
    bootstrap: str,
    warnings: WarningCounter,
    collector: CollectorClock,
) -> None:
    topic = args.topic or f"bench-throughput-{uuid.uuid4().hex[:8]}"
    began = time.perf_counter()
    if args.topic and await topic_exists(bootstrap, topic):
        ends = await end_offsets(bootstrap, topic, partitions)
        done = "found"
    else:
        ends = await produce(bootstrap, topic, partitions, args.records, args.value_bytes)
        done = "produced"
    produced = sum(ends.values())
    if produced != args.records:
        raise SystemExit(
            f"topic {topic} holds {produced:,} records in partitions 0-{partitions - 1}, "
            f"expected {args.records:,}: give --records and --partitions it was made with"
        )
    print(
        f"\n{partitions} partitions: {done} {produced:,} records "
        f"in {time.perf_counter() - began:.1f} s",
        flush=True,
    )
    samples = []
    for repeat in range(1, args.repeat + 1):
        for key in args.ways:
            way = WAYS[key]
            target = args.records if way.whole_topic else min(args.records, args.faststream_records)
            run = Run(
                bootstrap=bootstrap,
                topic=topic,
                group_id=f"bench-{uuid.uuid4().hex[:8]}",
                tally=Tally(target),
                max_batch=args.max_batch,
                scheduler=args.scheduler,
            )
            sample = await measure(way, repeat, run, ends, args.timeout, warnings, collector)
            samples.append(sample)
            print(
                f"run {repeat}/{args.repeat} {way.name}: {sample.records:,} records "
                f"in {sample.seconds:.2f} s = {sample.rate:,.0f}/s "
                f"(stopped after {sample.stopped_seconds:.2f} s; steady state "
                f"{sample.rate_steady:,.0f}/s, CPU {sample.cpu_steady * 1e6:.2f} us/record)",
                flush=True,
            )
    print_table(samples)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--records", type=int, default=1_000_000, help="records to produce and consume"
    )
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[16],
        help="partitions of the topic; several counts make a sweep, a table each",
    )
    parser.add_argument("--value-bytes", type=int, default=100, help="size of each record value")
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
        "--max-batch",
        type=int,
        default=1_000,
        help="max_batch of the fairstream batch handler and max_records of the bounded raw "
        "loop (FastStream batch keeps its default)",
    )
    add_scheduler_option(parser)
    parser.add_argument(
        "--faststream-records",
        type=int,
        default=200_000,
        help="records FastStream's per-record way handles (a prefix of the topic: at ~20k/s "
        "the whole topic would take most of the run)",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds one run may take before failing"
    )
    parser.add_argument(
        "--gc-threshold",
        type=int,
        default=None,
        help="the garbage collector's first-generation threshold for every way (Python's "
        "default: 700); 10000 keeps it out of the steady state, to profile the rest",
    )
    parser.add_argument(
        "--kafka-fetch-wait",
        action="store_true",
        help="hold every fetch answer that brings no record for fetch_max_wait_ms, as a "
        "Kafka broker would before answering it (noida answers at once, so a consumer "
        "whose fetch loop runs beside its handlers fetches its drained partitions again "
        "and again; see benchmarks/_fetch_wait.py); for every way",
    )
    parser.add_argument(
        "--topic",
        default=None,
        help="consume this topic, producing it first only if it does not exist (needs "
        "--bootstrap and one --partitions count): runs of two versions then read the same "
        "data without producing it again",
    )
    add_bootstrap_option(parser)
    args = parser.parse_args()
    if args.topic and (not args.bootstrap or len(args.partitions) != 1):
        parser.error(
            "--topic needs --bootstrap (a broker that outlives the runs) and one --partitions"
        )
    if min(args.records, *args.partitions, args.repeat, args.faststream_records) <= 0:
        parser.error("--records, --partitions, --repeat and --faststream-records must be > 0")
    args.scheduler = scheduler_fields(parser, args.scheduler)
    return args


def main() -> None:
    args = parse_args()
    if args.gc_threshold is not None:
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    logs.configure("console", "WARNING")
    print(fairstream_in_use(), flush=True)
    warnings = WarningCounter()
    aiokafka_log = logging.getLogger("aiokafka")
    aiokafka_log.addHandler(warnings)
    aiokafka_log.propagate = False  # counted in the table instead of flooding the output
    held = held_empty_fetches() if args.kafka_fetch_wait else contextlib.nullcontext()
    with held, cluster(args.bootstrap) as bootstrap:
        asyncio.run(bench(args, bootstrap, warnings))


if __name__ == "__main__":
    main()
