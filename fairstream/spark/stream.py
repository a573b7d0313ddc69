"""``spark.readStream.format("fairstream")``: Kafka as a Structured Streaming source.

The reader runs in Spark's Python streaming-source process on the driver: it asks
the brokers for watermarks (confluent-kafka, no JVM Kafka jars), admits a budget of
records per micro-batch fairly (:mod:`.streamplan`), places the batch's ranges on
Spark tasks with the lag planner, and commits the group's offsets after Spark has
committed a batch. The executors read with the batch source's
:func:`~fairstream.spark.reading.read_task`.

>>> fairstream.spark.register(spark)  # doctest: +SKIP
>>> (spark.readStream.format("fairstream").option("bootstrap", "kafka:9092")
...  .option("topics", "clicks").option("group_id", "clicks-pipeline")
...  .option("maxRecordsPerBatch", 50000).load())  # doctest: +SKIP

Options (names are case-insensitive, as all Spark options): ``bootstrap``,
``topics`` (comma-separated) and ``group_id`` (required); ``startingOffsets``
(``committed``, the default, falling back to the log start; ``earliest``;
``latest``; or JSON ``{"topic": {"0": 42}}`` with -2/-1 for earliest/latest);
``maxRecordsPerBatch``; ``admission`` (``fair`` | ``proportional``);
``parallelCatchUp``, ``catchUpThreshold``, ``catchUpShare``; ``commitToGroup``
(default true); ``maxTasks`` (Spark tasks per batch, default 8); the batch
source's ``stall_timeout``, ``batch_size``, ``handler`` and ``kafka.<key>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import structlog

from fairstream.errors import ConfigError
from fairstream.spark._extra import missing_extra
from fairstream.spark.cluster import commit, read_states
from fairstream.spark.handlers import decode_handler, handle_batches
from fairstream.spark.planning import Chunk, PartitionState
from fairstream.spark.reading import ReadSettings, read_task
from fairstream.spark.source import FairstreamDataSource, TaskPartition, settings_from_options
from fairstream.spark.streamplan import (
    Admission,
    Position,
    StreamOffset,
    TopicPartition,
    admit,
    batch_ranges,
    group_commits,
    hold_new_reads,
    plan_tasks,
)

try:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = ["StreamOptions", "StreamReader", "log_ends", "register"]

log = structlog.get_logger(__name__)

_NAMES = (
    *("bootstrap", "topics", "group_id", "startingOffsets", "maxRecordsPerBatch", "admission"),
    *("parallelCatchUp", "catchUpThreshold", "catchUpShare", "commitToGroup", "maxTasks"),
    *("stall_timeout", "batch_size", "handler"),
)
_OPTIONS = frozenset(name.lower() for name in [*_NAMES, "path"])
"""Spark hands options over lower-cased; ``path`` is what ``load(path)`` sets."""


def register(spark: SparkSession) -> None:
    """Register the ``fairstream`` format (batch and streaming) with ``spark``.

    Registering again is harmless: the same class replaces itself.
    """
    spark.dataSource.register(FairstreamDataSource)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamOptions:
    """The streaming source's options, checked once on the driver."""

    read: ReadSettings
    topics: tuple[str, ...]
    group_id: str
    starting: str = "committed"
    max_records: int | None = None
    admission: Admission = field(default_factory=Admission)
    commit_to_group: bool = True
    max_tasks: int = 8
    handler: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        """:raises ConfigError: an unknown option or a bad value, naming the option."""
        for key in options:
            if key.lower() not in _OPTIONS and not key.lower().startswith("kafka."):
                raise ConfigError(
                    key, options[key], "unknown option of the fairstream source", _options_hint()
                )
        topics = tuple(t.strip() for t in (options.get("topics") or "").split(",") if t.strip())
        if not topics:
            raise ConfigError("topics", options.get("topics"), "no topics", "e.g. 'clicks,views'")
        group_id = options.get("group_id")
        if not group_id:
            raise ConfigError("group_id", group_id, "the source needs a group", "e.g. 'pipeline'")
        return cls(
            read=settings_from_options(options),
            topics=topics,
            group_id=group_id,
            starting=options.get("startingOffsets") or "committed",
            max_records=_optional_int(options, "maxRecordsPerBatch"),
            admission=Admission(
                mode=cast(Any, options.get("admission") or "fair"),
                parallel_catch_up=_flag(options, "parallelCatchUp", False),
                threshold=_optional_int(options, "catchUpThreshold") or 100_000,
                share=float(options.get("catchUpShare") or 0.5),
            ),
            commit_to_group=_flag(options, "commitToGroup", True),
            max_tasks=_optional_int(options, "maxTasks") or 8,
            handler=options.get("handler"),
        )


