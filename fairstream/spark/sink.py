"""``df.write.format("fairstream")`` and ``writeStream``: a Kafka sink without JVM jars.

Read -> transform -> write to Kafka is the most common pipeline, and Spark's own sink
needs its JVM Kafka package from Maven. This one takes the same DataFrame shape and
options as Spark's Kafka sink (``value`` required; ``key``, ``topic``, ``partition``,
``headers`` optional; the ``topic`` option overrides a ``topic`` column;
``kafka.bootstrap.servers`` and any ``kafka.<librdkafka key>``) and writes through
confluent-kafka with idempotence and ``acks=all``.

Delivery is at-least-once, as Spark's sink: each task flushes its producer and checks
every delivery report before it reports success, so a record that could not be written
fails the task (Spark retries it, and a retried task may write a record twice); no
record is dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from fairstream.errors import BrokerError, ConfigError
from fairstream.spark._extra import missing_extra
from fairstream.spark.cluster import kafka_logger
from fairstream.spark.streamoptions import read_settings

try:
    import pyarrow as pa
    from confluent_kafka import KafkaError, KafkaException, Message, Producer
    from pyspark.sql.datasource import (
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DataType,
        IntegerType,
        StringType,
        StructType,
    )
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = ["Delivered", "KafkaStreamWriter", "KafkaWriter", "SinkOptions", "produce_batches"]

log = structlog.get_logger(__name__)

_RESERVED = {
    "kafka.key.serializer": "keys are written as bytes: a string key is UTF-8 encoded",
    "kafka.value.serializer": "values are written as bytes: a string value is UTF-8 encoded",
}
"""``kafka.*`` keys Spark's Kafka sink refuses, and why this one does too."""

_OWN = frozenset({"topic", "path", "checkpointlocation"})

_FLUSH_SECONDS = 300.0
"""How long a task waits for its last deliveries; librdkafka's own
``message.timeout.ms`` (default 300 s) fails each record well before."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkOptions:
    """The sink's options, by the names of Spark's Kafka sink."""

    bootstrap: str
    topic: str | None = None
    kafka_config: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """:raises ConfigError: a missing, unknown or reserved option, naming it."""
        given = {key.lower(): str(value) for key, value in options.items()}
        for key, value in given.items():
            if key in _RESERVED:
                raise ConfigError(
                    key, value, "not supported by the fairstream sink", _RESERVED[key]
                )
            if key not in _OWN and not key.startswith("kafka."):
                raise ConfigError(
                    key,
                    value,
                    "unknown option of the fairstream sink",
                    "known: kafka.bootstrap.servers, topic, kafka.<key>",
                )
        read = read_settings(given)  # the brokers and kafka.* settings, as the source's
        return cls(
            bootstrap=read.bootstrap,
            topic=given.get("topic") or None,
            kafka_config=read.kafka_config,
        )

    def check(self, schema: StructType) -> None:
        """Refuse a DataFrame Spark's Kafka sink would refuse, naming the column.

        :raises ConfigError: no ``value``, no topic, or a column of the wrong type.
        """
        columns = {f.name.lower(): f.dataType for f in schema.fields}
        if "value" not in columns:
            raise ConfigError("value", None, "the sink needs a value column", _SHAPE)
        if self.topic is None and "topic" not in columns:
            raise ConfigError(
                "topic", None, "no topic column and no topic option", ".option('topic', 'out')"
            )
        header = StructType().add("key", StringType()).add("value", BinaryType())
        wanted: dict[str, tuple[DataType, ...]] = {
            "value": (BinaryType(), StringType()),
            "key": (BinaryType(), StringType()),
            "topic": (StringType(),),
            "partition": (IntegerType(),),
            "headers": (ArrayType(header, True), ArrayType(header, False)),
        }
        for name, types in wanted.items():
            if name in columns and not any(_same(columns[name], t) for t in types):
                raise ConfigError(
                    name, columns[name].simpleString(), "the column has the wrong type", _SHAPE
                )

    def producer_config(self) -> dict[str, Any]:
        return {
            # Larger batches than librdkafka's defaults: a task hands over rows as fast
            # as it can, and fewer, fuller requests cost the brokers less.
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            **self.kafka_config,
            "bootstrap.servers": self.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "logger": kafka_logger,
        }


_SHAPE = (
    "the shape of Spark's Kafka sink: value binary|string; key binary|string, topic string, "
    "partition int, headers array<struct<key:string,value:binary>> optional"
)


def _same(given: DataType, wanted: DataType) -> bool:
    """Types equal apart from nullability, which Spark's sink does not ask for."""
    if isinstance(given, ArrayType) and isinstance(wanted, ArrayType):
        return _same(given.elementType, wanted.elementType)
    if isinstance(given, StructType) and isinstance(wanted, StructType):
        return [(f.name, f.dataType) for f in given.fields] == [
            (f.name, f.dataType) for f in wanted.fields
        ]
    return given == wanted


