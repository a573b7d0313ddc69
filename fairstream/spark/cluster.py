"""The driver's Kafka I/O: read the group's partition states, commit after the job.

Both use one short-lived confluent-kafka consumer carrying the group id but never
subscribing, so it reads and commits offsets without joining the group. Kafka
accepts such a commit only while the group has no live members; a running
fairstream app hands its shadow ranges to :func:`~fairstream.spark.submit_shadow_backfill`
and commits them itself instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import structlog

from fairstream.errors import BrokerError, CommitError, ConfigError
from fairstream.spark._extra import missing_extra
from fairstream.spark.planning import PartitionCommit, PartitionState

try:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = ["commit", "kafka_logger", "read_states"]

log = structlog.get_logger(__name__)

kafka_logger = logging.getLogger("fairstream.spark.kafka")
"""Where librdkafka's own log lines go (silent unless the application configures it)."""
kafka_logger.addHandler(logging.NullHandler())

_NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group never committed here


@contextmanager
def _group_client(bootstrap: str, group_id: str, kafka_config: Mapping[str, str]) -> Iterator[Any]:
    config = {
        **kafka_config,
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "enable.auto.commit": False,
        "logger": kafka_logger,
    }
    try:
        consumer = Consumer(config)
    except KafkaException as exc:
        raise ConfigError("kafka_config", kafka_config, str(exc), "fix the client setting") from exc
    try:
        yield consumer
    finally:
        consumer.close()


def read_states(
    bootstrap: str,
    group_id: str,
    topics: Sequence[str],
    *,
    kafka_config: Mapping[str, str] | None = None,
    timeout: float = 15.0,
    quiet: bool = False,
) -> list[PartitionState]:
    """Watermarks, committed offset and commit metadata of every partition of ``topics``.

    ``quiet`` logs nothing (the streaming source reads the states every batch).

    :raises ConfigError: a topic does not exist.
    :raises BrokerError: the cluster did not answer within ``timeout`` seconds.
    """
    states: list[PartitionState] = []
    with _group_client(bootstrap, group_id, kafka_config or {}) as consumer:
        try:
            for topic in topics:
                metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
                if metadata is None or metadata.error is not None or not metadata.partitions:
                    raise ConfigError(
                        "topics", topic, "no such topic on the cluster", "check its name"
                    )
                wanted = [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
                for tp in consumer.committed(wanted, timeout=timeout):
                    low, high = consumer.get_watermark_offsets(tp, timeout=timeout)
                    states.append(
                        PartitionState(
                            topic=topic,
                            partition=tp.partition,
                            log_start=low,
                            log_end=high,
                            committed=None if tp.offset == _NO_OFFSET else tp.offset,
                            metadata=_metadata(tp),
                        )
                    )
        except KafkaException as exc:
            error = exc.args[0]
            raise BrokerError(
                f"cannot read offsets of group {group_id!r}: {error.str()}; check the bootstrap "
                "servers and that the brokers are up",
                bootstrap=bootstrap,
                retriable=error.retriable(),
            ) from exc
    if not quiet:
        log.info("group_state_read", group_id=group_id, topics=list(topics), partitions=len(states))
    return states


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
    """Commit the offsets and shadow metadata in one request; ``job`` names the caller
    (``backfill``, ``stream``) in logs and errors.

    :raises CommitError: the broker refused a partition's commit (for example
        because the group has live members) or could not be reached.
    """
    if not commits:
        return
    offsets = [TopicPartition(c.topic, c.partition, c.offset, metadata=c.metadata) for c in commits]
    with _group_client(bootstrap, group_id, kafka_config or {}) as consumer:
        try:
            answered = consumer.commit(offsets=offsets, asynchronous=False) or []
        except KafkaException as exc:
            raise CommitError(_refused(job, exc.args[0].str()), group_id=group_id) from exc
    failed = [tp for tp in answered if tp.error is not None]
    if failed:
        first = failed[0]
        reason = f"{first.topic}[{first.partition}]: {first.error.str()}"
        raise CommitError(_refused(job, reason), group_id=group_id)
    if job != "stream":  # a stream commits every batch; its progress is Spark's to report
        log.info(f"{job}_committed", group_id=group_id, partitions=len(commits))


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
