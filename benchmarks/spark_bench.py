"""Spark backfill throughput: the ``fairstream`` source on local[N] vs one confluent-kafka reader.

Produces ``--records`` records (default 1M, ``--value-bytes`` each) into a fresh
topic with confluent-kafka, then reads them all back several ways in the same run
and prints records/s per way:

- ``confluent-kafka, 1 consumer``: one plain consumer loop over every partition,
  no Arrow, nothing kept - the ceiling for a single Python process;
- ``read_task, 1 process``: the source's own reader (assign + seek, Arrow batches)
  outside Spark, one chunk per partition;
- ``spark count``: ``read_chunks(...).count()`` on local[N], the source alone,
  once cold (the first job starts Spark's Python workers) and once warm;
- ``spark handler (no-op)`` and ``spark parquet``: ``run_backfill`` end to end,
  planning and the Spark job included (``--no-commit``), session start excluded.

Against the embedded noida broker unless ``--bootstrap`` or ``FAIRSTREAM_BOOTSTRAP``
names a cluster::

    python benchmarks/spark_bench.py --records 1000000 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from _common import add_bootstrap_option, cluster
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fairstream import logs
from fairstream.spark import BackfillJob, BackfillRecord, build_session, read_chunks, run_backfill
from fairstream.spark.cluster import read_states
from fairstream.spark.planning import place_chunks, plan_ranges, split_ranges
from fairstream.spark.reading import ReadSettings, read_task


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    way: str
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def produce(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
        }
    )
    value = os.urandom(value_bytes // 2).hex().encode()[:value_bytes]
    began = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise SystemExit("producer could not deliver every record within 120 s")
    return time.perf_counter() - began


def plain_consumer(bootstrap: str, topic: str, ends: dict[int, int]) -> Row:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    began = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    count = 0
    total = sum(ends.values())
    while count < total:
        for message in consumer.consume(min(10_000, total - count), timeout=1.0):
            if message.error() is None:
                count += 1
    seconds = time.perf_counter() - began
    consumer.close()
    return Row(way="confluent-kafka, 1 consumer", records=count, seconds=seconds)


def timed(way: str, run: Callable[[], int]) -> Row:
    began = time.perf_counter()
    records = run()
    return Row(way=way, records=records, seconds=time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records to produce")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--value-bytes", type=int, default=100, help="size of each value")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--chunk", type=int, default=100_000, help="offsets per chunk")
    add_bootstrap_option(parser)
    args = parser.parse_args()
    logs.configure("console", "WARNING")

    with cluster(args.bootstrap) as bootstrap:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        produce_s = produce(bootstrap, topic, args.partitions, args.records, args.value_bytes)
        print(f"produced {args.records:,} records in {produce_s:.1f} s", flush=True)
        group = f"bench-{uuid.uuid4().hex[:6]}"
        states = read_states(bootstrap, group, [topic])
        ends = {s.partition: s.log_end for s in states}
        chunks = split_ranges(plan_ranges(states), args.chunk)
        settings = ReadSettings(bootstrap=bootstrap)

        rows = [plain_consumer(bootstrap, topic, ends)]
        per_partition = [[c] for c in plan_ranges(states)]
        rows.append(
            timed(
                "read_task (Arrow), 1 process",
                lambda: sum(b.num_rows for t in per_partition for b in read_task(settings, t)),
            )
        )

        began = time.perf_counter()
        spark = build_session(args.master, app_name="fairstream-bench")
        session_s = time.perf_counter() - began
        tasks = place_chunks(chunks, spark.sparkContext.defaultParallelism)
        # The first job also starts the Python workers; the second shows the steady state.
        for run in ("cold", "warm"):
            rows.append(
                timed(
                    f"spark count ({run}), {args.master}",
                    lambda: read_chunks(spark, tasks, settings).count(),
                )
            )

        def no_op(record: BackfillRecord) -> None:
            """Does nothing: measures the pipeline, not a workload."""

        job = BackfillJob(
            bootstrap=bootstrap, group_id=group, topics=(topic,), handler=no_op,
            chunk=args.chunk, commit=False,
        )  # fmt: skip
        rows.append(
            timed(
                f"spark handler (no-op), {args.master}",
                lambda: run_backfill(job, spark=spark).records,
            )
        )
        with tempfile.TemporaryDirectory() as folder:
            parquet = BackfillJob(
                bootstrap=bootstrap, group_id=group, topics=(topic,), output=f"{folder}/out",
                chunk=args.chunk, commit=False,
            )  # fmt: skip
            rows.append(
                timed(
                    f"spark parquet, {args.master}",
                    lambda: run_backfill(parquet, spark=spark).records,
                )
            )
        spark.stop()

    print(f"\nSpark session start: {session_s:.1f} s (not in the rates below); tasks: {len(tasks)}")
    print("\n| way | records | seconds | records/s |\n|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row.way} | {row.records:,} | {row.seconds:.2f} | {row.rate:,.0f} |")


if __name__ == "__main__":
    main()
