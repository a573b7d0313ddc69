"""The CLI's ``backfill`` command: a consumer group's backlog as a Spark job.

The work is :func:`fairstream.spark.run_backfill`'s; this module turns flags into a
:class:`~fairstream.spark.BackfillJob`, names the library's settings by their flags
in errors, and draws the progress bar the library reports to. Imported only by
:mod:`fairstream.cli`.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fairstream.cli._kafka import add_bootstrap, require_extra
from fairstream.errors import ConfigError

__all__ = ["add_backfill", "key_values"]

_BACKFILL_EPILOG = """\
Offsets: without --from/--to every partition of --topics is read from the group's
committed offset (or the log start) to the current end, plus the open KIP-333 shadow
ranges kept in the commit metadata. --from/--to take TOPIC=OFFSET (all partitions of
the topic) or TOPIC:PARTITION=OFFSET, comma-separated or repeated; a named partition
then reads just [from, to), the missing side defaulting as above.

After the Spark job succeeds the end offsets are committed and finished shadow ranges
dropped from the metadata; a failed job commits nothing, so rerun the same command.
Kafka refuses the commit while the group has live consumers: stop them first.

examples:
  fairstream backfill --group billing --topics orders --handler billing.jobs:handle
  fairstream backfill --group billing --topics orders,refunds --output /data/orders \\
      --from orders:3=150000 --to orders:3=900000 --no-commit
  spark-submit --master spark://spark:7077 --py-files fairstream.whl \\
      "$(python -c 'import fairstream.cli as c; print(c.__file__)')" backfill ...
"""


def add_backfill(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "backfill",
        help="process a consumer group's backlog (or given offsets) as a Spark job",
        description=(
            "Read Kafka offset ranges with a Spark job (PySpark, local or on a cluster), "
            "pass every record to a handler or write the records as Parquet, then commit "
            "the group's offsets. Needs the 'spark' extra: pip install 'fairstream[spark]'."
        ),
        epilog=_BACKFILL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(parser)
    parser.add_argument("--group", required=True, help="consumer group whose offsets to use")
    parser.add_argument(
        "--topics", required=True, help="comma-separated topics to backfill, e.g. orders,refunds"
    )
    sink = parser.add_mutually_exclusive_group(required=True)
    sink.add_argument(
        "--handler",
        metavar="MODULE:FUNC",
        help="function called once per record in the executors, def or async def taking a "
        "fairstream.spark.BackfillRecord; the current directory is importable",
    )
    sink.add_argument(
        "--output",
        metavar="DIR",
        help="write the records as Parquet to this new directory or URI (s3a://, hdfs://) "
        "instead; columns topic, partition, offset, timestamp, key, value, headers",
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master: local[*] (all local cores), local[N], spark://HOST:7077, yarn, "
        "k8s://... (default: spark-submit's master, else local[*])",
    )
    parser.add_argument(
        "--chunk",
        type=int,
        default=100_000,
        help="largest number of offsets one Spark task reads in one piece; a partition with "
        "more lag is split so several tasks share it (default: 100000)",
    )
    parser.add_argument(
        "--tasks",
        type=int,
        default=None,
        help="number of Spark tasks the chunks are balanced over (default: Spark's default "
        "parallelism, i.e. the cores available)",
    )
    parser.add_argument(
        "--from",
        dest="starts",
        action="append",
        default=[],
        metavar="TOPIC[:PARTITION]=OFFSET",
        help="first offset to read instead of the committed one (repeatable)",
    )
    parser.add_argument(
        "--to",
        dest="ends",
        action="append",
        default=[],
        metavar="TOPIC[:PARTITION]=OFFSET",
        help="offset to stop before instead of the partition's current end (repeatable)",
    )
    parser.add_argument(
        "--no-commit",
        action="store_true",
        help="leave the group's offsets and shadow ranges as they are (dry runs, exports)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the cluster, and for progress on a range in an executor, "
        "before the job fails (default: 30)",
    )
    parser.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka setting for every Kafka client, e.g. security.protocol=SASL_SSL "
        "(repeatable)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="do not draw the progress bar on stderr"
    )
    parser.set_defaults(run=_run_backfill)


def key_values(option: str, items: Sequence[str]) -> dict[str, str]:
    pairs = [item.partition("=") for item in items]
    for item, (key, sep, _value) in zip(items, pairs, strict=True):
        if not key or not sep:
            raise ConfigError(option, item, "expected KEY=VALUE", f"e.g. {option} client.id=me")
    return {key: value for key, _, value in pairs}


# What the Spark library calls a setting, as this command's flag.
_BACKFILL_FLAGS = {
    "bootstrap": "--bootstrap",
    "group_id": "--group",
    "topics": "--topics",
    "handler": "--handler",
    "output": "--output",
    "handler/output": "--handler/--output",
    "chunk": "--chunk",
    "tasks": "--tasks",
    "timeout": "--timeout",
    "kafka_config": "--kafka-config",
    "starts": "--from",
    "ends": "--to",
}


def _run_backfill(args: argparse.Namespace) -> int:
    require_extra("spark", "pyspark", "pyarrow", "confluent_kafka")
    from fairstream.spark import BackfillJob, run_backfill
    from fairstream.spark.planning import parse_bounds

    with contextlib.ExitStack() as stack:
        progress = None if args.no_progress else stack.enter_context(_task_bar(args.group))
        try:
            job = BackfillJob(
                bootstrap=args.bootstrap or "",
                group_id=args.group,
                topics=tuple(t.strip() for t in args.topics.split(",") if t.strip()),
                handler=args.handler,
                output=args.output,
                master=args.master,
                chunk=args.chunk,
                tasks=args.tasks,
                commit=not args.no_commit,
                starts=tuple(parse_bounds("--from", args.starts)),
                ends=tuple(parse_bounds("--to", args.ends)),
                kafka_config=key_values("--kafka-config", args.kafka_config),
                timeout=args.timeout,
                progress=progress,
            )
            result = run_backfill(job)
        except ConfigError as exc:
            flag = _BACKFILL_FLAGS.get(exc.field, exc.field)
            raise ConfigError(flag, exc.value, exc.problem, exc.hint) from None
    committed = f"committed {len(result.commits)} partition(s)" if job.commit else "not committed"
    print(
        f"backfilled {result.records} records of group {job.group_id!r} in {result.tasks} "
        f"task(s) in {result.seconds:.1f} s; {committed}"
    )
    return 0


@contextlib.contextmanager
def _task_bar(what: str) -> Iterator[Callable[[int, int], None]]:
    """A rich bar on stderr, drawn from the first report of the job's finished tasks."""
    bar = Progress(
        TextColumn("backfill {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tasks"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    row = bar.add_task(what, total=None)

    def report(finished: int, tasks: int) -> None:
        bar.start()  # idempotent; not before the job is planned and running
        bar.update(row, completed=finished, total=tasks)

    try:
        yield report
    finally:
        bar.stop()
