"""The ``fairstream`` command: parse arguments, call the library, print.

Each subcommand has an ``_add_<name>`` that declares its options and a
``_run_<name>`` that does the work. A :class:`FairstreamError` becomes one line on
stderr and exit status 2; anything else keeps its traceback, because it is a bug.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from fairstream.errors import ConfigError, FairstreamError

__all__ = ["main"]

Runner = Callable[[argparse.Namespace], int]


def _bootstrap_default() -> str | None:
    return os.environ.get("FAIRSTREAM_BOOTSTRAP") or None


# --- broker -------------------------------------------------------------------------


def _add_broker(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "broker",
        help="run an embedded Kafka-protocol broker on 127.0.0.1 until interrupted",
        description=(
            "Start a real Kafka-protocol broker from a PyPI wheel on 127.0.0.1, wait until "
            "it answers a metadata request, print 'bootstrap=127.0.0.1:PORT', and stop it "
            "(removing its data directory) on SIGINT or SIGTERM."
        ),
    )
    parser.add_argument(
        "--engine",
        choices=["noida", "tansu"],
        default="noida",
        help="broker engine: noida (default; keeps commit metadata, restartable) or tansu "
        "(evicts dead members after the session timeout)",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="TCP port to listen on (default: a free port)"
    )
    parser.set_defaults(run=_run_broker)


def _run_broker(args: argparse.Namespace) -> int:
    from fairstream.testing import EmbeddedBroker

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with EmbeddedBroker(args.engine, port=args.port) as broker:
        print(f"bootstrap={broker.bootstrap}", flush=True)
        stop.wait()
    return 0


# --- backfill -----------------------------------------------------------------------

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


def _add_backfill(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    parser.add_argument(
        "--bootstrap",
        default=_bootstrap_default(),
        help="Kafka bootstrap servers, HOST:PORT[,...] (default: $FAIRSTREAM_BOOTSTRAP)",
    )
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


def _key_values(option: str, items: Sequence[str]) -> dict[str, str]:
    pairs = [item.partition("=") for item in items]
    for item, (key, sep, _value) in zip(items, pairs, strict=True):
        if not key or not sep:
            raise ConfigError(option, item, "expected KEY=VALUE", f"e.g. {option} client.id=me")
    return {key: value for key, _, value in pairs}


def _run_backfill(args: argparse.Namespace) -> int:
    from fairstream.spark import BackfillJob, run_backfill
    from fairstream.spark.planning import parse_bounds

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
        kafka_config=_key_values("--kafka-config", args.kafka_config),
        timeout=args.timeout,
        progress=not args.no_progress,
    )
    result = run_backfill(job)
    committed = f"committed {len(result.commits)} partition(s)" if job.commit else "not committed"
    print(
        f"backfilled {result.records} records of group {job.group_id!r} in {result.tasks} "
        f"task(s) in {result.seconds:.1f} s; {committed}"
    )
    return 0


# --- entry point --------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairstream",
        description="Fair, rebalance-friendly Kafka consumers: tools for planning, running "
        "and testing fairstream apps.",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        help="log level for fairstream's own events on stderr (default: WARNING)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_broker(commands)
    _add_backfill(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from fairstream import logs

    logs.configure(getattr(args, "log_format", "auto"), args.log_level)
    run: Runner = args.run
    try:
        return run(args)
    except FairstreamError as exc:
        print(f"fairstream {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
