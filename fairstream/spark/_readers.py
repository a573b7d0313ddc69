"""Kafka consumers kept from one Spark task to the next in a Python worker.

Why: a task that opens its own consumer fetches its first chunk from the broker,
and a broker that ignores fetch size limits (the embedded noida) answers that
fetch with everything up to the log end: 110 MB for a 1M-record backlog, for every
task of every micro-batch that reads a piece of it (0.6-0.8 s each, most of a
batch: benchmarks/RESULTS.md, streaming). Spark reuses its Python workers
(``spark.python.worker.reuse``, on by default), so a consumer left assigned where
one chunk ended already holds what the next chunk of that partition needs. Spark's
JVM Kafka source pools its consumers for the same reason.

What stays, per worker process: at most :data:`MAX_IDLE` idle consumers, none for
longer than :data:`IDLE_SECONDS`. A consumer stays assigned only while its partition
has at least :data:`KEEP_AHEAD` records beyond its position: near the log end it
would keep asking the broker for more (noida answers such fetches at once,
thousands a second), so there it is unassigned and kept for any partition, which
still saves creating a client. A consumer in an unknown state (the read failed or
was abandoned) is closed, never kept. A reader *warmed* for a batch to come
(:meth:`ReaderPool.warm`: the streaming source holds a large first read back one
batch and has every task start one) is kept assigned at its start, fetching.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from fairstream.spark._extra import missing_extra
from fairstream.spark.planning import Chunk

try:
    from confluent_kafka import Consumer, KafkaError, TopicPartition
except ImportError as exc:
    raise missing_extra(exc) from exc

MAX_IDLE = 4
"""Idle consumers one worker keeps; each may hold a broker answer in memory."""

IDLE_SECONDS = 60.0
"""An idle consumer older than this is closed (at the next take or release)."""

KEEP_AHEAD = 10_000
"""Records beyond its position a partition needs for its consumer to stay assigned."""

SKIP_LIMIT = 50_000
"""How far below a chunk's start a kept consumer may be: it reads and drops the
records in between. On noida they are fetched already (the whole answer is queued)
and dropping 50k costs ~30 ms against ~0.6 s for a new fetch; a broker that keeps to
the fetch limits sends them again, at most 50k records of waste. 20k was too few:
two workers alternating on one partition's chunks left gaps of 20-22k."""

_NO_OFFSET = -1001  # librdkafka: no watermark known


@dataclass(eq=False)
class Reader:
    """A consumer and where it stands: the partition and the next offset it delivers."""

    consumer: Consumer
    errors: deque[KafkaError]
    """The client's latest errors (its ``error_cb`` appends here), for messages."""
    client: Hashable
    """The settings it was made with: only a task with the same ones may take it."""
    topic: str | None = None
    partition: int = -1
    position: int = -1
    idle_since: float = field(default=0.0)

    def serves(self, client: Hashable, chunk: Chunk) -> bool:
        return (
            self.client == client
            and (self.topic, self.partition) == (chunk.topic, chunk.partition)
            and 0 <= chunk.start - self.position <= SKIP_LIMIT
        )

    def aim(self, chunk: Chunk) -> None:
        """Assign the chunk's partition at its start (drops whatever was fetched)."""
        self.consumer.assign([TopicPartition(chunk.topic, chunk.partition, chunk.start)])
        self.topic, self.partition, self.position = chunk.topic, chunk.partition, chunk.start

    def records_ahead(self) -> int:
        """Records between the position and the log end, as the last fetch saw it."""
        if self.topic is None:
            return 0
        _, high = self.consumer.get_watermark_offsets(
            TopicPartition(self.topic, self.partition), cached=True
        )
        return 0 if high == _NO_OFFSET else high - self.position


class ReaderPool:
    """The idle readers of one process; thread-safe, though Spark runs one task each."""

    def __init__(self) -> None:
        self._idle: list[Reader] = []
        self._lock = threading.Lock()

    def take(
        self, client: Hashable, chunk: Chunk, create: Callable[[deque[KafkaError]], Consumer]
    ) -> Reader:
        """A reader at or up to :data:`SKIP_LIMIT` below ``chunk.start``: a kept one
        that is there, else an idle unassigned one, else a new one, aimed at it."""
        with self._lock:
            stale = self._expire()
            reader = next((r for r in self._idle if r.serves(client, chunk)), None)
            if reader is None:
                spares = (r for r in self._idle if r.client == client and r.topic is None)
                reader = next(spares, None)
            if reader is not None:
                self._idle.remove(reader)
        _close_all(stale)
        if reader is None:
            errors: deque[KafkaError] = deque(maxlen=8)
            reader = Reader(create(errors), errors, client)
        reader.errors.clear()
        if not reader.serves(client, chunk):
            reader.aim(chunk)
        return reader

    def warm(
        self, client: Hashable, chunk: Chunk, create: Callable[[deque[KafkaError]], Consumer]
    ) -> None:
        """Have an idle reader fetching ``chunk``'s partition from its start, for a task
        to come, unless one that serves it is kept already."""
        with self._lock:
            if any(r.serves(client, chunk) for r in self._idle):
                return
        self._keep(self.take(client, chunk, create))

    def release(self, reader: Reader) -> None:
        """Keep a reader that finished its chunk (see the module's rules)."""
        if reader.records_ahead() < KEEP_AHEAD:
            reader.consumer.unassign()
            reader.topic, reader.partition, reader.position = None, -1, -1
        self._keep(reader)

    def _keep(self, reader: Reader) -> None:
        reader.idle_since = time.monotonic()
        with self._lock:
            stale = self._expire()
            self._idle.append(reader)
            while len(self._idle) > MAX_IDLE:
                stale.append(self._idle.pop(0))
        _close_all(stale)

    def close(self) -> None:
        with self._lock:
            stale, self._idle = self._idle, []
        _close_all(stale)

    def _expire(self) -> list[Reader]:
        """Take out (to close outside the lock) the readers idle too long."""
        oldest = time.monotonic() - IDLE_SECONDS
        stale = [r for r in self._idle if r.idle_since < oldest]
        self._idle = [r for r in self._idle if r.idle_since >= oldest]
        return stale

    def idle(self) -> tuple[Reader, ...]:
        """The idle readers, oldest first (for diagnostics and tests)."""
        with self._lock:
            return tuple(self._idle)


def _close_all(readers: list[Reader]) -> None:
    for reader in readers:
        reader.consumer.close()


POOL = ReaderPool()
"""This process's pool; emptied when the worker exits."""
atexit.register(POOL.close)