class _Deliveries:
    """Counts delivery reports; keeps the first failure to name it."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first: KafkaError | None = None

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.delivered += 1
            return
        self.failed += 1
        self.first = self.first or error


def produce_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Write every row of ``batches`` and wait for each delivery; the rows written.

    :raises BrokerError: a record was not delivered (or not reported in time): the
        task must fail so that Spark retries it.
    """
    try:
        producer = Producer(options.producer_config())
    except KafkaException as exc:
        raise ConfigError("kafka.*", dict(options.kafka_config), str(exc), "fix it") from exc
    report = _Deliveries()
    sent = 0
    for batch in batches:
        for topic, partition, key, value, headers in _rows(batch, options.topic):
            while True:
                try:
                    producer.produce(
                        topic,
                        value=value,
                        key=key,
                        partition=partition,
                        headers=headers,
                        on_delivery=report,
                    )
                    break
                except BufferError:  # librdkafka's queue is full: let deliveries drain
                    producer.poll(0.1)
                except KafkaException as exc:  # refused before sending: no such partition
                    producer.flush(_FLUSH_SECONDS)
                    raise BrokerError(
                        f"a record for {topic} partition {partition} was not written to Kafka "
                        f"({exc.args[0].str()}); the task fails so Spark retries it",
                        bootstrap=options.bootstrap,
                    ) from None
            sent += 1
        producer.poll(0)
    left = producer.flush(_FLUSH_SECONDS)
    if report.failed or left:
        raise BrokerError(
            f"{report.failed + left} of {sent} records were not written to Kafka "
            f"({report.first or 'no delivery report in time'}); the task fails so Spark "
            "retries it",
            bootstrap=options.bootstrap,
        )
    return sent


def _rows(
    batch: pa.RecordBatch, topic: str | None
) -> Iterator[tuple[str, int, Any, Any, list[tuple[str, str | bytes | None]] | None]]:
    names = {name.lower(): name for name in batch.schema.names}
    rows = batch.num_rows

    def column(name: str) -> list[Any]:
        return batch.column(names[name]).to_pylist() if name in names else [None] * rows

    topics = [topic] * rows if topic is not None else column("topic")
    partitions = [-1 if p is None else p for p in column("partition")]  # -1: the partitioner's
    headers = [
        None if hs is None else [(h["key"], h["value"]) for h in hs] for hs in column("headers")
    ]
    if None in topics:
        raise ConfigError("topic", None, "a row has no topic", "set the topic option or column")
    return zip(topics, partitions, column("key"), column("value"), headers, strict=True)


class Delivered(WriterCommitMessage):
    """What one task wrote: its rows, all acknowledged by the brokers."""

    def __init__(self, records: int) -> None:
        self.records = records


class KafkaWriter(DataSourceArrowWriter):
    """``df.write.format("fairstream").mode("append")``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Delivered:
        return Delivered(produce_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        records = sum(m.records for m in messages if isinstance(m, Delivered))
        log.info("sink_written", records=records, tasks=len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        records = sum(m.records for m in messages if isinstance(m, Delivered))
        log.warning("sink_aborted", records_written=records, tasks=len(messages))


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("fairstream")``: each micro-batch's tasks as above."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Delivered:
        return Delivered(produce_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records = sum(m.records for m in messages if isinstance(m, Delivered))
        log.info("sink_written", batch=batchId, records=records)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records = sum(m.records for m in messages if isinstance(m, Delivered))
        log.warning("sink_aborted", batch=batchId, records_written=records)
