"""The driver's Kafka I/O: read the group's partition states, commit after the job.

A :class:`GroupClient` is a confluent-kafka consumer carrying the group id but never
subscribing, so it reads and commits offsets without joining the group, and an admin
client that asks every partition's log start and end in one ``ListOffsets`` request
per broker (not a round trip per partition: at hundreds of partitions those add up to
seconds on a real network). A backfill uses one for a call (:func:`read_states`,
:func:`commit`); a streaming query's driver keeps one between triggers. Kafka accepts
such a commit only while the group has no live members; a running fairstream app
hands its shadow ranges to :func:`~fairstream.spark.submit_shadow_backfill` and
commits them itself instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import structlog

from fairstream.errors import BrokerError, CommitError, ConfigError
from fairstream.spark._extra import missing_extra
from fairstream.spark.planning import PartitionCommit, PartitionState

try:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._listoffsets import OffsetSpec  # admin's re-export is untyped
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = ["GroupClient", "OffsetRetry", "commit", "kafka_logger", "read_states"]

log = structlog.get_logger(__name__)

kafka_logger = logging.getLogger("fairstream.spark.kafka")
"""Where librdkafka's own log lines go (silent unless the application configures it)."""
kafka_logger.addHandler(logging.NullHandler())

_NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group never committed here

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetRetry:
    """How often the driver asks again for offsets the brokers did not give: Spark's
    ``fetchOffset.numRetries`` (attempts in all, the first counted, as Spark counts
    them) and ``fetchOffset.retryIntervalMs`` (the wait between two)."""

    attempts: int = 3
    interval: float = 0.01
    """Seconds."""


_ONCE = OffsetRetry(attempts=1)


