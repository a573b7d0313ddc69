"""The backfill driver: plan, run one Spark job, then commit - or commit nothing.

:func:`run_backfill` reads the group's partition states, plans chunks and tasks
(:mod:`fairstream.spark.planning`), runs a single Spark job that either calls the
user's handler in the executors or writes Parquet, and only when that job
succeeded commits the end offsets with the remaining shadow ranges as metadata.
A failed job raises :class:`~fairstream.errors.BackfillError` and commits nothing,
so running the same command again redoes the whole backfill (at-least-once).

:func:`submit_shadow_backfill` is the runtime's way in: it backfills one open
KIP-333 shadow range and returns, committing nothing, because the running app
owns the group's commits.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import structlog

from fairstream.errors import BackfillError, ConfigError
from fairstream.ranges import OffsetRange
from fairstream.spark._extra import missing_extra
from fairstream.spark.cluster import commit, read_states
from fairstream.spark.handlers import Handler, load_handler
from fairstream.spark.planning import (
    Bound,
    Chunk,
    PartitionCommit,
    PartitionState,
    place_chunks,
    plan_commits,
    plan_ranges,
    split_ranges,
)
from fairstream.spark.reading import ReadSettings
from fairstream.spark.source import handle_chunks, read_chunks

try:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = [
    "BackfillJob",
    "BackfillResult",
    "Progress",
    "build_session",
    "run_backfill",
    "spark_cause",
    "submit_shadow_backfill",
]

log = structlog.get_logger(__name__)

Progress = Callable[[int, int], None]
"""Called with ``(finished_tasks, tasks)`` about twice a second while a job runs.

The library only counts; drawing is the caller's (``fairstream backfill`` draws a
rich bar on stderr), so a notebook or a scheduler can report progress its own way.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillJob:
    """What to backfill and where the records go: a ``handler`` or an ``output`` directory.

    ``handler`` is a ``module:func`` reference or the function itself; ``output`` a
    directory or URI for Parquet files; ``master`` as in :func:`build_session`.
    ``starts``/``ends`` are explicit ``--from``/``--to`` bounds; ``tasks`` defaults
    to Spark's default parallelism; ``kafka_config`` goes to every Kafka client
    (driver and executors), e.g. ``security.protocol``; ``timeout`` is how long the
    driver waits for the cluster and an executor waits for progress on a range
    before the job fails. ``progress`` hears how many of the job's tasks finished.

    :raises ConfigError: on construction, when a field is out of range or neither
        or both of ``handler`` and ``output`` are given.
    """

    bootstrap: str
    group_id: str
    topics: tuple[str, ...]
    handler: str | Handler | None = None
    output: str | None = None
    master: str | None = None
    chunk: int = 100_000
    tasks: int | None = None
    commit: bool = True
    starts: tuple[Bound, ...] = ()
    ends: tuple[Bound, ...] = ()
    kafka_config: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 30.0
    progress: Progress | None = None

    def __post_init__(self) -> None:
        if not self.bootstrap:
            raise ConfigError(
                "bootstrap",
                self.bootstrap,
                "no brokers given",
                "give HOST:PORT[,HOST:PORT...] or set FAIRSTREAM_BOOTSTRAP",
            )
        if not self.group_id:
            raise ConfigError("group_id", self.group_id, "a group id is required", "name the group")
        if not self.topics or not all(self.topics):
            raise ConfigError("topics", ",".join(self.topics), "no topic given", "e.g. t1,t2")
        if (self.handler is None) == (self.output is None):
            raise ConfigError(
                "handler/output",
                self.handler or self.output,
                "give exactly one of them",
                "a handler runs code, an output directory gets Parquet files",
            )
        if self.chunk < 1:
            raise ConfigError("chunk", self.chunk, "must be at least 1", "use e.g. 100000")
        if self.tasks is not None and self.tasks < 1:
            raise ConfigError("tasks", self.tasks, "must be at least 1", "or leave it out")
        if self.timeout <= 0:
            raise ConfigError("timeout", self.timeout, "must be positive", "e.g. 30")


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillResult:
    """What a finished backfill did: records, tasks, ranges read, offsets committed."""

    group_id: str
    records: int
    tasks: int
    ranges: tuple[Chunk, ...]
    commits: tuple[PartitionCommit, ...]
    seconds: float


