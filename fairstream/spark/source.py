"""The PySpark data source ``fairstream``: Kafka offset ranges as a DataFrame.

Spark's own Kafka connector is a JVM package users would have to fetch from Maven;
this source needs only confluent-kafka on the executors. Each Spark task reads the
chunks of one planned task: it ``assign()``\\ s a partition at the chunk's first
offset, reads up to (not including) the chunk's end, and yields Arrow record
batches. There is no group membership and nothing is committed here; the driver
commits once the whole job succeeded.

>>> spark.read.format("fairstream").option("bootstrap", "kafka:9092").option(
...     "tasks", '[[["orders", 0, 0, 1000]], [["orders", 1, 0, 1000]]]').load()  # doctest: +SKIP

Options: ``bootstrap`` (required), ``tasks`` (required, JSON: a list of tasks, each
a list of ``[topic, partition, start, end]``), ``stall_timeout`` (seconds without
progress before a range fails, default 30), ``batch_size`` (rows per Arrow batch,
default 10000), ``kafka.<key>`` for any librdkafka consumer setting (security,
SASL, fetch sizes), and ``handler`` (set by :func:`handle_chunks`).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from fairstream.errors import BrokerError, ConfigError
from fairstream.spark._extra import missing_extra
from fairstream.spark.cluster import kafka_logger
from fairstream.spark.handlers import Handler, decode_handler, encode_handler, handle_batches
from fairstream.spark.planning import Chunk

try:
    import pyarrow as pa
    from confluent_kafka import (
        TIMESTAMP_NOT_AVAILABLE,
        Consumer,
        KafkaError,
        KafkaException,
        Message,
        TopicPartition,
    )
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = [
    "ARROW_SCHEMA",
    "COUNT_SCHEMA",
    "SCHEMA",
    "FairstreamDataSource",
    "ReadSettings",
    "handle_chunks",
    "read_chunks",
    "settings_from_options",
]

SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField(
            "headers",
            ArrayType(
                StructType(
                    [StructField("key", StringType(), False), StructField("value", BinaryType())]
                ),
                containsNull=False,
            ),
            True,
        ),
    ]
)
"""The DataFrame's columns: Spark's own Kafka source has the same names and types."""

_HEADER = pa.struct([pa.field("key", pa.string(), False), pa.field("value", pa.binary())])
ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), False),
        pa.field("partition", pa.int32(), False),
        pa.field("offset", pa.int64(), False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.field("element", _HEADER, False))),
    ]
)
""":data:`SCHEMA` in Arrow; Spark rejects batches whose schema differs in any way."""

COUNT_SCHEMA = StructType([StructField("records", LongType(), False)])
"""The DataFrame of :func:`handle_chunks`: records handled per batch."""

_READER_GROUP = "fairstream-spark-reader"
"""librdkafka wants a group.id even for assign(); this one never joins or commits."""

_RECEIVE_LIMIT = 1_000_000_000
"""The largest broker answer a reader takes (librdkafka's ``receive.message.max.bytes``,
10x its default). Kafka keeps a fetch answer within ``fetch.max.bytes`` (50 MB), but a
broker that ignores fetch size limits (the embedded noida) answers with a partition's
whole backlog: 110 MB for 1M records of 100 bytes, which librdkafka's default refuses
on every try. ``kafka.receive.message.max.bytes`` sets another limit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadSettings:
    """How an executor reads: where, how patiently, in what batch size."""

    bootstrap: str
    stall_timeout: float = 30.0
    batch_size: int = 10_000
    kafka_config: Mapping[str, str] = field(default_factory=dict)

    def consumer_config(self, errors: deque[KafkaError]) -> dict[str, Any]:
        return {
            "receive.message.max.bytes": _RECEIVE_LIMIT,
            # Keep 1,000 records prefetched, not librdkafka's 100,000: below that it
            # fetches on and on, and at a chunk's end a broker that answers an empty
            # fetch at once (noida: thousands a second) spent a core serving them,
            # which the handlers lost (benchmarks/RESULTS.md, scale-out: two workers
            # ran slower than one; 1.67-1.75x with this).
            "queued.min.messages": 1000,
            # Above it, look again after 0.1 s, not librdkafka's 1 s: a reader that
            # just took its records must not wait out the rest of a second.
            "fetch.queue.backoff.ms": 100,
            **self.kafka_config,
            "bootstrap.servers": self.bootstrap,
            "group.id": _READER_GROUP,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # EOF events tell a range that ends at the log end it is done, even when
            # the last offsets are transaction markers that are never delivered.
            "enable.partition.eof": True,
            # Seeking below the log start must fail, not silently jump elsewhere.
            "auto.offset.reset": "error",
            "error_cb": errors.append,
            "logger": kafka_logger,
        }


class TaskPartition(InputPartition):
    """One Spark input partition: the chunks one task reads, in order."""

    def __init__(self, index: int, chunks: Sequence[Chunk]) -> None:
        super().__init__(index)
        self.chunks = tuple(chunks)


