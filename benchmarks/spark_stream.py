"""Streaming on Spark: live-record latency beside a backlog, fair vs proportional admission.

Partition 0 of a fresh topic holds ``--backlog`` records (default 1M) when the query
starts, while partitions 1-7 receive ``--rate`` records/s each (default 500) from a
producer thread whose values are their produce time. The query
(``readStream.format("fairstream")``, ``maxOffsetsPerTrigger=--max-records``, default
20000, triggers back to back) ends each batch in a ``foreachBatch`` that takes the
batch-end time; a live record's latency is batch end minus produce time. Reported per
admission rule, on a fresh topic and group each: live latency p50/p99/max over every
live record read while the backlog drained, the same once the query runs (records
produced after its first batch ended: before that they wait for the query to start,
under either rule), and the time to drain the backlog::

    python benchmarks/spark_stream.py --backlog 1000000 --master 'local[2]'

``fair`` is max-min fair water-filling; ``proportional`` is Spark's Kafka source rule
(``maxOffsetsPerTrigger`` split by each partition's available offsets);
``fair+catch-up`` adds parallel catch-up (``catchUpThreshold`` 100000).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from _common import add_bootstrap_option, cluster
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from fairstream import logs
from fairstream.spark import build_session, register

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from multiprocessing.synchronize import Event

    from pyspark.sql import DataFrame, Row
    from pyspark.sql.streaming import StreamingQuery

LIVE = range(1, 8)


@dataclass
class Run:
    """What one query saw: live latencies (seconds), backlog read, drain time."""

    backlog: int
    latencies: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    """Latencies of the live records produced after the first batch ended."""
    first_batch_end: float | None = None
    window_start: float = 0.0
    """Live records produced before it are not measured (``--backlog-at``: the backlog's
    arrival)."""
    backlog_read: int = 0
    drained_after: float | None = None
    batches: int = 0
    phases: dict[str, list[int]] = field(default_factory=dict)
    """Spark's ``durationMs`` per batch phase (``latestOffset``, ``addBatch`` ...)."""


def make_topic(bootstrap: str, backlog: int) -> str:
    topic = f"stream-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 8, 1)]).values():
        future.result(timeout=30)
    produce_backlog(bootstrap, topic, backlog)
    return topic


def produce_backlog(bootstrap: str, topic: str, backlog: int, began: Event | None = None) -> None:
    """``backlog`` records of 100 bytes into partition 0, as fast as the broker takes them
    (``began`` is set just before the first)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000}
    )
    value = b"x" * 100
    if began is not None:
        began.set()
    for _ in range(backlog):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise SystemExit("the backlog was not delivered within 120 s")


def start_backlog_elsewhere(bootstrap: str, topic: str, backlog: int) -> BaseProcess:
    """:func:`produce_backlog` in another process, as another application would produce
    it (here, its million produce calls would hold the GIL that the live producer's
    thread and the sink need); returns once the first record is about to be sent."""
    context = multiprocessing.get_context("spawn")
    began = context.Event()
    child = context.Process(target=produce_backlog, args=(bootstrap, topic, backlog, began))
    child.start()
    if not began.wait(60):
        raise SystemExit("the backlog's producer did not start within 60 s")
    return child


def produce_live(bootstrap: str, topic: str, rate: int, stop: threading.Event) -> None:
    """``rate`` records/s to each live partition, in 20 ms ticks; values are time.time()."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    tick, sent = 0.02, 0.0
    began = time.monotonic()
    while not stop.is_set():
        due = (time.monotonic() - began) * rate
        while sent < due:
            stamp = repr(time.time()).encode()
            for partition in LIVE:
                producer.produce(topic, value=stamp, partition=partition)
            sent += 1
        producer.poll(0)
        time.sleep(tick)
    producer.flush(10)


def collect_live(batch: DataFrame) -> list[Row]:
    """A batch's rows as the sink reads them: the partition, and the value of live ones
    (their produce time; the backlog's values stay in the JVM)."""
    from pyspark.sql import functions as F

    live_value = F.when(F.col("partition") > 0, F.col("value")).alias("value")
    return batch.select("partition", live_value).collect()