def build_session(master: str | None = None, app_name: str = "fairstream-backfill") -> SparkSession:
    """The active Spark session, or a new one on ``master``, set up for backfills.

    Under spark-submit the master and the executors' Python come from spark-submit
    (``master`` still wins when given). Otherwise ``master`` defaults to
    ``local[*]``, executors run the interpreter that runs the driver
    (``PYSPARK_PYTHON``), and a local master binds to 127.0.0.1 (``SPARK_LOCAL_IP``);
    environment variables that are already set are left alone.
    """
    # PySpark's own test for "the JVM was started by spark-submit" (java_gateway.py).
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        master = master or "local[*]"
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        builder.config("spark.ui.showConsoleProgress", "false")
        # Parquet readers other than Spark (pyarrow, DuckDB) expect INT64 micros, not INT96.
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_backfill(job: BackfillJob, *, spark: SparkSession | None = None) -> BackfillResult:
    """Run ``job`` to the end: plan, one Spark job, then commit unless ``job.commit`` is off.

    :raises ConfigError: bad bounds, handler or output directory (before any work).
    :raises BrokerError: the cluster cannot be read.
    :raises BackfillError: the Spark job failed; nothing was committed.
    :raises CommitError: the job succeeded but the commit was refused.
    """
    began = time.monotonic()
    sink = _sink(job)
    states = read_states(
        job.bootstrap, job.group_id, job.topics, kafka_config=job.kafka_config, timeout=job.timeout
    )
    return _execute(job, sink, states, spark, began)


def submit_shadow_backfill(
    *,
    bootstrap: str,
    group_id: str,
    topic: str,
    partition: int,
    shadow: OffsetRange,
    handler: str | Handler,
    master: str | None = None,
    chunk: int = 100_000,
    kafka_config: Mapping[str, str] | None = None,
) -> BackfillResult:
    """Backfill one open KIP-333 shadow range on Spark instead of the in-process shadow task.

    For the runtime: when a shadow range is larger than its threshold it calls this
    (blocking; from async code via ``anyio.to_thread.run_sync``) with the app's
    handler, as a ``module:func`` reference or the function itself. Nothing is committed here,
    since the app owns the group's commits: on return the runtime drops ``shadow``
    from its open ranges (``result.ranges`` is what was read; offsets below the
    log start were deleted by retention and count as done) and commits as usual.
    On :class:`~fairstream.errors.BackfillError` the range stays open and the
    runtime falls back to its shadow task.

    >>> result = await anyio.to_thread.run_sync(lambda: submit_shadow_backfill(
    ...     bootstrap="kafka:9092", group_id="billing", topic="orders", partition=3,
    ...     shadow=OffsetRange(70, 2_000_000), handler="billing.handlers:on_order",
    ... ))  # doctest: +SKIP
    """
    job = BackfillJob(
        bootstrap=bootstrap,
        group_id=group_id,
        topics=(topic,),
        handler=handler,
        master=master,
        chunk=chunk,
        commit=False,
        starts=(Bound(topic=topic, partition=partition, offset=shadow.start),),
        ends=(Bound(topic=topic, partition=partition, offset=shadow.end),),
        kafka_config=dict(kafka_config or {}),
    )
    began = time.monotonic()
    sink = _sink(job)
    states = read_states(
        bootstrap, group_id, (topic,), kafka_config=job.kafka_config, timeout=job.timeout
    )
    return _execute(job, sink, [s for s in states if s.partition == partition], None, began)


def _sink(job: BackfillJob) -> Handler | str:
    """The loaded handler, or the output directory checked to be new."""
    if job.handler is not None:
        return load_handler(job.handler) if isinstance(job.handler, str) else job.handler
    output = job.output or ""  # __post_init__ saw exactly one of output and handler
    if "://" not in output and _non_empty_dir(output):
        raise ConfigError("output", output, "exists and is not empty", "choose a new directory")
    return output


