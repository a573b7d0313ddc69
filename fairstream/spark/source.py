"""The PySpark data source ``fairstream``: Kafka offset ranges as a DataFrame.

Spark's own Kafka connector is a JVM package users would have to fetch from Maven;
this source needs only confluent-kafka on the executors. Each Spark task reads the
chunks of one planned task (:mod:`.reading`): a consumer ``assign()``\\ ed to each
chunk's partition reads from its first offset up to (not including) its end, and
the task yields Arrow record batches. There is no group membership and nothing is
committed here; the driver commits once the whole job succeeded.

>>> spark.read.format("fairstream").option("kafka.bootstrap.servers", "kafka:9092").option(
...     "tasks", '[[["orders", 0, 0, 1000]], [["orders", 1, 0, 1000]]]').load()  # doctest: +SKIP

Options: ``kafka.bootstrap.servers`` (required; ``bootstrap`` too), ``tasks``
(required, JSON: a list of tasks, each a list of ``[topic, partition, start, end]``),
``stall_timeout`` (seconds without progress before a range fails, default 30),
``batch_size`` (rows per Arrow batch, default 10000), ``kafka.<key>`` for any
librdkafka consumer setting (security, SASL, fetch sizes), and ``handler`` (set by
:func:`handle_chunks`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from fairstream.errors import ConfigError
from fairstream.spark._extra import missing_extra
from fairstream.spark.columns import COUNT_SCHEMA, SCHEMA, TaskPartition, kafka_schema, select
from fairstream.spark.handlers import Handler, decode_handler, encode_handler, handle_batches
from fairstream.spark.planning import Chunk
from fairstream.spark.reading import ReadSettings, read_task
from fairstream.spark.streamoptions import BatchOptions, StreamOptions, positive_number

if TYPE_CHECKING:
    from fairstream.spark.sink import SinkOptions

try:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
        InputPartition,
    )
    from pyspark.sql.types import StructType
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = [
    "FairstreamDataSource",
    "handle_chunks",
    "read_chunks",
    "register",
    "settings_from_options",
]


class _Reader(DataSourceReader):
    def __init__(
        self,
        settings: ReadSettings,
        tasks: Sequence[Sequence[Chunk]],
        handler: str | None,
        schema: StructType,
    ) -> None:
        self.settings = settings
        self.tasks = tasks
        self.handler = handler
        self.schema = schema

    def partitions(self) -> list[TaskPartition]:
        """One partition per planned task, and one without chunks for a read of no
        records: PySpark replaces an empty list by a bare ``InputPartition(None)``,
        which :meth:`read` could not read."""
        tasks = self.tasks or [[]]
        return [TaskPartition(i, chunks) for i, chunks in enumerate(tasks)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batches = read_task(self.settings, cast(TaskPartition, partition).chunks)
        if self.handler is None:
            return select(batches, self.schema)
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
        """Handled counts with a ``handler``; a backfill's columns for its ``tasks``;
        else, for Spark's options, Spark's Kafka source columns."""
        if "handler" in self.options:
            return COUNT_SCHEMA
        if "tasks" in self.options:
            return SCHEMA
        return kafka_schema(str(self.options.get("includeHeaders", "")).lower() == "true")

    def reader(self, schema: StructType) -> _Reader:
        options: Mapping[str, str] = self.options
        if "tasks" not in options:  # Spark's options: plan the read here, on the driver
            from fairstream.spark.batchread import plan_read

            batch = BatchOptions.parse(options)
            return _Reader(batch.read, plan_read(batch), None, schema)
        return _Reader(
            settings_from_options(options),
            _tasks_from_json(options.get("tasks")),
            options.get("handler"),
            schema,
        )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """``df.write.format("fairstream").mode("append")``: see :mod:`.sink`."""
        from fairstream.spark.sink import KafkaWriter

        return KafkaWriter(_sink_options(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``df.writeStream.format("fairstream")``: see :mod:`.sink`."""
        from fairstream.spark.sink import KafkaStreamWriter

        return KafkaStreamWriter(_sink_options(self.options, schema, overwrite))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("fairstream")``: see :mod:`fairstream.spark.stream`."""
        from fairstream.spark.stream import RefusedReader, StreamReader

        try:
            return StreamReader(StreamOptions.parse(self.options))
        except ConfigError as error:
            return RefusedReader(error)


def register(spark: SparkSession) -> None:
    """Register the ``fairstream`` format (batch and streaming) with ``spark``.

    Rarely needed: PySpark finds it by itself where fairstream is installed
    (``pyspark_fairstream``). Registering again is harmless: the same class replaces
    itself.
    """
    spark.dataSource.register(FairstreamDataSource)


def _sink_options(options: Mapping[str, str], schema: StructType, overwrite: bool) -> SinkOptions:
    from fairstream.spark.sink import SinkOptions

    if overwrite:
        raise ConfigError(
            "mode", "overwrite", "a Kafka topic is append-only", "use .mode('append')"
        )
    parsed = SinkOptions.parse(options)
    parsed.check(schema)
    return parsed


def settings_from_options(options: Mapping[str, str]) -> ReadSettings:
    """The executors' read settings from the batch source's options."""
    bootstrap = options.get("bootstrap") or options.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ConfigError(
            "kafka.bootstrap.servers",
            None,
            "the fairstream source needs brokers",
            "e.g. .option('kafka.bootstrap.servers', 'host:9092')",
        )
    kafka = {
        k.removeprefix("kafka."): v
        for k, v in options.items()
        if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
    }
    return ReadSettings(
        bootstrap=bootstrap,
        stall_timeout=positive_number(options, "stall_timeout", 30.0),
        batch_size=int(positive_number(options, "batch_size", 10_000)),
        kafka_config=kafka,
    )


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
    register(spark)
    options = {
        "bootstrap": settings.bootstrap,
        "tasks": tasks_to_json(tasks),
        "stall_timeout": str(settings.stall_timeout),
        "batch_size": str(settings.batch_size),
        **{f"kafka.{key}": value for key, value in settings.kafka_config.items()},
        **extra,
    }
    return spark.read.format(FairstreamDataSource.name()).options(**options).load()