class _Reader(DataSourceReader):
    def __init__(
        self, settings: ReadSettings, tasks: Sequence[Sequence[Chunk]], handler: str | None
    ) -> None:
        self.settings = settings
        self.tasks = tasks
        self.handler = handler

    def partitions(self) -> list[TaskPartition]:
        return [TaskPartition(i, chunks) for i, chunks in enumerate(self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batches = read_task(self.settings, cast(TaskPartition, partition).chunks)
        if self.handler is None:
            return batches
        return handle_batches(decode_handler(self.handler))(batches)


class FairstreamDataSource(DataSource):
    """``spark.read.format("fairstream")``: read planned Kafka offset ranges; with
    ``spark.readStream`` a streaming source (:mod:`fairstream.spark.stream`).

    With a ``handler`` option (see :func:`handle_chunks`) the executors pass every
    record to the handler and the DataFrame holds only per-batch ``records`` counts.
    """

    @classmethod
    def name(cls) -> str:
        return "fairstream"

    def schema(self) -> StructType:
        return COUNT_SCHEMA if "handler" in self.options else SCHEMA

    def reader(self, schema: StructType) -> _Reader:
        options: Mapping[str, str] = self.options
        return _Reader(
            settings_from_options(options),
            _tasks_from_json(options.get("tasks")),
            options.get("handler"),
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("fairstream")``: see :mod:`fairstream.spark.stream`."""
        from fairstream.spark.stream import StreamOptions, StreamReader  # needs this module

        return StreamReader(StreamOptions.parse(self.options))


def settings_from_options(options: Mapping[str, str]) -> ReadSettings:
    bootstrap = options.get("bootstrap")
    if not bootstrap:
        raise ConfigError(
            "bootstrap",
            bootstrap,
            "the fairstream source needs brokers",
            "e.g. .option('bootstrap', 'host:9092')",
        )
    stall_timeout = _number(options, "stall_timeout", 30.0)
    batch_size = int(_number(options, "batch_size", 10_000))
    kafka = {k.removeprefix("kafka."): v for k, v in options.items() if k.startswith("kafka.")}
    return ReadSettings(
        bootstrap=bootstrap, stall_timeout=stall_timeout, batch_size=batch_size, kafka_config=kafka
    )


def _number(options: Mapping[str, str], key: str, default: float) -> float:
    text = options.get(key)
    try:
        value = default if text is None else float(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(
            key, text, "not a positive number", f"e.g. .option({key!r}, '{default:g}')"
        )
    return value


def _tasks_from_json(text: str | None) -> list[list[Chunk]]:
    try:
        tasks = json.loads(text or "")
        return [
            [Chunk(topic=t, partition=p, start=s, end=e) for t, p, s, e in task] for task in tasks
        ]
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            "tasks",
            (text or "")[:60],
            f"not a JSON list of tasks of [topic, partition, start, end] ({exc})",
            "build it with fairstream.spark.read_chunks",
        ) from exc


def tasks_to_json(tasks: Sequence[Sequence[Chunk]]) -> str:
    """The ``tasks`` option for these planned tasks."""
    return json.dumps([[[c.topic, c.partition, c.start, c.end] for c in task] for task in tasks])


def read_chunks(
    spark: SparkSession, tasks: Sequence[Sequence[Chunk]], settings: ReadSettings
) -> DataFrame:
    """The records of the planned tasks (see :func:`.planning.place_chunks`), one Spark
    task per planned task, with the columns of :data:`SCHEMA`."""
    return _load(spark, tasks, settings, {})


def handle_chunks(
    spark: SparkSession, tasks: Sequence[Sequence[Chunk]], settings: ReadSettings, handler: Handler
) -> DataFrame:
    """Like :func:`read_chunks`, but the executors call ``handler`` on every record.

    The handler runs inside the source's read, so records go from the Kafka client
    to the handler without a round trip through the JVM. The DataFrame has one
    ``records`` count per Arrow batch; collecting it runs the job.
    """
    return _load(spark, tasks, settings, {"handler": encode_handler(handler)})


def _load(
    spark: SparkSession,
    tasks: Sequence[Sequence[Chunk]],
    settings: ReadSettings,
    extra: Mapping[str, str],
) -> DataFrame:
    spark.dataSource.register(FairstreamDataSource)
    options = {
        "bootstrap": settings.bootstrap,
        "tasks": tasks_to_json(tasks),
        "stall_timeout": str(settings.stall_timeout),
        "batch_size": str(settings.batch_size),
        **{f"kafka.{key}": value for key, value in settings.kafka_config.items()},
        **extra,
    }
    return spark.read.format(FairstreamDataSource.name()).options(**options).load()


def read_task(settings: ReadSettings, chunks: Sequence[Chunk]) -> Iterator[pa.RecordBatch]:
    """Read the chunks one after another with one consumer, yielding Arrow batches.

    :raises BrokerError: a chunk made no progress for ``stall_timeout`` seconds
        (broker down, records missing) or the consumer reported a fatal error.
    """
    errors: deque[KafkaError] = deque(maxlen=8)  # the latest client errors, for messages
    try:
        consumer = Consumer(settings.consumer_config(errors))
    except KafkaException as exc:
        raise BrokerError(
            f"cannot create a Kafka consumer: {exc}; check the kafka.* options",
            bootstrap=settings.bootstrap,
        ) from exc
    try:
        for chunk in chunks:
            yield from _read_chunk(consumer, chunk, settings, errors)
    finally:
        consumer.close()


def _read_chunk(
    consumer: Consumer, chunk: Chunk, settings: ReadSettings, errors: deque[KafkaError]
) -> Iterator[pa.RecordBatch]:
    consumer.assign([TopicPartition(chunk.topic, chunk.partition, chunk.start)])
    columns = _Columns(chunk)
    position = chunk.start
    deadline = time.monotonic() + settings.stall_timeout
    while position < chunk.end:
        before = position
        # consume() returns early only once it has as many messages as asked for, so
        # never ask for more than the chunk still holds: the last call would idle.
        wanted = min(settings.batch_size, chunk.end - position)
        for message in consumer.consume(wanted, timeout=0.5):
            position = _take(message, chunk, position, columns, settings)
            if position >= chunk.end:
                break
        if len(columns) >= settings.batch_size:
            yield columns.flush()
        if position > before:
            deadline = time.monotonic() + settings.stall_timeout
        elif too_large := _answer_too_large(errors, settings):
            raise too_large
        elif time.monotonic() > deadline:
            raise _stalled(chunk, position, settings, errors)
    if len(columns):
        yield columns.flush()


def _take(
    message: Message, chunk: Chunk, position: int, columns: _Columns, settings: ReadSettings
) -> int:
    """Add one message to the batch if it belongs to the chunk; the new read position."""
    error = message.error()
    offset = cast(int, message.offset())  # set on records and on end-of-partition events
    if error is not None:
        if error.code() == KafkaError._PARTITION_EOF:
            # The log ends here: offsets up to this point that were not delivered
            # (transaction markers, compaction) will never come.
            return chunk.end if offset >= chunk.end else position
        if message.topic() is None:
            # A client-level event (a coordinator lookup failed, say), not about this
            # range: librdkafka retries it, and the stall timeout names it if it lasts.
            return position
        raise BrokerError(
            f"reading {chunk.topic}[{chunk.partition}] at offset {position} failed: {error.str()}; "
            "check that the range still exists (retention) and the reader may fetch it",
            bootstrap=settings.bootstrap,
            retriable=error.retriable(),
        )
    if offset >= chunk.end:
        return chunk.end
    columns.add(offset, message)
    return offset + 1


def _answer_too_large(errors: Sequence[KafkaError], settings: ReadSettings) -> BrokerError | None:
    """The error for a fetch answer above the reader's limit, if librdkafka reported one.

    It would come again on every try (librdkafka drops the connection and fetches the
    same offsets), so the read fails at once instead of after the stall timeout.
    """
    for error in errors:
        if error.code() == KafkaError._BAD_MSG and "receive.message.max.bytes" in error.str():
            return BrokerError(
                f"the broker's answer to a fetch is larger than the reader takes "
                f"({error.str()}); raise the option kafka.receive.message.max.bytes "
                f"(default {_RECEIVE_LIMIT}), or lower kafka.fetch.max.bytes on a broker "
                "that keeps to it",
                bootstrap=settings.bootstrap,
            )
    return None


def _stalled(
    chunk: Chunk, position: int, settings: ReadSettings, errors: Sequence[KafkaError]
) -> BrokerError:
    cause = f"; last client error: {errors[-1].str()}" if errors else ""
    return BrokerError(
        f"no progress reading {chunk.topic}[{chunk.partition}] at offset {position} of "
        f"[{chunk.start}, {chunk.end}) for {settings.stall_timeout:g} s{cause}; check that the "
        "broker is reachable from the executors and the offsets exist",
        bootstrap=settings.bootstrap,
        retriable=True,
    )


class _Columns:
    """Column lists for the next Arrow batch of one chunk."""

    def __init__(self, chunk: Chunk) -> None:
        self.chunk = chunk
        self.clear()

    def clear(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, offset: int, message: Message) -> None:
        kind, millis = message.timestamp()
        self.offsets.append(offset)
        self.timestamps.append(None if kind == TIMESTAMP_NOT_AVAILABLE else millis * 1000)
        self.keys.append(message.key())
        self.values.append(message.value())
        # Without deserializers confluent-kafka hands out header lists, not dicts.
        self.headers.append(cast(list[tuple[str, bytes | None]] | None, message.headers()))

    def flush(self) -> pa.RecordBatch:
        rows = len(self.offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([self.chunk.topic] * rows, pa.string()),
                pa.array([self.chunk.partition] * rows, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, ARROW_SCHEMA.field("timestamp").type),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.headers, ARROW_SCHEMA.field("headers").type),
            ],
            schema=ARROW_SCHEMA,
        )
        self.clear()
        return batch