def _execute(
    job: BackfillJob,
    sink: Handler | str,
    states: list[PartitionState],
    spark: SparkSession | None,
    began: float,
) -> BackfillResult:
    ranges = plan_ranges(states, starts=job.starts, ends=job.ends)
    commits = plan_commits(states, ranges) if job.commit else []
    if not ranges:
        log.info("backfill_nothing_to_do", group_id=job.group_id)
        return _finish(job, 0, 0, ranges, commits, began)
    spark = spark or build_session(job.master)
    tasks = place_chunks(split_ranges(ranges, job.chunk), job.tasks or _slots(spark))
    planned = sum(len(r) for r in ranges)
    log.info(
        "backfill_planned",
        group_id=job.group_id,
        partitions=len({(r.topic, r.partition) for r in ranges}),
        offsets=planned,
        tasks=len(tasks),
        largest_task=max(sum(len(c) for c in task) for task in tasks),
    )
    settings = ReadSettings(
        bootstrap=job.bootstrap, stall_timeout=job.timeout, kafka_config=job.kafka_config
    )
    label = f"fairstream-backfill-{uuid.uuid4().hex[:12]}"
    spark.sparkContext.setJobGroup(label, f"backfill of group {job.group_id}")
    try:
        with _progress(spark, label, len(tasks), job.progress):
            if isinstance(sink, str):
                read_chunks(spark, tasks, settings).write.mode("errorifexists").parquet(sink)
                records = spark.read.parquet(sink).count()
            else:
                rows = handle_chunks(spark, tasks, settings, sink).collect()
                records = sum(int(row["records"]) for row in rows)
    except (PySparkException, Py4JError) as exc:
        raise BackfillError(
            f"backfill of group {job.group_id!r} failed: {spark_cause(exc)}; nothing was "
            "committed, fix the cause and run the same command again"
        ) from exc
    finally:
        # PySpark has no clearJobGroup(); a Java null removes the property.
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    commit(job.bootstrap, job.group_id, commits, kafka_config=job.kafka_config)
    return _finish(job, records, len(tasks), ranges, commits, began)


def _finish(
    job: BackfillJob,
    records: int,
    tasks: int,
    ranges: list[Chunk],
    commits: list[PartitionCommit],
    began: float,
) -> BackfillResult:
    result = BackfillResult(
        group_id=job.group_id,
        records=records,
        tasks=tasks,
        ranges=tuple(ranges),
        commits=tuple(commits),
        seconds=time.monotonic() - began,
    )
    log.info(
        "backfill_done",
        group_id=job.group_id,
        records=records,
        tasks=tasks,
        committed=len(commits),
        seconds=round(result.seconds, 3),
    )
    return result


def _slots(spark: SparkSession) -> int:
    parallelism: int = spark.sparkContext.defaultParallelism
    return max(1, parallelism)


def _non_empty_dir(path: str) -> bool:
    return os.path.isfile(path) or (os.path.isdir(path) and bool(os.listdir(path)))


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b.*")


def spark_cause(exc: Exception) -> str:
    """The innermost Python exception line of a Spark failure, without the JVM trace."""
    text = str(exc).split("JVM stacktrace:")[0]
    lines = [line.strip() for line in text.splitlines() if _EXCEPTION_LINE.match(line.strip())]
    return lines[-1] if lines else (text.strip().splitlines() or [type(exc).__name__])[0]


@contextmanager
def _progress(
    spark: SparkSession, label: str, tasks: int, report: Progress | None
) -> Iterator[None]:
    """Report the job's finished tasks, polled from Spark's status tracker."""
    if report is None:
        yield
        return
    tracker = spark.sparkContext.statusTracker()
    done = threading.Event()

    def poll() -> None:
        while not done.wait(0.5):
            finished = 0
            for job_id in tracker.getJobIdsForGroup(label):
                info = tracker.getJobInfo(job_id)
                for stage_id in info.stageIds if info else ():
                    stage = tracker.getStageInfo(stage_id)
                    finished += stage.numCompletedTasks if stage else 0
            report(min(finished, tasks), tasks)

    poller = threading.Thread(target=poll, name="fairstream-backfill-progress", daemon=True)
    poller.start()
    try:
        yield
    finally:
        done.set()
        poller.join()
    report(tasks, tasks)
