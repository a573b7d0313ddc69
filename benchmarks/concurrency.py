"""I/O-bound handlers: records/s with ``await anyio.sleep(0.02)`` per record, one run.

Produces ``--records`` records over ``--partitions`` partitions once, key ``k<i>``
of ``--keys`` keys into partition ``i % partitions`` (value ``k<i>:<seq>``), then
consumes them several ways in turn, each with a fresh group id:

- ``fairstream <ordering>/<concurrency>``: ``SchedulerConfig(ordering=...,
  concurrency=...)`` for ordering partition, key and none at each ``--concurrency``;
- ``faststream default``: FastStream's plainest handler, one record at a time;
- ``faststream max_workers=64``: its concurrent subscriber (no ordering at all).

A 20 ms handler at 50 records/s per slot would take minutes for the slow ways, so
each way stops after ``--seconds`` (or at the last record): the rate is the records
handled from the first one to the stop, over that time (the group join is left out).
"ceiling" is what the ordering allows: ``min(concurrency, partitions)``, ``min(concurrency,
keys)`` or ``concurrency`` records in flight, over 20 ms. "out of order" counts
keys whose records were handled out of offset order (ordering "none" and
FastStream promise no order, so theirs is only reported). Ways run interleaved,
``--repeat`` times; the table shows min / median / max::

    python benchmarks/concurrency.py --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from _common import add_bootstrap_option, cluster, create_topic
from aiokafka import AIOKafkaProducer
from faststream.kafka import KafkaBroker

from fairstream import App, Record, SchedulerConfig, logs

DELAY = 0.02


@dataclass(slots=True)
class Tally:
    """Handled records, the clock, and per-key order."""

    target: int
    deadline: float
    seen: int = 0
    first: float = 0.0
    last: float = 0.0
    next_seq: dict[str, int] = field(default_factory=dict)
    out_of_order: set[str] = field(default_factory=set)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, value: bytes) -> None:
        now = time.perf_counter()
        if not self.seen:
            self.first = now
        self.seen += 1
        self.last = now
        key, seq = value.decode().split(":")
        if int(seq) < self.next_seq.get(key, 0):
            self.out_of_order.add(key)
        self.next_seq[key] = max(self.next_seq.get(key, 0), int(seq) + 1)
        if self.seen >= self.target or (now - self.first) >= self.deadline:
            self.done.set()

    @property
    def rate(self) -> float:
        return (self.seen - 1) / (self.last - self.first) if self.seen > 1 else 0.0


@dataclass(frozen=True, slots=True)
class Way:
    name: str
    ceiling: float
    ordered: bool
    consume: Callable[[str, str, str, Tally], Awaitable[None]]


def fairstream_way(ordering: str, concurrency: int, partitions: int, keys: int) -> Way:
    async def consume(bootstrap: str, topic: str, group_id: str, tally: Tally) -> None:
        app = App(
            bootstrap=bootstrap,
            group_id=group_id,
            scheduler=SchedulerConfig(ordering=ordering, concurrency=concurrency),  # type: ignore[arg-type]
        )

        @app.subscriber(topic)
        async def handle(record: Record[bytes]) -> None:
            await anyio.sleep(DELAY)
            tally.add(record.value)

        async with app:
            await tally.done.wait()

    in_flight = {
        "partition": min(concurrency, partitions),
        "key": min(concurrency, keys),
        "none": concurrency,
    }[ordering]
    name = f"fairstream {ordering}/{concurrency}"
    return Way(name, in_flight / DELAY, ordering != "none", consume)


def faststream_way(max_workers: int | None) -> Way:
    async def consume(bootstrap: str, topic: str, group_id: str, tally: Tally) -> None:
        broker = KafkaBroker(bootstrap, logger=None, apply_types=False)
        extra = {} if max_workers is None else {"max_workers": max_workers}

        @broker.subscriber(topic, group_id=group_id, auto_offset_reset="earliest", **extra)  # type: ignore[call-overload]
        async def handle(msg: bytes) -> None:
            await anyio.sleep(DELAY)
            tally.add(msg)

        async with broker:
            await broker.start()
            await tally.done.wait()

    name = "faststream default" if max_workers is None else f"faststream max_workers={max_workers}"
    return Way(name, (max_workers or 1) / DELAY, False, consume)


async def produce(bootstrap: str, partitions: int, records: int, keys: int) -> str:
    topic = f"bench-conc-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap, topic, partitions)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for i in range(records):
            k, seq = i % keys, i // keys
            await producer.send(
                topic, f"k{k}:{seq}".encode(), key=f"k{k}".encode(), partition=k % partitions
            )
        await producer.flush()
    finally:
        await producer.stop()
    return topic


async def main(args: argparse.Namespace) -> None:
    logs.configure(level="WARNING")
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    ways = [
        fairstream_way(ordering, concurrency, args.partitions, args.keys)
        for ordering in ("partition", "key", "none")
        for concurrency in args.concurrency
    ]
    ways += [faststream_way(None), faststream_way(64)]
    ways = [w for w in ways if not args.only or any(o in w.name for o in args.only)]
    rates: dict[str, list[float]] = {w.name: [] for w in ways}
    disorder: dict[str, int] = {w.name: 0 for w in ways}
    with cluster(args.bootstrap) as bootstrap:
        topic = await produce(bootstrap, args.partitions, args.records, args.keys)
        for _ in range(args.repeat):
            for way in ways:
                tally = Tally(target=args.records, deadline=args.seconds)
                group_id = f"bench-{uuid.uuid4().hex[:8]}"
                with anyio.fail_after(args.seconds + 60):
                    await way.consume(bootstrap, topic, group_id, tally)
                rates[way.name].append(tally.rate)
                disorder[way.name] = max(disorder[way.name], len(tally.out_of_order))
                print(f"  {way.name}: {tally.rate:,.0f} rec/s ({tally.seen} records)", flush=True)
    print()
    print("| way | min rec/s | median | max | median / ceiling | keys out of order |")
    print("|---|---:|---:|---:|---:|---:|")
    for way in ways:
        r = rates[way.name]
        median = statistics.median(r)
        order = str(disorder[way.name]) + ("" if way.ordered else " (no order promised)")
        print(
            f"| {way.name} | {min(r):,.0f} | {median:,.0f} | {max(r):,.0f} "
            f"| {median / way.ceiling:.2f} of {way.ceiling:,.0f} | {order} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--records", type=int, default=20_000, help="records in the topic (default: 20,000)"
    )
    parser.add_argument(
        "--partitions", type=int, default=4, help="partitions of the topic (default: 4)"
    )
    parser.add_argument(
        "--keys",
        type=int,
        default=200,
        help="distinct record keys, spread over the partitions (default: 200)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[4, 64, 256, 1024],
        help="fairstream's concurrency for each ordering; FastStream's max_workers "
        "is fixed at 64 (default: 4 64 256 1024)",
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="stop a way after this long")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of every way, min/median/max (default: 3)"
    )
    parser.add_argument("--only", nargs="*", help="run only the ways whose name holds one of these")
    add_bootstrap_option(parser)
    asyncio.run(main(parser.parse_args()))