def _options_hint() -> str:
    return "known: " + ", ".join(_NAMES) + ", kafka.<key>"


def _optional_int(options: Mapping[str, str], key: str) -> int | None:
    text = options.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(key, text, "not a positive integer", f"e.g. .option({key!r}, 10000)")
    return value


def _flag(options: Mapping[str, str], key: str, default: bool) -> bool:
    text = options.get(key)
    if text is None:
        return default
    if str(text).lower() not in ("true", "false"):
        raise ConfigError(key, text, "not a boolean", f".option({key!r}, 'true') or 'false'")
    return str(text).lower() == "true"


def log_ends(reported: Mapping[str, Any] | None) -> dict[TopicPartition, int]:
    """Parse :meth:`StreamReader.reportLatestOffset` back (empty for anything else)."""
    ends = (reported or {}).get("log_ends")
    if not isinstance(ends, dict):
        return {}
    return {
        (key.rpartition("/")[0], int(key.rpartition("/")[2])): int(v) for key, v in ends.items()
    }


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader Spark drives: offsets, admission, tasks, group commits.

    Spark builds one in its streaming-source process and others to pickle for the
    executors' :meth:`read`, so the constructor does no I/O.
    """

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._target: dict[TopicPartition, int] | None = None
        self._committed: StreamOffset | None = None
        self._log_starts: dict[TopicPartition, int] | None = None
        self._log_ends: dict[str, int] | None = None
        self._read_last: frozenset[TopicPartition] = frozenset()
        """The partitions the last planned batch read or started readers for."""
        self._warm: list[Chunk] = []
        """Ranges held back for the next batch; this one starts their readers
        (:func:`hold_new_reads`)."""

    def _states(self) -> list[PartitionState]:
        o = self.options
        kafka = o.read.kafka_config
        return read_states(o.read.bootstrap, o.group_id, o.topics, kafka_config=kafka, quiet=True)

    def initialOffset(self) -> dict[str, Any]:
        states = self._states()
        positions = {
            (s.topic, s.partition): _starting_position(self.options.starting, s) for s in states
        }
        log.info("stream_started", group_id=self.options.group_id, partitions=len(positions))
        return StreamOffset(self.options.group_id, positions).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {(s.topic, s.partition): s.log_end for s in self._states()}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self._parse(start)
        states = self._states()
        self._commit(begin, states)
        self._log_starts = {(s.topic, s.partition): s.log_start for s in states}
        self._log_ends = {f"{s.topic}/{s.partition}": s.log_end for s in states}
        logs = {}
        for s in states:
            tp = (s.topic, s.partition)
            if self._target is not None:
                if tp not in self._target:
                    continue  # AvailableNow: a partition created after the start is not read
                logs[tp] = (s.log_start, min(s.log_end, self._target[tp]))
            else:
                logs[tp] = (s.log_start, s.log_end)
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = admit(begin.positions, logs, rows, self.options.admission)
        end, self._warm = hold_new_reads(begin.positions, end, self._read_last)
        if all(begin.positions.get(tp) == pos for tp, pos in end.items()):
            return start  # Spark's "no new data": the same offset back
        return StreamOffset(self.options.group_id, end).to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The log ends seen by the last :meth:`latestOffset` (``"topic/partition"``
        keys), for the query's progress: :func:`log_ends` reads them back for lag."""
        return None if self._log_ends is None else {"log_ends": self._log_ends}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if self._log_starts is None:  # a batch rerun after a restart: no latestOffset yet
            self._log_starts = {(s.topic, s.partition): s.log_start for s in self._states()}
        begin, done = self._parse(start).positions, self._parse(end).positions
        chunks = batch_ranges(begin, done, self._log_starts)
        tasks = plan_tasks(chunks, self.options.max_tasks)
        warm, self._warm = self._warm, []
        # As many tasks as the batch that reads the held ranges will have, so that
        # each of its workers has started a reader (tasks without chunks only do that).
        spread = len(plan_tasks([*chunks, *warm], self.options.max_tasks))
        tasks += [[] for _ in range(spread - len(tasks))]
        self._read_last = frozenset((c.topic, c.partition) for c in [*chunks, *warm])
        return [TaskPartition(i, task, warm) for i, task in enumerate(tasks)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task = cast(TaskPartition, partition)
        batches = read_task(self.options.read, task.chunks, warm=task.warm)
        if self.options.handler is None:
            return batches
        return handle_batches(decode_handler(self.options.handler))(batches)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished every batch up to ``end``: commit the group's offsets.

        Usually a no-op: Spark calls this only while building the *next* batch, after
        :meth:`latestOffset` got ``end`` as its start and committed it already.
        """
        self._commit(self._parse(end))

    def _commit(self, done: StreamOffset, states: Sequence[PartitionState] | None = None) -> None:
        """Commit what Spark finished to the group (offset ``next``, catch-up ranges as
        metadata). ``latestOffset``'s start is always finished: Spark asks for a new
        batch only after the previous one is in its commit log, and on a restart it
        reruns an unfinished batch before asking. Committing there, not only in
        :meth:`commit`, is what lets the last batch of ``Trigger.AvailableNow`` reach
        the group, since Spark commits a source only when it builds another batch.
        """
        if not self.options.commit_to_group or done == self._committed:
            return
        o = self.options
        states = self._states() if states is None else states
        committed = {(s.topic, s.partition): (s.committed, s.metadata) for s in states}
        commits = group_commits(done.positions, committed)
        kafka = o.read.kafka_config
        commit(o.read.bootstrap, o.group_id, commits, kafka_config=kafka, job="stream")
        self._committed = done

    def _parse(self, offset: Mapping[str, Any]) -> StreamOffset:
        parsed = StreamOffset.from_json(offset)
        topics = {topic for topic, _ in parsed.positions}
        if parsed.group != self.options.group_id or not topics <= set(self.options.topics):
            raise ConfigError(
                "checkpointLocation",
                f"group {parsed.group!r}, topics {','.join(sorted(topics))}",
                "the checkpoint belongs to another query (another group or topics)",
                "use a new checkpoint directory, or the query's own group_id and topics",
            )
        return parsed


def _starting_position(starting: str, state: PartitionState) -> Position:
    if starting == "committed":
        if state.committed is None:
            return Position(state.log_start)
        return Position(state.committed, tuple(state.shadow))
    if starting in ("earliest", "latest"):
        return Position(state.log_start if starting == "earliest" else state.log_end)
    try:
        offset = int(json.loads(starting)[state.topic][str(state.partition)])
    except (ValueError, KeyError, TypeError):
        offset = -2
        if not starting.lstrip().startswith("{"):
            raise ConfigError(
                "startingOffsets",
                starting,
                "expected committed, earliest, latest or JSON",
                'e.g. {"clicks": {"0": 42, "1": -2}}',
            ) from None
    return Position({-2: state.log_start, -1: state.log_end}.get(offset, offset))
