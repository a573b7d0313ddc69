"""Streaming on Spark at scale: steady throughput to Parquet, and scale-out on a standalone cluster.

``--what throughput``: ``--records`` records (default 1M, 100-byte values) in 8
partitions are in the topic before the query starts. After a warm-up query, each
repeat runs, on a fresh group and checkpoint each, in turn:

- ``stream fair`` / ``stream proportional``: ``readStream.format("fairstream")`` to a
  Parquet sink with ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger=--max-records``
  (so several micro-batches), fair or Spark's proportional admission rule;
- ``stream fair, maxTasks=N``: the same with one task per core (N = Spark's default
  parallelism) instead of the source's default of up to 8 tasks per batch;
- ``backfill parquet``: the batch source (``run_backfill``, one Spark job) to Parquet,
  the same records without micro-batches, as the reference.

It reports records/s end to end (query start to stop, group commits included) and, for
the streams, the steady rate over every micro-batch but the first (Spark's own
``triggerExecution`` durations). Spark's JVM Kafka source cannot run beside them: it
needs the spark-sql-kafka jars from Maven, which this project does not ship::

    python benchmarks/spark_stream_scale.py --what throughput --master 'local[2]'

``--what scale-out``: a CPU-bound handler (a ~50 us busy loop per record) over
``--records`` records (default 200k) with ``fairstream stream``'s driver
(``run_stream``, ``Trigger.AvailableNow``, 8 tasks per batch) on two standalone
clusters started from the pyspark installation (``tests/spark/standalone.py``, so run
it with the checkout on ``PYTHONPATH``): one
worker of one core and two workers of one core, alternating, one application (and so
fresh executors) per run, the same job on 80k records first in each::

    python benchmarks/spark_stream_scale.py --what scale-out --records 200000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from _common import add_bootstrap_option, cluster
from spark_bench import produce
from spark_stream import warm_up

from fairstream import logs
from fairstream.spark import BackfillJob, BackfillRecord, build_session, register, run_backfill
from fairstream.spark.streamjob import StreamJob, run_stream
from tests.spark.standalone import start_cluster

PARTITIONS = 8
BUSY_S = 50e-6


def stream_to_parquet(
    spark: object, bootstrap: str, topic: str, options: dict[str, str]
) -> tuple[int, float, float]:
    """One AvailableNow query to Parquet: (records, end-to-end s, steady records/s)."""
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    register(spark)
    source = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "kafka.group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "startingOffsets": "earliest",
        **options,
    }
    with tempfile.TemporaryDirectory() as folder:
        began = time.perf_counter()
        stream = spark.readStream.format("fairstream").options(**source).load()
        query = (
            stream.writeStream.format("parquet")
            .option("checkpointLocation", f"{folder}/ck")
            .trigger(availableNow=True)
            .start(f"{folder}/out")
        )
        query.awaitTermination()
        seconds = time.perf_counter() - began
        batches = [p for p in query.recentProgress if p["numInputRows"]]
    records = sum(int(p["numInputRows"]) for p in batches)
    later = batches[1:]
    steady_ms = sum(int(p["durationMs"]["triggerExecution"]) for p in later)
    steady = sum(int(p["numInputRows"]) for p in later) / (steady_ms / 1000) if steady_ms else 0.0
    return records, seconds, steady


def backfill_to_parquet(spark: object, bootstrap: str, topic: str) -> tuple[int, float, float]:
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    with tempfile.TemporaryDirectory() as folder:
        job = BackfillJob(
            bootstrap=bootstrap, group_id=f"bench-{uuid.uuid4().hex[:8]}", topics=(topic,),
            output=f"{folder}/out", commit=False,
        )  # fmt: skip
        began = time.perf_counter()
        records = run_backfill(job, spark=spark).records
        return records, time.perf_counter() - began, 0.0


def spread(values: list[float]) -> str:
    return f"{min(values):,.0f} / {statistics.median(values):,.0f} / {max(values):,.0f}"


def throughput(bootstrap: str, args: argparse.Namespace) -> None:
    topic = f"stream-tput-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, PARTITIONS, args.records, 100)
    spark = build_session(args.master, app_name="fairstream-stream-throughput")
    warm_up(spark, bootstrap)
    limit = {"maxOffsetsPerTrigger": str(args.max_records)}
    cores = spark.sparkContext.defaultParallelism
    ways: dict[str, Callable[[], tuple[int, float, float]]] = {
        "stream fair": lambda: stream_to_parquet(
            spark, bootstrap, topic, limit | {"admission": "fair"}
        ),
        "stream proportional": lambda: stream_to_parquet(
            spark, bootstrap, topic, limit | {"admission": "proportional"}
        ),
        f"stream fair, maxTasks={cores}": lambda: stream_to_parquet(
            spark, bootstrap, topic, limit | {"admission": "fair", "maxTasks": str(cores)}
        ),
        "backfill parquet": lambda: backfill_to_parquet(spark, bootstrap, topic),
    }
    rates: dict[str, list[float]] = {way: [] for way in ways}
    steady: dict[str, list[float]] = {way: [] for way in ways}
    for repeat in range(args.repeats):
        for way, run in ways.items():
            records, seconds, rate = run()
            if records != args.records:
                raise SystemExit(f"{way} read {records} records, not {args.records}")
            rates[way].append(records / seconds)
            steady[way].append(rate)
            print(f"run {repeat + 1} {way}: {seconds:.2f} s, steady {rate:,.0f}/s", flush=True)
    spark.stop()
    print(
        f"\n{args.records:,} records in {PARTITIONS} partitions, {args.master}, "
        f"maxOffsetsPerTrigger {args.max_records}, {args.repeats} runs (min / median / max)"
    )
    print("| way | end to end records/s | steady records/s (batches 2..n) |\n|---|---:|---:|")
    for way in ways:
        still = spread(steady[way]) if any(steady[way]) else "-"
        print(f"| {way} | {spread(rates[way])} | {still} |")


def busy(record: BackfillRecord) -> None:
    """A CPU-bound handler: ~50 us of Python per record."""
    until = time.perf_counter() + BUSY_S
    while time.perf_counter() < until:
        pass


def handler_job(bootstrap: str, topic: str, folder: str) -> StreamJob:
    """``fairstream stream --handler busy --trigger available-now`` from the earliest offset."""
    return StreamJob(
        bootstrap=bootstrap, group_id=f"bench-{uuid.uuid4().hex[:8]}", topics=(topic,),
        handler=busy, checkpoint=f"{folder}/ck-{uuid.uuid4().hex}",
        options={"startingOffsets": "earliest"},
    )  # fmt: skip


def tasks_per_executor(folder: Path, app: str) -> list[int]:
    """Tasks each executor of ``app`` ran, from the executors' logs in the workers'
    work directories: shows the second worker really took part."""
    logs = sorted(folder.glob(f"*/work-*/{app}/*/stderr"))
    return [log.read_text(errors="replace").count("Running task") for log in logs]


def scale_out(bootstrap: str, args: argparse.Namespace) -> None:
    topic = f"stream-scale-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, PARTITIONS, args.records, 100)
    warm = f"stream-warm-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, warm, PARTITIONS, 80_000, 100)
    os.environ.setdefault("SPARK_EXECUTOR_MEMORY", "512m")
    seconds: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as folder:
        one_dir, two_dir = Path(folder, "one"), Path(folder, "two")
        one_dir.mkdir()
        two_dir.mkdir()
        with start_cluster(one_dir, workers=1) as one, start_cluster(two_dir, workers=2) as two:
            for repeat in range(args.repeats):
                for standalone in (one, two):
                    spark = build_session(standalone.master, app_name="fairstream-scale-out")
                    # The same job on 80k records first: 8 tasks, so every executor has
                    # started its Python workers before the measured run.
                    run_stream(handler_job(bootstrap, warm, folder), spark=spark)
                    began = time.perf_counter()
                    records = run_stream(handler_job(bootstrap, topic, folder), spark=spark)
                    took = time.perf_counter() - began
                    app = spark.sparkContext.applicationId
                    spark.stop()
                    spread_over = tasks_per_executor(Path(folder), app)
                    if records != args.records:
                        raise SystemExit(f"read {records} records, not {args.records}")
                    seconds[standalone.workers].append(took)
                    print(
                        f"run {repeat + 1}, {standalone.workers} worker(s): {took:.2f} s, "
                        f"tasks per executor (warm-up included): {spread_over}",
                        flush=True,
                    )
    rates = {w: [args.records / s for s in runs] for w, runs in seconds.items()}
    speedups = [b / a for a, b in zip(rates[1], rates[2], strict=True)]
    print(
        f"\n{args.records:,} records in {PARTITIONS} partitions, handler ~{BUSY_S * 1e6:.0f} us "
        f"per record, {args.repeats} runs (min / median / max)"
    )
    print("| cluster | records/s |\n|---|---:|")
    print(f"| 1 worker x 1 core | {spread(rates[1])} |")
    print(f"| 2 workers x 1 core | {spread(rates[2])} |")
    print(f"speed-up per pair: {', '.join(f'{s:.2f}x' for s in speedups)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bootstrap_option(parser)
    parser.add_argument("--what", choices=("throughput", "scale-out"), default="throughput")
    parser.add_argument("--records", type=int, help="default 1M (throughput), 200k (scale-out)")
    parser.add_argument("--max-records", type=int, default=250_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--master", default="local[2]", help="for throughput")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.records is None:
        args.records = 1_000_000 if args.what == "throughput" else 200_000
    logs.configure("console", "WARNING")
    with cluster(args.bootstrap) as bootstrap:
        (throughput if args.what == "throughput" else scale_out)(bootstrap, args)


if __name__ == "__main__":
    main()
