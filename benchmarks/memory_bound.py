"""Peak memory with 1 MB records arriving faster than a slow handler, against the bound.

Each run is a fresh consumer process (``--child``): it notes its resident set
(VmRSS) once the imports are done and reports its peak (VmHWM, the kernel's
high-water mark) less that baseline. The parent produces ``--rate`` records a second,
more than the handler takes (``--delay`` seconds a record, one record of a partition
at a time), so the backlog grows on the broker while the consumer's share of it must
stay within the bound, per preset::

    queued   = min(max_buffered_bytes, P * queue_target_bytes) + min(fetch_max_bytes, P * R)
    in_hand  = min(concurrency, P) * (queue_target_bytes + R)
    aiokafka = 2 * min(fetch_max_bytes, P * R)
    bound    = queued + in_hand + aiokafka

with ``P`` partitions and ``R`` the bytes one fetch returns for one partition: at
most ``max_partition_fetch_bytes`` on Kafka. A queue is pulled while it is under
``queue_target_bytes`` and all queues while they are under ``max_buffered_bytes``,
so each overshoots by at most one pull; a dispatch takes a queue's records out of
the count while its handler runs, and with ``ordering="partition"`` each partition
has one dispatch in hand at most; aiokafka keeps one fetched response per partition
and reads the next response (raw bytes, then the records built from it) beside them.

The embedded brokers ignore ``fetch_max_bytes`` and ``max_partition_fetch_bytes``
(noida answered one partition's fetch with up to 18 MB under a 1 MiB limit), so the
benchmark weighs every pull the engine makes and reports the bound both ways: with
``R = max_partition_fetch_bytes`` (Kafka) and with the largest ``R`` measured. The
records are produced while the consumer runs, after it handled its first record of
each partition: a backlog that built up before it started would come back from
noida in one response.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import add_bootstrap_option, cluster, create_topic
from aiokafka import AIOKafkaProducer

import fairstream
from fairstream import ConsumerConfig, SchedulerConfig, logs

MiB = 2**20
WARM = "consuming"


@dataclass(frozen=True, slots=True)
class Preset:
    scheduler: SchedulerConfig
    consumer: ConsumerConfig

    def bound(
        self, partitions: int, response: int | None = None, fetched: int | None = None
    ) -> int:
        """The formula of the module docstring, in bytes.

        ``response`` (one partition's) and ``fetched`` (all partitions') are what the
        broker answers a fetch with; by default what Kafka answers under these limits.
        """
        s, c = self.scheduler, self.consumer
        if response is None:
            response = c.max_partition_fetch_bytes
        if fetched is None:
            fetched = min(c.fetch_max_bytes, partitions * response)
        queued = min(s.max_buffered_bytes, partitions * s.queue_target_bytes) + fetched
        in_hand = min(s.concurrency, partitions) * (s.queue_target_bytes + response)
        return queued + in_hand + 2 * fetched


PRESETS = {
    # fairstream's defaults: 8 MiB a queue, 256 MiB in all, aiokafka's 50 MiB / 1 MiB.
    "defaults": Preset(SchedulerConfig(), ConsumerConfig()),
    # Bounds a memory-tight deployment sets: the global byte bound binds before the queues'.
    "tight": Preset(
        SchedulerConfig(queue_target_bytes=2 * MiB, max_buffered_bytes=4 * MiB),
        ConsumerConfig(fetch_max_bytes=4 * MiB),
    ),
}


def status_bytes(field: str) -> int:
    """A ``/proc/self/status`` figure (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no {field} in /proc/self/status: this benchmark needs Linux")


async def consume(args: argparse.Namespace, preset: Preset) -> dict[str, int]:
    """Handle ``--records`` records plus the warm-up; say so once the warm-up is handled.

    Returns the most bytes one pull brought for one partition and for all together.
    """
    app = fairstream.App(
        bootstrap=args.bootstrap,
        group_id=f"mem-bound-{uuid.uuid4().hex[:8]}",
        scheduler=preset.scheduler,
        consumer=preset.consumer,
    )
    seen = 0
    all_seen = asyncio.Event()

    @app.subscriber(args.topic)
    async def handle(_record: fairstream.Record[bytes]) -> None:
        nonlocal seen
        await asyncio.sleep(args.delay)
        seen += 1
        if seen == args.partitions:
            print(WARM, flush=True)
        if seen == args.partitions + args.records:
            all_seen.set()

    peaks = {"response": 0, "fetched": 0}
    async with app:
        # Weigh what each pull hands over (a benchmark may wrap the engine's consumer;
        # the library does not): aiokafka held it, and fairstream queues it at once.
        consumer = app._clients.consumer  # type: ignore[attr-defined]
        getmany = consumer.getmany

        async def weighed(*partitions: Any, **options: Any) -> Any:
            batches = await getmany(*partitions, **options)
            sizes = [sum(len(r.raw or b"") for r in records) for records in batches.values()]
            peaks["response"] = max(peaks["response"], *sizes, 0)
            peaks["fetched"] = max(peaks["fetched"], sum(sizes))
            return batches

        consumer.getmany = weighed
        await all_seen.wait()
    return peaks


def child(args: argparse.Namespace) -> None:
    """One member in this process; prints its peak growth in resident bytes, and the
    largest fetched bytes aiokafka held, as JSON."""
    logs.configure("console", "WARNING")
    baseline = status_bytes("VmRSS")
    peaks = asyncio.run(consume(args, PRESETS[args.child]))
    print(json.dumps({"peak_growth": status_bytes("VmHWM") - baseline, **peaks}))


async def produce(
    bootstrap: str, topic: str, partitions: int, count: int, size: int, rate: float | None
) -> None:
    """``count`` values of ``size`` bytes over the partitions, ``rate`` a second at most."""
    # A 1 MB value needs a request larger than aiokafka's 1 MiB default with its headers.
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=2 * size + 4096)
    await producer.start()
    try:
        value = b"m" * size
        started = time.monotonic()
        for i in range(count):
            await producer.send(topic, value, partition=i % partitions)
            if rate is not None:
                await asyncio.sleep(max(0.0, (i + 1) / rate - (time.monotonic() - started)))
        await producer.flush()
    finally:
        await producer.stop()


