"""The CLI's ``stream`` command: a consumer group's topics as a Spark streaming query.

The work is :func:`fairstream.spark.streamjob.run_stream`'s; this module turns flags
into a :class:`~fairstream.spark.streamjob.StreamJob`, names the library's settings
by their flags in errors, and draws a live line per batch (records, lag per topic).
Imported only by :mod:`fairstream.cli`.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from fairstream.cli._backfill import key_values
from fairstream.cli._kafka import add_bootstrap, require_extra
from fairstream.errors import ConfigError

__all__ = ["add_stream"]

_STREAM_EPILOG = """\
Each micro-batch admits at most --max-records records, shared fairly between the
partitions with new records (--admission proportional is Spark's Kafka source rule,
where one backlogged partition starves the others). With --catch-up N a partition
more than N records behind jumps to its end and drains its backlog from a bounded
share of each batch (KIP-333); open ranges live in the checkpoint and the group's
commit metadata, so `fairstream lag` shows them.

After each batch the group's offsets are committed (the group is not joined). With
--output the Parquet files are written exactly once; a --handler sees every record at
least once. Rerun with the same --checkpoint to resume.

examples:
  fairstream stream --group clicks --topics clicks --output /data/clicks --checkpoint /ck/clicks
  fairstream stream --group billing --topics orders --handler billing.jobs:handle \\
      --checkpoint /ck/billing --trigger 5 --max-records 50000 --catch-up 100000
"""


def add_stream(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "stream",
        help="run a Spark streaming query over a group's topics with fair admission",
        description=(
            "Read Kafka with a Spark Structured Streaming query (PySpark, local or on a "
            "cluster), pass every record to a handler or write Parquet, and commit the "
            "group's offsets after each batch. Needs the 'spark' extra."
        ),
        epilog=_STREAM_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(parser)
    parser.add_argument("--group", required=True, help="consumer group to commit for")
    read = parser.add_mutually_exclusive_group(required=True)
    read.add_argument("--topics", help="comma-separated topics, e.g. clicks")
    read.add_argument(
        "--topic-pattern",
        metavar="REGEX",
        help="every topic whose whole name matches, topics created later included "
        "(Spark's subscribePattern), e.g. 'clicks-.*'",
    )
    sink = parser.add_mutually_exclusive_group(required=True)
    sink.add_argument(
        "--handler",
        metavar="MODULE:FUNC",
        help="function called once per record in the executors, as for `fairstream backfill`",
    )
    sink.add_argument("--output", metavar="DIR", help="write the records as Parquet here")
    parser.add_argument(
        "--checkpoint", required=True, metavar="DIR", help="Spark checkpoint directory"
    )
    parser.add_argument(
        "--trigger",
        default="available-now",
        metavar="available-now|SECONDS",
        help="available-now: drain what exists, then stop (default); or seconds between batches",
    )
    parser.add_argument("--master", default=None, help="Spark master (default: local[*])")
    parser.add_argument(
        "--starting-offsets",
        default="committed",
        help="committed (default, else the log start), earliest, latest or per-partition JSON",
    )
    parser.add_argument(
        "--max-records", type=int, default=None, help="records per batch at most (default: all)"
    )
    parser.add_argument(
        "--admission",
        choices=["fair", "proportional"],
        default="fair",
        help="how a batch's records are shared between partitions (default: fair)",
    )
    parser.add_argument(
        "--catch-up",
        type=int,
        default=None,
        metavar="N",
        help="parallel catch-up for partitions more than N records behind (default: off)",
    )
    parser.add_argument(
        "--poll-timeout-ms",
        metavar="MS",
        default=None,
        help="fail a read that gets no record for this long (Spark's "
        "kafkaConsumer.pollTimeoutMs; default 30000)",
    )
    parser.add_argument(
        "--fetch-offset-retries",
        metavar="N",
        default=None,
        help="attempts at reading the log ends and the group's offsets before the query "
        "fails, the first one counted (Spark's fetchOffset.numRetries; default 3)",
    )
    parser.add_argument(
        "--fetch-offset-retry-interval-ms",
        metavar="MS",
        default=None,
        help="wait between those attempts (Spark's fetchOffset.retryIntervalMs; default 10)",
    )
    parser.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka setting for every Kafka client (repeatable)",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not print batch lines")
    parser.set_defaults(run=_run_stream)


_STREAM_FLAGS = {
    "kafka.bootstrap.servers": "--bootstrap",
    "kafka.group.id": "--group",
    "subscribe": "--topics",
    "subscribePattern": "--topic-pattern",
    "topics/pattern": "--topics/--topic-pattern",
    "maxOffsetsPerTrigger": "--max-records",
    "kafkaConsumer.pollTimeoutMs": "--poll-timeout-ms",
    "fetchOffset.numRetries": "--fetch-offset-retries",
    "fetchOffset.retryIntervalMs": "--fetch-offset-retry-interval-ms",
    "handler": "--handler",
    "output": "--output",
    "handler/output": "--handler/--output",
    "checkpoint": "--checkpoint",
    "trigger": "--trigger",
    "kafka_config": "--kafka-config",
}


def _run_stream(args: argparse.Namespace) -> int:
    require_extra("spark", "pyspark", "pyarrow", "confluent_kafka")
    from fairstream.spark.streamjob import BatchProgress, StreamJob, run_stream

    console = Console(stderr=True)

    def show(batch: BatchProgress) -> None:
        lag = ", ".join(f"{topic} {owed}" for topic, owed in sorted(batch.lag.items()))
        console.print(f"batch {batch.batch}: {batch.records} records; lag {lag or '?'}")

    options = {"startingOffsets": args.starting_offsets, "admission": args.admission}
    if args.max_records is not None:
        options["maxOffsetsPerTrigger"] = str(args.max_records)
    if args.catch_up is not None:
        options |= {"parallelCatchUp": "true", "catchUpThreshold": str(args.catch_up)}
    for name, value in (
        ("kafkaConsumer.pollTimeoutMs", args.poll_timeout_ms),
        ("fetchOffset.numRetries", args.fetch_offset_retries),
        ("fetchOffset.retryIntervalMs", args.fetch_offset_retry_interval_ms),
    ):
        if value is not None:
            options[name] = value
    try:
        job = StreamJob(
            bootstrap=args.bootstrap or "",
            group_id=args.group,
            topics=tuple(t.strip() for t in (args.topics or "").split(",") if t.strip()),
            topic_pattern=args.topic_pattern,
            checkpoint=args.checkpoint,
            handler=args.handler,
            output=args.output,
            master=args.master,
            trigger=args.trigger,
            options=options,
            kafka_config=key_values("--kafka-config", args.kafka_config),
            progress=None if args.no_progress else show,
        )
        records = run_stream(job)
    except ConfigError as exc:
        flag = _STREAM_FLAGS.get(exc.field, exc.field)
        raise ConfigError(flag, exc.value, exc.problem, exc.hint) from None
    print(f"streamed {records} records of group {job.group_id!r}")
    return 0
