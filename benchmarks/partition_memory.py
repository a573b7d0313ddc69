"""Memory per owned partition: resident memory of an idle member, fairstream vs raw aiokafka.

Each run is a fresh process (``--child``), so one run's heap does not carry into the next:
it notes its resident set after the imports, joins a group alone, handles the one record
of every partition, idles ``--idle`` seconds, and notes its resident set again. The
growth at ``--partitions`` counts, minus the growth at the smallest count, over the
difference in partitions, is the bytes a member spends per owned partition.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from _common import add_bootstrap_option, cluster, create_topic
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

import fairstream
from fairstream import logs

WAYS = ("raw", "fairstream")


def resident_bytes() -> int:
    """This process's resident set (VmRSS), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS in /proc/self/status: this benchmark needs Linux")


async def raw_member(bootstrap: str, topic: str, partitions: int, idle: float) -> None:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"mem-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        seen = 0
        while seen < partitions:
            batches = await consumer.getmany(timeout_ms=500)
            seen += sum(len(records) for records in batches.values())
        await consumer.commit()
        await asyncio.sleep(idle)
    finally:
        await consumer.stop()


async def fairstream_member(bootstrap: str, topic: str, partitions: int, idle: float) -> None:
    app = fairstream.App(bootstrap=bootstrap, group_id=f"mem-{uuid.uuid4().hex[:8]}")
    seen = 0
    all_seen = asyncio.Event()

    @app.subscriber(topic)
    async def handle(_record: fairstream.Record[bytes]) -> None:
        nonlocal seen
        seen += 1
        if seen == partitions:
            all_seen.set()

    async with app:
        await all_seen.wait()
        await asyncio.sleep(idle)


def child(args: argparse.Namespace) -> None:
    """One member in this process; prints its growth in resident bytes as JSON."""
    logs.configure("console", "WARNING")
    member = raw_member if args.child == "raw" else fairstream_member
    before = resident_bytes()
    asyncio.run(member(args.bootstrap, args.topic, args.partitions[0], args.idle))
    print(json.dumps({"growth": resident_bytes() - before}))


async def make_topic(bootstrap: str, partitions: int) -> str:
    """A topic of ``partitions`` partitions holding one small record in each."""
    topic = f"bench-memory-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap, topic, partitions)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        sent = [await producer.send(topic, b"x" * 100, partition=p) for p in range(partitions)]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    return topic


def run_child(way: str, bootstrap: str, topic: str, partitions: int, idle: float) -> int:
    command = [
        sys.executable,
        __file__,
        "--child",
        way,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--idle",
        str(idle),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{way} member at {partitions} partitions failed:\n{done.stderr}")
    growth: int = json.loads(done.stdout.strip().splitlines()[-1])["growth"]
    return growth


def bench(args: argparse.Namespace, bootstrap: str) -> None:
    counts = sorted(args.partitions)
    topics = {n: asyncio.run(make_topic(bootstrap, n)) for n in counts}
    growth: dict[tuple[str, int], list[int]] = {}
    for repeat in range(1, args.repeat + 1):
        for n in counts:
            for way in WAYS:
                value = run_child(way, bootstrap, topics[n], n, args.idle)
                growth.setdefault((way, n), []).append(value)
                print(f"run {repeat}/{args.repeat} {way} {n} partitions: +{value / 2**20:.1f} MiB")
    low = counts[0]
    print(
        "\n| way | partitions | growth MiB min / median / max "
        f"| bytes per partition (median, over {low} partitions) |\n|---|---:|---:|---:|"
    )
    for way in WAYS:
        base = statistics.median(growth[way, low])
        for n in counts:
            values = growth[way, n]
            mib = " / ".join(
                f"{v / 2**20:.1f}" for v in (min(values), statistics.median(values), max(values))
            )
            per = "-" if n == low else f"{(statistics.median(values) - base) / (n - low):,.0f}"
            print(f"| {way} | {n:,} | {mib} | {per} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[16, 2048],
        help="partition counts to measure; the smallest is the per-partition baseline",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of every way and count")
    parser.add_argument(
        "--idle", type=float, default=3.0, help="seconds a member idles before it is measured"
    )
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    add_bootstrap_option(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if len(args.partitions) < 2 or min(args.partitions) <= 0 or args.repeat <= 0:
        parser.error("--partitions needs two or more counts > 0, --repeat must be > 0")
    with cluster(args.bootstrap) as bootstrap:
        bench(args, bootstrap)


if __name__ == "__main__":
    main()
