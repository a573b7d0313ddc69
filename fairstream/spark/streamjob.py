"""The streaming driver: one Structured Streaming query from a group's topics to a sink.

:func:`run_stream` is what ``fairstream stream`` runs, for users who do not write
Spark code: it reads with the ``fairstream`` streaming source
(:mod:`fairstream.spark.stream`) and either writes Parquet (exactly once: Spark's
file sink and checkpoint agree on which batches are written) or calls a handler
in the executors (at least once: a batch cut short by a failure is read again
from the checkpoint). After each batch the group's offsets are committed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from fairstream.errors import ConfigError, StreamError
from fairstream.spark._extra import missing_extra
from fairstream.spark.backfill import build_session, spark_cause
from fairstream.spark.handlers import Handler, encode_handler, load_handler
from fairstream.spark.listener import GroupCommitter
from fairstream.spark.source import register
from fairstream.spark.stream import log_ends
from fairstream.spark.streamplan import StreamOffset, lag_by_topic

try:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = ["BatchProgress", "StreamJob", "run_stream"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchProgress:
    """One finished micro-batch: its id, records, and what each topic still owes."""

    batch: int
    records: int
    lag: Mapping[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamJob:
    """A streaming query: where to read, where results go, how often to trigger.

    ``topics`` (Spark's ``subscribe``) or ``topic_pattern`` (``subscribePattern``: a
    regular expression, topics created while the query runs are read from the next
    batch) names what to read. ``trigger`` is ``"available-now"`` (drain what exists,
    then stop) or seconds between micro-batches. ``options`` are extra source options
    (``maxOffsetsPerTrigger``, ``admission``, ``parallelCatchUp`` ...).
    """

    bootstrap: str
    group_id: str
    topics: tuple[str, ...]
    checkpoint: str
    topic_pattern: str | None = None
    handler: Handler | str | None = None
    """A function, or ``module:func`` to import (see :func:`.handlers.load_handler`)."""
    output: str | None = None
    master: str | None = None
    trigger: str = "available-now"
    options: Mapping[str, str] = field(default_factory=dict)
    kafka_config: Mapping[str, str] = field(default_factory=dict)
    progress: Callable[[BatchProgress], None] | None = None

    def __post_init__(self) -> None:
        if bool(self.topics) == (self.topic_pattern is not None):
            raise ConfigError("topics/pattern", None, "give exactly one", "topics or a pattern")
        if (self.handler is None) == (self.output is None):
            raise ConfigError("handler/output", None, "give exactly one", "a handler or a path")
        if not self.checkpoint:
            raise ConfigError("checkpoint", None, "a query needs a checkpoint", "a directory")
        if self.trigger != "available-now":
            try:
                seconds = float(self.trigger)
            except ValueError:
                seconds = 0
            if seconds <= 0:
                raise ConfigError(
                    "trigger", self.trigger, "not available-now or positive seconds", "e.g. 5"
                )


def run_stream(job: StreamJob, *, spark: SparkSession | None = None) -> int:
    """Run the query until it stops (``available-now``) or is interrupted; the records read.

    :raises ConfigError: a bad option, handler or topic, before or while starting.
    :raises StreamError: the query failed; finished batches stay committed and the
        checkpoint resumes the rest on the next run.
    """
    handler = job.handler
    if isinstance(handler, str):
        handler = load_handler(handler)
    spark = spark or build_session(job.master, app_name=f"fairstream-stream-{job.group_id}")
    register(spark)
    options = {
        **job.options,
        "kafka.bootstrap.servers": job.bootstrap,
        **(
            {"subscribe": ",".join(job.topics)}
            if job.topic_pattern is None
            else {"subscribePattern": job.topic_pattern}
        ),
        "kafka.group.id": job.group_id,
        **{f"kafka.{k}": v for k, v in job.kafka_config.items()},
        **({} if handler is None else {"handler": encode_handler(handler)}),
    }
    stream = spark.readStream.format("fairstream").options(**options).load()
    counts: dict[int, int] = {}

    def count(batch: DataFrame, batch_id: int) -> None:
        total = batch.agg(F.sum("records")).collect()[0][0]
        counts[batch_id] = int(total or 0)

    writer = stream.writeStream.option("checkpointLocation", job.checkpoint)
    if job.trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{float(job.trigger)} seconds")
    committer = GroupCommitter(options)
    spark.streams.addListener(committer)
    try:
        if job.output is not None:
            query = writer.format("parquet").start(job.output)
        else:
            query = writer.foreachBatch(count).start()
        records = _watch(query, job, counts)
        last = query.lastProgress
        for source in last.sources if last is not None else ():
            committer.commit_finished(source.endOffset)  # the last batch, now
    except (PySparkException, Py4JError) as exc:
        raise _failed(job, exc) from exc
    finally:
        spark.streams.removeListener(committer)
    log.info("stream_stopped", group_id=job.group_id, records=records)
    return records


def _watch(query: Any, job: StreamJob, counts: Mapping[int, int]) -> int:
    """Wait for the query, reporting each finished batch; stop it on Ctrl-C."""
    reported = -1
    records = 0
    try:
        while True:
            stopped = query.awaitTermination(1)
            for progress in query.recentProgress:
                batch = int(progress["batchId"])
                if batch <= reported or not progress["sources"]:
                    continue
                reported = batch
                rows = counts.get(batch, int(progress["numInputRows"]))
                records += rows
                if job.progress is not None:
                    job.progress(BatchProgress(batch=batch, records=rows, lag=_lag(progress)))
            if stopped:
                return records
    except KeyboardInterrupt:
        query.stop()
        return records


def _lag(progress: Mapping[str, Any]) -> dict[str, int]:
    source = progress["sources"][0]
    try:
        end = source["endOffset"]
        latest = source.get("latestOffset")
        done = StreamOffset.from_json(json.loads(end) if isinstance(end, str) else end)
        ends = log_ends(json.loads(latest) if isinstance(latest, str) else latest)
    except (ConfigError, ValueError, TypeError, KeyError):
        return {}
    return lag_by_topic(done.positions, ends)


def _failed(job: StreamJob, exc: Exception) -> StreamError:
    return StreamError(
        f"streaming query of group {job.group_id!r} failed: {spark_cause(exc)}; finished "
        "batches are committed, fix the cause and run again with the same checkpoint"
    )
