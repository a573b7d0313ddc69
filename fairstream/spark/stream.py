"""``spark.readStream.format("fairstream")``: Kafka as a Structured Streaming source.

The reader runs in Spark's Python streaming-source process on the driver: it asks
the brokers for watermarks (confluent-kafka, no JVM Kafka jars), admits a budget of
records per micro-batch fairly (:mod:`.streamplan`), places the batch's ranges on
Spark tasks with the lag planner, and commits the group's offsets after Spark has
committed a batch. The executors read with the batch source's
:func:`~fairstream.spark.reading.read_task`.

>>> (spark.readStream.format("fairstream")
...  .option("kafka.bootstrap.servers", "kafka:9092").option("subscribe", "clicks")
...  .option("kafka.group.id", "clicks-pipeline")
...  .option("maxOffsetsPerTrigger", 50000).load())  # doctest: +SKIP

Options (names are case-insensitive, as all Spark options) are Spark's Kafka
source's where it has one (:mod:`.streamoptions`): ``kafka.bootstrap.servers``,
``subscribe`` (comma-separated) and ``kafka.group.id`` (required: the group this
source commits to); ``startingOffsets`` (``committed``, the default, falling back to
the log start; ``earliest``; ``latest``; or JSON ``{"topic": {"0": 42}}`` naming
every partition, with -2/-1 for earliest/latest); ``maxOffsetsPerTrigger``;
fairstream's ``admission`` (``fair`` | ``proportional``), ``parallelCatchUp``,
``catchUpThreshold``, ``catchUpShare``, ``commitToGroup`` (default true) and
``maxTasks`` (Spark tasks per batch, default 8); the batch source's
``stall_timeout`` (or Spark's ``kafkaConsumer.pollTimeoutMs``, in ms), ``batch_size``,
``handler`` and ``kafka.<key>``; Spark's ``fetchOffset.numRetries`` and
``fetchOffset.retryIntervalMs`` for the driver's offset reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn, cast

import structlog

from fairstream.errors import ConfigError, DataLossError
from fairstream.spark._extra import missing_extra
from fairstream.spark.cluster import GroupClient
from fairstream.spark.columns import TaskPartition, kafka_schema, select
from fairstream.spark.handlers import decode_handler, handle_batches
from fairstream.spark.planning import Chunk, PartitionState
from fairstream.spark.reading import read_task
from fairstream.spark.streamoptions import StreamOptions
from fairstream.spark.streamplan import (
    Position,
    StreamOffset,
    TopicPartition,
    admit,
    available,
    batch_ranges,
    group_commits,
    hold_new_reads,
    losses,
    plan_tasks,
)

try:
    import pyarrow as pa
    from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = ["RefusedReader", "StreamOptions", "StreamReader", "log_ends"]

log = structlog.get_logger(__name__)


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
        self._last_batch = time.monotonic()
        """When the last batch was planned (the reader's start before the first)."""
        self._group: GroupClient | None = None
        """The driver's group client, kept between triggers (never pickled)."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_group": None}  # Spark pickles readers for executors

    def _client(self) -> GroupClient:
        if self._group is None:
            o = self.options
            self._group = GroupClient(
                o.read.bootstrap, o.group_id, o.read.kafka_config, o.offset_retry
            )
        return self._group

    def _states(self) -> list[PartitionState]:
        return self.options.subscription.states(self._client())

    def stop(self) -> None:
        if self._group is not None:
            self._group.close()
            self._group = None

    def initialOffset(self) -> dict[str, Any]:
        states = self._states()
        positions = self.options.starting.positions(states, self._client().offsets_for_times)
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
        positions = self._after_losses(begin, logs)
        if self._waits_for_more(positions, logs):
            return start
        end = admit(positions, logs, rows, self.options.admission)
        if rows is not None:  # ReadAllAvailable (Trigger.Once) must read all of it now
            end, self._warm = hold_new_reads(begin.positions, end, self._read_last)
        if all(begin.positions.get(tp) == pos for tp, pos in end.items()):
            return start  # Spark's "no new data": the same offset back
        self._last_batch = time.monotonic()
        return StreamOffset(self.options.group_id, end).to_json()

    def _waits_for_more(
        self, positions: Mapping[TopicPartition, Position], logs: Mapping[TopicPartition, Any]
    ) -> bool:
        """Spark's ``minOffsetsPerTrigger``: fewer records than that are available and
        ``maxTriggerDelay`` has not passed since the last batch. Never under
        ``Trigger.AvailableNow``, which would then wait for ever."""
        least = self.options.min_records
        if least is None or self._target is not None:
            return False
        if time.monotonic() - self._last_batch >= self.options.max_trigger_delay:
            return False
        return available(positions, logs) < least

    def _after_losses(
        self, begin: StreamOffset, logs: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, Position]:
        """``begin``'s positions, failing on owed records the logs lost (Spark's
        ``failOnDataLoss``), or going on without them with a ``records_lost`` warning.

        :raises DataLossError: records were lost and ``failOnDataLoss`` is true.
        """
        positions = dict(begin.positions)
        for loss in losses(positions, logs):
            if self.options.fail_on_data_loss:
                raise DataLossError(topic=loss.topic, partition=loss.partition, lost=loss.lost)
            log.warning(
                "records_lost",
                group_id=self.options.group_id,
                topic=loss.topic,
                partition=loss.partition,
                lost=loss.lost,
            )
            if loss.restart is not None:
                positions[loss.topic, loss.partition] = loss.restart
        return positions

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The log ends seen by the last :meth:`latestOffset` (``"topic/partition"``
        keys), for the query's progress: :func:`log_ends` reads them back for lag."""
        return None if self._log_ends is None else {"log_ends": self._log_ends}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if self._log_starts is None:  # a batch rerun after a restart: no latestOffset yet
            self._log_starts = {(s.topic, s.partition): s.log_start for s in self._states()}
        begin, done = self._parse(start).positions, self._parse(end).positions
        chunks = batch_ranges(begin, done, self._log_starts)
        tasks = plan_tasks(chunks, self.options.max_tasks, self.options.min_tasks)
        warm, self._warm = self._warm, []
        # As many tasks as the batch that reads the held ranges will have, so that
        # each of its workers has started a reader (tasks without chunks only do that).
        spread = len(plan_tasks([*chunks, *warm], self.options.max_tasks, self.options.min_tasks))
        tasks += [[] for _ in range(spread - len(tasks))]
        self._read_last = frozenset((c.topic, c.partition) for c in [*chunks, *warm])
        return [TaskPartition(i, task, warm) for i, task in enumerate(tasks)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task = cast(TaskPartition, partition)
        batches = read_task(self.options.read, task.chunks, warm=task.warm)
        if self.options.handler is None:
            return select(batches, kafka_schema(self.options.include_headers))
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
        states = self._states() if states is None else states
        committed = {(s.topic, s.partition): (s.committed, s.metadata) for s in states}
        self._client().commit(group_commits(done.positions, committed), "stream")
        self._committed = done

    def _parse(self, offset: Mapping[str, Any]) -> StreamOffset:
        parsed = StreamOffset.from_json(offset)
        topics = {topic for topic, _ in parsed.positions}
        covered = all(self.options.subscription.covers(topic) for topic in topics)
        if parsed.group != self.options.group_id or not covered:
            raise ConfigError(
                "checkpointLocation",
                f"group {parsed.group!r}, topics {','.join(sorted(topics))}",
                "the checkpoint belongs to another query (another group or topics)",
                "use a new checkpoint directory, or the query's own group_id and topics",
            )
        return parsed


class RefusedReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The reader for options the source refuses: it raises their error when called.

    PySpark's streaming-source runner stops its reader in a ``finally`` whether or not
    it was made, so an error raised while making one reaches the user as
    ``UnboundLocalError: cannot access local variable 'reader'``, the real one lost in
    the chain. Made without error, this reader lets Spark's first call report the
    :class:`ConfigError` itself.
    """

    def __init__(self, error: ConfigError) -> None:
        self.error = error

    def _refuse(self) -> NoReturn:
        raise self.error

    def initialOffset(self) -> dict[str, Any]:
        self._refuse()

    def prepareForTriggerAvailableNow(self) -> None:
        self._refuse()

    def getDefaultReadLimit(self) -> ReadLimit:
        self._refuse()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._refuse()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._refuse()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        self._refuse()

    def commit(self, end: dict[str, Any]) -> None:
        self._refuse()