class GroupClient:
    """A group's offsets and its topics' log starts and ends, without joining it."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        kafka_config: Mapping[str, str],
        retry: OffsetRetry | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.retry = retry or _ONCE
        """The source's ``fetchOffset.*``; a backfill asks once (its timeout is the wait)."""
        config = {**kafka_config, "bootstrap.servers": bootstrap, "logger": kafka_logger}
        try:
            self.consumer = Consumer({**config, "group.id": group_id, "enable.auto.commit": False})
            self.admin = AdminClient(cast(dict[str, Any], config))
        except KafkaException as exc:
            raise ConfigError(
                "kafka_config", kafka_config, str(exc), "fix the client setting"
            ) from exc

    def close(self) -> None:
        """Destroy both clients now, in this thread.

        confluent-kafka's admin client has no ``close()``: its handle goes with its
        ``__exit__`` or with the garbage collector. Left to the collector, a handle
        caught in a reference cycle (a traceback's frames hold one) is destroyed
        wherever a collection happens to run, possibly inside another client's call or
        on librdkafka's own callback thread, where confluent-kafka's thread state
        bookkeeping does not expect it (confluent-kafka-python #2129). So no client of
        ours is ever left to it.
        """
        with self.admin:
            self.admin.poll(0)  # serve the log lines queued for kafka_logger
            self.consumer.close()

    def __enter__(self) -> GroupClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _retrying(self, doing: str, fetch: Callable[[], _T]) -> _T:
        """``fetch()``, asked again after a :class:`BrokerError` until :attr:`retry`'s
        attempts are spent, as Spark retries its offset reads (a topic that does not
        exist is a :class:`ConfigError`, never asked again).

        :raises BrokerError: the last attempt's.
        """
        attempt = 1
        while True:
            try:
                return fetch()
            except BrokerError as error:
                if attempt >= self.retry.attempts:
                    raise
                log.warning("offsets_fetch_retried", doing=doing, attempt=attempt, error=str(error))
                time.sleep(self.retry.interval)
                attempt += 1

    def topic_names(self, *, timeout: float = 15.0) -> list[str]:
        """Every topic on the cluster (for a subscription by pattern)."""
        return self._retrying("topic_names", lambda: self._topic_names(timeout))

    def _topic_names(self, timeout: float) -> list[str]:
        try:
            return list(self.consumer.list_topics(timeout=timeout).topics)
        except KafkaException as exc:
            raise self._failed("cannot list the cluster's topics", exc) from exc

    def states(
        self, topics: Sequence[str], *, timeout: float = 15.0, quiet: bool = False
    ) -> list[PartitionState]:
        """Watermarks, committed offset and commit metadata of every partition of ``topics``.

        ``quiet`` logs nothing (the streaming source reads the states every batch).

        :raises ConfigError: a topic does not exist.
        :raises BrokerError: the cluster did not answer within ``timeout`` seconds, in
            any of :attr:`retry`'s attempts.
        """
        states = self._retrying("states", lambda: self._states(topics, timeout))
        if not quiet:
            log.info(
                "group_state_read",
                group_id=self.group_id,
                topics=list(topics),
                partitions=len(states),
            )
        return states

    def _states(self, topics: Sequence[str], timeout: float) -> list[PartitionState]:
        try:
            wanted = []
            for topic in topics:
                metadata = self.consumer.list_topics(topic, timeout=timeout).topics.get(topic)
                if metadata is None or metadata.error is not None or not metadata.partitions:
                    raise ConfigError(
                        "topics", topic, "no such topic on the cluster", "check its name"
                    )
                wanted += [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
            committed = self.consumer.committed(wanted, timeout=timeout)
            earliest, latest = OffsetSpec.earliest(), OffsetSpec.latest()  # type: ignore[no-untyped-call]
            starts = self._log_offsets(wanted, earliest, timeout)
            ends = self._log_offsets(wanted, latest, timeout)
        except KafkaException as exc:
            raise self._failed(f"cannot read offsets of group {self.group_id!r}", exc) from exc
        return [
            PartitionState(
                topic=tp.topic,
                partition=tp.partition,
                log_start=starts[tp.topic, tp.partition],
                log_end=ends[tp.topic, tp.partition],
                committed=None if tp.offset == _NO_OFFSET else tp.offset,
                metadata=_metadata(tp),
            )
            for tp in committed
        ]

    def offsets_for_times(
        self, times: Mapping[tuple[str, int], int], *, timeout: float = 15.0
    ) -> dict[tuple[str, int], int]:
        """Each partition's first offset with a timestamp at or after its time (ms), or
        -1 where none is (Kafka's ListOffsets by timestamp, one request a broker)."""
        return self._retrying("offsets_for_times", lambda: self._offsets_for_times(times, timeout))

    def _offsets_for_times(
        self, times: Mapping[tuple[str, int], int], timeout: float
    ) -> dict[tuple[str, int], int]:
        asked = [TopicPartition(topic, partition, ms) for (topic, partition), ms in times.items()]
        try:
            answered = self.consumer.offsets_for_times(asked, timeout=timeout)
        except KafkaException as exc:
            raise self._failed("cannot look up offsets by timestamp", exc) from exc
        return {(tp.topic, tp.partition): tp.offset for tp in answered}

    def _log_offsets(
        self, wanted: Sequence[Any], spec: Any, timeout: float
    ) -> dict[tuple[str, int], int]:
        """Every partition's offset by ``spec`` (earliest, latest): one request a broker."""
        asked = {TopicPartition(tp.topic, tp.partition): spec for tp in wanted}
        answers = self.admin.list_offsets(asked, request_timeout=timeout)
        try:
            return {
                (tp.topic, tp.partition): future.result(timeout=timeout).offset
                for tp, future in answers.items()
            }
        finally:
            self.admin.poll(0)  # its log lines wait for a poll (the logger option)

    def _failed(self, doing: str, exc: KafkaException) -> BrokerError:
        error = exc.args[0]
        return BrokerError(
            f"{doing}: {error.str()}; check the bootstrap servers and that the brokers are up",
            bootstrap=self.bootstrap,
            retriable=error.retriable(),
        )

    def commit(self, commits: Sequence[PartitionCommit], job: str) -> None:
        """Commit the offsets and shadow metadata in one request; ``job`` names the
        caller (``backfill``, ``stream``) in logs and errors.

        :raises CommitError: the broker refused a partition's commit (for example
            because the group has live members) or could not be reached.
        """
        if not commits:
            return
        offsets = [
            TopicPartition(c.topic, c.partition, c.offset, metadata=c.metadata) for c in commits
        ]
        try:
            answered = self.consumer.commit(offsets=offsets, asynchronous=False) or []
        except KafkaException as exc:
            raise CommitError(_refused(job, exc.args[0].str()), group_id=self.group_id) from exc
        failed = [tp for tp in answered if tp.error is not None]
        if failed:
            first = failed[0]
            error = first.error.str() if first.error is not None else "refused"
            reason = f"{first.topic}[{first.partition}]: {error}"
            raise CommitError(_refused(job, reason), group_id=self.group_id)
        if job != "stream":  # a stream commits every batch; its progress is Spark's to report
            log.info(f"{job}_committed", group_id=self.group_id, partitions=len(commits))


def read_states(
    bootstrap: str,
    group_id: str,
    topics: Sequence[str],
    *,
    kafka_config: Mapping[str, str] | None = None,
    timeout: float = 15.0,
    quiet: bool = False,
) -> list[PartitionState]:
    """:meth:`GroupClient.states` with a client for this call alone."""
    with GroupClient(bootstrap, group_id, kafka_config or {}) as client:
        return client.states(topics, timeout=timeout, quiet=quiet)


def _metadata(tp: Any) -> str:
    """The commit metadata of ``tp`` as confluent-kafka read it, up to its first byte
    that is not UTF-8.

    confluent-kafka (2.16) hands metadata to Python as a C string, but librdkafka's
    copy of an answer keeps the stored bytes without a NUL after them: metadata
    committed without one (by fairstream before :func:`fairstream.ranges.to_commit`,
    or by another client) comes back followed by whatever lies next in memory
    (``tests/spark/test_metadata_read.py`` reproduces it on noida; the broker returns
    the bytes exactly). The decoders skip what follows their JSON; bytes that are not
    UTF-8 would fail the read every time the same memory lies there, so the text
    before them is kept instead of asking again.
    """
    try:
        return str(tp.metadata or "")  # decoded here, on access, not by committed()
    except UnicodeDecodeError as exc:
        log.warning(
            "commit_metadata_overread",
            topic=tp.topic,
            partition=tp.partition,
            reason="metadata committed without a NUL; confluent-kafka read past its end",
        )
        return bytes(exc.object[: exc.start]).decode()


def commit(
    bootstrap: str,
    group_id: str,
    commits: Sequence[PartitionCommit],
    *,
    kafka_config: Mapping[str, str] | None = None,
    job: str = "backfill",
) -> None:
    """:meth:`GroupClient.commit` with a client for this call alone."""
    if not commits:
        return
    with GroupClient(bootstrap, group_id, kafka_config or {}) as client:
        client.commit(commits, job)


def _refused(job: str, reason: str) -> str:
    if job == "stream":
        return (
            f"committing the stream's group offsets failed ({reason}); Spark's checkpoint "
            "holds the progress, so stop the group's other consumers or set commitToGroup=false"
        )
    return (
        f"committing the {job}'s offsets failed ({reason}); the job's work is done, so "
        "stop the group's live consumers and rerun, or rerun without committing"
    )