def run_child(args: argparse.Namespace, preset: str, bootstrap: str) -> dict[str, int]:
    """A fresh topic holding one record a partition, a consumer process on it, then the
    stream produced at ``--rate`` once the consumer handled those; its peak growth."""
    topic = f"bench-mem-bound-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topic(bootstrap, topic, args.partitions))
    size, partitions = args.record_bytes, args.partitions
    asyncio.run(produce(bootstrap, topic, partitions, partitions, size, None))
    command = [
        *(sys.executable, __file__, "--child", preset, "--bootstrap", bootstrap),
        *("--topic", topic, "--records", str(args.records), "--delay", str(args.delay)),
        *("--partitions", str(partitions)),
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as consumer:
        assert consumer.stdout is not None
        if consumer.stdout.readline().strip() != WARM:
            raise SystemExit(f"the {preset} consumer exited before it handled the warm-up")
        asyncio.run(produce(bootstrap, topic, partitions, args.records, size, args.rate))
        out = consumer.stdout.read()
        if consumer.wait(timeout=600) != 0:
            raise SystemExit(f"the {preset} consumer failed with code {consumer.returncode}")
    figures: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return figures


def _spread(values: list[int]) -> str:
    """min / median / max in MiB."""
    picked = (min(values), statistics.median(values), max(values))
    return " / ".join(f"{v / MiB:.1f}" for v in picked)


def bench(args: argparse.Namespace, bootstrap: str) -> None:
    runs: dict[str, list[dict[str, int]]] = {}
    for repeat in range(1, args.repeat + 1):
        for name in args.presets:
            run = run_child(args, name, bootstrap)
            run["bound"] = PRESETS[name].bound(args.partitions, run["response"], run["fetched"])
            runs.setdefault(name, []).append(run)
            print(
                f"run {repeat}/{args.repeat} {name}: peak +{run['peak_growth'] / MiB:.1f} MiB, "
                f"bound with the broker's responses {run['bound'] / MiB:.1f} MiB"
            )
    print(
        f"\n{args.records} records of {args.record_bytes:,} bytes, {args.partitions} partitions, "
        f"produced {args.rate:g} a second, handled {args.delay * 1000:.0f} ms a record "
        f"(at most {args.partitions / args.delay:g} a second); MiB, min / median / max "
        f"over {args.repeat} runs\n"
        "\n| preset | queue_target_bytes / max_buffered_bytes | fetch_max_bytes / "
        "max_partition_fetch_bytes | bound on Kafka | largest response, one partition "
        "| largest responses, all partitions | bound with those | peak RSS growth | runs within |"
        "\n|---|---|---|---:|---:|---:|---:|---:|---:|"
    )
    for name in args.presets:
        preset, done = PRESETS[name], runs[name]
        s, c = preset.scheduler, preset.consumer
        within = sum(run["peak_growth"] <= run["bound"] for run in done)
        print(
            f"| {name} | {s.queue_target_bytes / MiB:g} / {s.max_buffered_bytes / MiB:g} "
            f"| {c.fetch_max_bytes / MiB:g} / {c.max_partition_fetch_bytes / MiB:g} "
            f"| {preset.bound(args.partitions) / MiB:.0f} "
            f"| {_spread([run['response'] for run in done])} "
            f"| {_spread([run['fetched'] for run in done])} "
            f"| {_spread([run['bound'] for run in done])} "
            f"| {_spread([run['peak_growth'] for run in done])} | {within}/{len(done)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=240, help="records produced and handled")
    parser.add_argument("--rate", type=float, default=40, help="records produced a second")
    parser.add_argument("--record-bytes", type=int, default=1_000_000, help="bytes a value")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds a record is handled")
    parser.add_argument("--repeat", type=int, default=3, help="runs of every preset")
    parser.add_argument(
        "--presets", nargs="+", choices=sorted(PRESETS), default=sorted(PRESETS), metavar="NAME"
    )
    parser.add_argument("--child", choices=sorted(PRESETS), help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    add_bootstrap_option(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if min(args.records, args.record_bytes, args.partitions, args.repeat, args.rate) <= 0:
        parser.error("--records, --rate, --record-bytes, --partitions and --repeat must be > 0")
    if args.delay < 0:
        parser.error("--delay must be >= 0")
    with cluster(args.bootstrap) as bootstrap:
        bench(args, bootstrap)


if __name__ == "__main__":
    main()
