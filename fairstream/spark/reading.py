"""Reading Kafka offset ranges on an executor: a chunk at a time into Arrow batches.

Each chunk is read by a consumer ``assign()``\\ ed to its partition (never a group
member, nothing committed), from the chunk's first offset up to, not including, its
end. Consumers are kept between tasks in the worker (:mod:`._readers`), so the next
chunk of a partition finds its records already fetched.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from fairstream.errors import BrokerError
from fairstream.spark._extra import missing_extra
from fairstream.spark._readers import POOL, Reader
from fairstream.spark.cluster import kafka_logger
from fairstream.spark.planning import Chunk

try:
    import pyarrow as pa
    from confluent_kafka import (
        TIMESTAMP_NOT_AVAILABLE,
        Consumer,
        KafkaError,
        KafkaException,
        Message,
    )
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = ["ARROW_SCHEMA", "ReadSettings", "read_task"]

_HEADER = pa.struct([pa.field("key", pa.string(), False), pa.field("value", pa.binary())])
ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), False),
        pa.field("partition", pa.int32(), False),
        pa.field("offset", pa.int64(), False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.field("element", _HEADER, False))),
    ]
)
"""Every column a reader fills, in Arrow. Spark rejects batches whose schema differs from
the DataFrame's in any way, so each source selects its own columns from these
(:data:`.columns.SCHEMA` for backfills, :func:`.columns.kafka_schema` for Spark's
options)."""

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

    @property
    def client(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What makes two consumers interchangeable: brokers and client options."""
        return self.bootstrap, tuple(sorted(self.kafka_config.items()))

    def consumer(self, errors: deque[KafkaError]) -> Consumer:
        """A new consumer; its errors go to ``errors``."""
        try:
            return Consumer(self._consumer_config(errors))
        except KafkaException as exc:
            raise BrokerError(
                f"cannot create a Kafka consumer: {exc}; check the kafka.* options",
                bootstrap=self.bootstrap,
            ) from exc

    def _consumer_config(self, errors: deque[KafkaError]) -> dict[str, Any]:
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


def read_task(
    settings: ReadSettings, chunks: Sequence[Chunk], warm: Sequence[Chunk] = ()
) -> Iterator[pa.RecordBatch]:
    """Read the chunks one after another, yielding Arrow batches.

    Each chunk takes a consumer from the worker's pool (:mod:`._readers`) and gives it
    back once read; a read that fails or is abandoned closes its consumer. First, the
    pool gets a reader fetching from each of ``warm``'s starts, for a task to come.

    :raises BrokerError: a chunk made no progress for ``stall_timeout`` seconds
        (broker down, records missing) or the consumer reported a fatal error.
    """
    for chunk in warm:
        POOL.warm(settings.client, chunk, settings.consumer)
    for chunk in chunks:
        reader = POOL.take(settings.client, chunk, settings.consumer)
        try:
            yield from _read_chunk(reader, chunk, settings)
        except BaseException:
            reader.consumer.close()
            raise
        POOL.release(reader)


def _read_chunk(reader: Reader, chunk: Chunk, settings: ReadSettings) -> Iterator[pa.RecordBatch]:
    """Read ``chunk`` with a reader at or below its start (it drops what lies below)."""
    columns = _Columns(chunk)
    position = chunk.start
    deadline = time.monotonic() + settings.stall_timeout
    while position < chunk.end:
        before = reader.position
        # consume() returns early only once it has as many messages as asked for, so
        # never ask for more than the chunk still holds: the last call would idle.
        wanted = min(settings.batch_size, chunk.end - reader.position)
        for message in reader.consumer.consume(wanted, timeout=0.5):
            position = _take(message, chunk, position, columns, settings)
            if message.topic() is not None:  # a record or an end-of-partition event
                reader.position = _next_offset(message)
            if position >= chunk.end:
                break
        if len(columns) >= settings.batch_size:
            yield columns.flush()
        if reader.position > before:
            deadline = time.monotonic() + settings.stall_timeout
        elif too_large := _answer_too_large(reader.errors, settings):
            raise too_large
        elif time.monotonic() > deadline:
            raise _stalled(chunk, position, settings, reader.errors)
    if len(columns):
        yield columns.flush()


def _next_offset(message: Message) -> int:
    """The offset a consumer delivers after ``message``: past a record, or the log end
    an end-of-partition event reports."""
    offset = cast(int, message.offset())
    return offset if message.error() is not None else offset + 1


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
    if offset < chunk.start:
        return position  # below the chunk: a kept reader skipping to its start
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
        self.kinds: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, offset: int, message: Message) -> None:
        kind, millis = message.timestamp()
        self.offsets.append(offset)
        self.timestamps.append(None if kind == TIMESTAMP_NOT_AVAILABLE else millis * 1000)
        self.kinds.append(kind - 1)  # Kafka's TimestampType ids: -1 none, 0 create, 1 append
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
                pa.array(self.kinds, pa.int32()),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.headers, ARROW_SCHEMA.field("headers").type),
            ],
            schema=ARROW_SCHEMA,
        )
        self.clear()
        return batch
