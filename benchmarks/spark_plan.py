"""How long the streaming source takes to plan a trigger, by partition count.

Spark calls the source's driver side once per trigger: ``latestOffset`` (the group's
state and every partition's log start and end, the admission) and ``partitions`` (the
batch's ranges placed on tasks). This times both, without Spark, on a topic of
``--partitions`` partitions with a few records each, on the embedded noida broker: the
first trigger (which makes the driver's Kafka client) and ``--repeat`` later ones,
min / median / max. Goal: <= 0.5 s a trigger at 1,024 partitions::

    python benchmarks/spark_plan.py --partitions 64 1024 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from _common import add_bootstrap_option, cluster
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from fairstream import logs
from fairstream.spark.stream import StreamOptions, StreamReader


def make_topic(bootstrap: str, partitions: int) -> str:
    topic = f"plan-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for partition in range(partitions):
        for _ in range(3):
            producer.produce(topic, partition=partition, value=b"x" * 100)
    assert producer.flush(60) == 0
    return topic


def trigger(reader: StreamReader, start: dict[str, object]) -> dict[str, object]:
    """One trigger's driver side: the next end offset and its tasks."""
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    reader.partitions(start, end)
    return end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_bootstrap_option(parser)
    parser.add_argument("--partitions", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--repeat", type=int, default=5, help="later triggers timed")
    args = parser.parse_args()
    logs.configure("console", "WARNING")
    rows = []
    with cluster(args.bootstrap) as bootstrap:
        for count in args.partitions:
            topic = make_topic(bootstrap, count)
            options = {
                "kafka.bootstrap.servers": bootstrap,
                "subscribe": topic,
                "kafka.group.id": f"plan-{uuid.uuid4().hex[:8]}",
                "startingOffsets": "earliest",
                "maxOffsetsPerTrigger": "1000",
            }
            reader = StreamReader(StreamOptions.parse(options))
            began = time.perf_counter()
            start = reader.initialOffset()
            end = trigger(reader, start)
            first = time.perf_counter() - began
            times = []
            for _ in range(args.repeat):
                began = time.perf_counter()
                start, end = end, trigger(reader, end)
                times.append(time.perf_counter() - began)
            reader.stop()
            rows.append((count, first, min(times), statistics.median(times), max(times)))
    print(f"planning one trigger, noida, {args.repeat} later triggers (min / median / max)")
    print(f"{'partitions':>10} {'first s':>8} {'min s':>7} {'median s':>9} {'max s':>7}")
    for count, first, low, mid, high in rows:
        print(f"{count:>10} {first:>8.3f} {low:>7.3f} {mid:>9.3f} {high:>7.3f}")


if __name__ == "__main__":
    main()
