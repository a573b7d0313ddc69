"""What the batch and the streaming reader share: the columns they give Spark and the
input partitions they plan.

Both readers (:mod:`.source`, :mod:`.stream`) fill the same Arrow columns
(:data:`.reading.ARROW_SCHEMA`) and select the ones their DataFrame has. Kept apart
from either so that neither imports the other for them: :mod:`.source` makes a
:mod:`.stream` reader, and a module of its own lets that import go one way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from fairstream.spark._extra import missing_extra
from fairstream.spark.planning import Chunk

try:
    import pyarrow as pa
    from pyspark.sql.datasource import InputPartition
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

__all__ = ["COUNT_SCHEMA", "SCHEMA", "TaskPartition", "kafka_schema", "select"]

_HEADERS = StructField(
    "headers",
    ArrayType(
        StructType([StructField("key", StringType(), False), StructField("value", BinaryType())]),
        containsNull=False,
    ),
    True,
)
_FIELDS = {
    field.name: field
    for field in (
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
        _HEADERS,
    )
}

SCHEMA = StructType(
    [_FIELDS[name] for name in ("topic", "partition", "offset", "timestamp", "key", "value")]
    + [_HEADERS]
)
"""A backfill's columns (the ``tasks`` form, and its Parquet files), as documented."""


def kafka_schema(include_headers: bool) -> StructType:
    """The columns of Spark's own Kafka source, in its order; ``headers`` only when
    asked for (its ``includeHeaders`` option)."""
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    return StructType([_FIELDS[name] for name in names] + ([_HEADERS] if include_headers else []))


COUNT_SCHEMA = StructType([StructField("records", LongType(), False)])
"""The DataFrame of a read with a handler: records handled per batch."""


def select(batches: Iterator[pa.RecordBatch], schema: StructType) -> Iterator[pa.RecordBatch]:
    """The readers' batches with the columns of ``schema``, in its order (no copy)."""
    names = schema.fieldNames()
    return (batch.select(names) for batch in batches)


class TaskPartition(InputPartition):
    """One Spark input partition: the chunks one task reads, in order, and the chunks
    whose readers it starts, at their first offsets, for the next batch to read
    (``warm``; see :func:`.streamplan.hold_new_reads`)."""

    def __init__(self, index: int, chunks: Sequence[Chunk], warm: Sequence[Chunk] = ()) -> None:
        super().__init__(index)
        self.chunks = tuple(chunks)
        self.warm = tuple(warm)
