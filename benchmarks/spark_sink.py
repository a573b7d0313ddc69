"""The Kafka sink on Spark: rows/s written by ``df.write.format("fairstream")``.

A DataFrame of ``--rows`` rows (100-byte binary values, a string key) built by Spark
itself (``spark.range``, so no Python producer is in the way) is written, in turn:

- ``fairstream sink``: ``df.write.format("fairstream").mode("append")`` to a topic of 8
  partitions (confluent-kafka in each task, idempotent, ``acks=all``, every delivery
  checked before the task reports success);
- ``noop sink``: the same frame to Spark's ``noop`` format: the cost of building and
  handing over the rows alone, the ceiling no sink can pass.

Spark's own JVM Kafka sink cannot run beside them (its jars come from Maven, which this
project does not ship). Each way runs ``--repeat`` times after one warm-up write of
each; it prints min / median / max rows/s and the sink's ratio to the noop ceiling::

    python benchmarks/spark_sink.py --master 'local[2]' --rows 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from _common import add_bootstrap_option, cluster
from confluent_kafka.admin import AdminClient, NewTopic

from fairstream import logs
from fairstream.spark import build_session, register

PARTITIONS = 8


def new_topic(bootstrap: str) -> str:
    topic = f"sink-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(timeout=30)
    return topic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_bootstrap_option(parser)
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per write")
    parser.add_argument("--repeat", type=int, default=3, help="measured writes per way")
    args = parser.parse_args()
    logs.configure("console", "WARNING")
    spark = build_session(args.master, app_name="fairstream-sink-bench")
    register(spark)
    from pyspark.sql import functions as F

    with cluster(args.bootstrap) as bootstrap:

        def frame(rows: int) -> object:
            return spark.range(rows).select(
                F.col("id").cast("string").alias("key"),
                F.expr("cast(rpad(cast(id as string), 100, 'x') as binary)").alias("value"),
            )

        def fairstream_sink(rows: int) -> None:
            (
                frame(rows)
                .write.format("fairstream")  # type: ignore[attr-defined]
                .mode("append")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", new_topic(bootstrap))
                .save()
            )

        def noop_sink(rows: int) -> None:
            frame(rows).write.format("noop").mode("overwrite").save()  # type: ignore[attr-defined]

        ways = {"fairstream sink": fairstream_sink, "noop sink": noop_sink}
        for write in ways.values():
            write(20_000)  # warm-up: Python workers and the first producer
        rates: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.repeat):
            for name, write in ways.items():
                began = time.perf_counter()
                write(args.rows)
                rates[name].append(args.rows / (time.perf_counter() - began))
    spark.stop()
    print(f"{args.rows:,} rows, {PARTITIONS} partitions, {args.master}, {args.repeat} runs")
    print(f"{'way':<16} {'min':>10} {'median':>10} {'max':>10}  rows/s")
    for name, values in rates.items():
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"{name:<16} {low:>10,.0f} {mid:>10,.0f} {high:>10,.0f}")
    ratio = statistics.median(rates["fairstream sink"]) / statistics.median(rates["noop sink"])
    print(f"fairstream sink / noop ceiling (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