def run_query(spark: object, bootstrap: str, args: argparse.Namespace, mode: str) -> Run:
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    mid_run = args.backlog_at is not None
    topic = make_topic(bootstrap, 0 if mid_run else args.backlog)
    run = Run(backlog=args.backlog)
    stop = threading.Event()
    live = threading.Thread(target=produce_live, args=(bootstrap, topic, args.rate, stop))
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "kafka.group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(args.max_records),
        "admission": "proportional" if mode == "proportional" else "fair",
    }
    if mode == "fair+catch-up":
        options |= {"parallelCatchUp": "true", "catchUpThreshold": "100000"}
    began = 0.0

    def sink(batch: DataFrame, batch_id: int) -> None:
        if run.drained_after is not None:
            return  # measured until the drain; later batches only run the query down
        rows = collect_live(batch)
        ended = time.time()
        run.batches += 1
        for row in rows:
            if row["partition"] == 0:
                run.backlog_read += 1
            else:
                produced = float(row["value"])
                if produced < run.window_start:
                    continue  # before the backlog appeared (--backlog-at)
                run.latencies.append(ended - produced)
                if run.first_batch_end is not None and produced > run.first_batch_end:
                    run.running.append(ended - produced)
        if run.first_batch_end is None:
            run.first_batch_end = ended
        if run.drained_after is None and run.backlog_read >= run.backlog:
            run.drained_after = time.monotonic() - began

    register(spark)
    stream = spark.readStream.format("fairstream").options(**options).load()
    with tempfile.TemporaryDirectory() as checkpoint:
        live.start()
        began = time.monotonic()
        query = (
            stream.writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            if mid_run:  # the query runs on live traffic alone, then the backlog arrives
                time.sleep(args.backlog_at)
                producer = start_backlog_elsewhere(bootstrap, topic, args.backlog)
                began, run.window_start = time.monotonic(), time.time()
                producer.join()
                if producer.exitcode:
                    raise SystemExit(f"producing the backlog failed (exit {producer.exitcode})")
            while run.drained_after is None and time.monotonic() - began < args.limit:
                if not query.isActive:
                    raise SystemExit(f"the {mode} query failed: {query.exception()}")
                time.sleep(0.5)
        finally:
            for progress in query.recentProgress:
                if progress["numInputRows"]:
                    for phase, ms in progress["durationMs"].items():
                        run.phases.setdefault(phase, []).append(int(ms))
            stop.set()
            live.join()
            _stop_between_batches(query)
    return run


def _stop_between_batches(query: StreamingQuery) -> None:
    """Stop ``query`` once it has read what there is, not in the middle of a batch.

    ``query.stop()`` interrupts a running batch; Spark then asks whether the error
    it got was that interruption by matching a regex against the error's text, and
    the text of an interrupted ``foreachBatch`` (a Python traceback around a
    collect) made that regex overflow the JVM's stack (java.util.regex in
    ``StreamExecution.isInterruptionException``, 2 of 3 runs at 1M records). With
    the producer stopped the query soon has nothing to read and waits between
    triggers.
    """
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and query.isActive:
        status = query.status
        if not status["isDataAvailable"] and not status["isTriggerActive"]:
            break
        time.sleep(0.2)
    query.stop()


def warm_up(spark: object, bootstrap: str) -> None:
    """A small query first, so neither measured run pays Spark's cold start.

    200k records in batches of 20,000 make both local[2] Python workers start: a
    batch of that size is planned as two tasks (``TASK_RECORDS``), one of fewer as
    one, and a worker's first task pays ~1 s of imports. (Batches of 3,000 did not:
    every task went to one worker, and the first measured batch with two tasks waited
    ~1 s for the second: fair's, as proportional's first came later and found it
    started.) And ten batches through the measured runs' sink warm the JVM's code for
    it: after a one-batch warm-up into the ``noop`` sink the first measured query's
    first three batches took 2.6, 1.06 and 0.97 s, after ten 1.9, 0.63 and 0.61 s
    (one fair run each; the steady batches ~0.4 s)."""
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    register(spark)
    topic = make_topic(bootstrap, 200_000)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "kafka.group.id": "warm",
        "maxOffsetsPerTrigger": "20000",
    }

    def sink(batch: DataFrame, batch_id: int) -> None:
        collect_live(batch)

    with tempfile.TemporaryDirectory() as checkpoint:
        stream = spark.readStream.format("fairstream").options(**options).load()
        query = (
            stream.writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bootstrap_option(parser)
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=500, help="records/s per live partition")
    parser.add_argument("--max-records", type=int, default=20_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--limit", type=float, default=600, help="seconds a run may take")
    parser.add_argument(
        "--backlog-at",
        type=float,
        default=None,
        metavar="SECONDS",
        help="produce the backlog (from another process) this long after the query "
        "started, and measure the live records produced from then on (default: the "
        "backlog is there before it starts)",
    )
    parser.add_argument(
        "--modes", default="fair,proportional", help="fair, proportional, fair+catch-up"
    )
    args = parser.parse_args()
    logs.configure("console", "WARNING")
    with cluster(args.bootstrap) as bootstrap:
        spark = build_session(args.master, app_name="fairstream-stream-bench")
        warm_up(spark, bootstrap)
        results = {mode: run_query(spark, bootstrap, args, mode) for mode in args.modes.split(",")}
        spark.stop()
    print(
        f"backlog {args.backlog} on partition 0, 7 live partitions x {args.rate}/s, "
        f"maxOffsetsPerTrigger {args.max_records}, {args.master}"
    )
    print(
        "| admission | batches | live records | p50 s | p99 s | max s "
        "| once running: p50 s | p99 s | backlog drained s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, run in results.items():
        drained = "not drained" if run.drained_after is None else f"{run.drained_after:.1f}"
        lat, running = run.latencies, run.running
        print(
            f"| {mode} | {run.batches} | {len(lat)} | {statistics.median(lat):.2f} | "
            f"{percentile(lat, 0.99):.2f} | {max(lat):.2f} | {statistics.median(running):.2f} | "
            f"{percentile(running, 0.99):.2f} | {drained} |"
        )
    if {"fair", "proportional"} <= results.keys():
        fair, proportional, nan = results["fair"], results["proportional"], float("nan")
        print(
            "fair / proportional: p99 "
            f"{percentile(fair.latencies, 0.99) / percentile(proportional.latencies, 0.99):.3f}, "
            "once running "
            f"{percentile(fair.running, 0.99) / percentile(proportional.running, 0.99):.3f}, "
            f"drain {(fair.drained_after or nan) / (proportional.drained_after or nan):.2f}"
        )
    print("\nmedian ms per batch phase (Spark's durationMs, batches with rows)")
    for mode, run in results.items():
        phases = ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in sorted(run.phases.items()))
        print(f"{mode}: {phases}")


if __name__ == "__main__":
    main()
