"""A KIP-333 shadow's reader on aiokafka: a group-less consumer of one partition.

``AIOKafkaClients.shadow_reader`` starts and stops the consumer; this reads it in
bounded steps, so one read never holds the event loop for a whole fetch.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from fairstream.errors import BrokerError, describe
from fairstream.runtime._kafka._admin import may_pass
from fairstream.runtime._record import Record, as_records

__all__ = ["AIOKafkaShadowReader", "shadow_read_error"]

_SHADOW_READ_RECORDS = 500
"""Records per shadow read. aiokafka turns a fetch into records lazily, so this bounds
how long one read holds the event loop: a whole 1 MiB fetch is ~6,000 records, and
parsing those in one go for every shadow delayed live records by seconds (measured
with benchmarks/parallel_rebalance.py: live p99 2.9 s unbounded, 0.26 s at 500)."""


def shadow_read_error(
    tp: tuple[str, int], group_id: str, bootstrap: str, exc: KafkaError
) -> BrokerError:
    """The error for a shadow of group ``group_id`` that could not read partition ``tp``."""
    return BrokerError(
        f"could not read {tp[0]}[{tp[1]}] for the shadow (group {group_id!r}): {describe(exc)}; "
        "check that the cluster is up and the group may be described",
        bootstrap=bootstrap,
        retriable=may_pass(exc),
    )


class AIOKafkaShadowReader:
    """Reads ``tp`` with a started, assigned group-less ``consumer`` (``ShadowReader``)."""

    def __init__(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, group_id: str, bootstrap: str
    ) -> None:
        self._consumer = consumer
        self._tp = tp
        self._group_id = group_id
        self._bootstrap = bootstrap

    def seek(self, offset: int) -> None:
        self._consumer.seek(self._tp, offset)

    async def read(self, end: int) -> list[Record[bytes]] | None:
        tp = self._tp
        try:
            if await self._consumer.position(tp) >= end:
                return None
            batches = await self._consumer.getmany(
                tp, timeout_ms=500, max_records=_SHADOW_READ_RECORDS
            )
        except KafkaError as exc:
            raise shadow_read_error(tp, self._group_id, self._bootstrap, exc) from exc
        return [r for r in as_records(batches.get(tp, []), replay=True) if r.offset < end]
