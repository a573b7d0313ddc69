"""Records built straight from aiokafka's fetch buffers.

aiokafka turns every fetched record into a ``ConsumerRecord`` dataclass, which
the engine would then copy into a :class:`Record`: about 1.1 us a record of the
~2.5 us the consumer spent in all (0.94 + 0.17 us, ``benchmarks/RESULTS.md``).
aiokafka builds them in one private method,
``PartitionRecords._consumer_record(tp, record)``. :func:`build_records_directly`
swaps the fetcher's table of fetched buffers for one that points that method of
each new buffer at :func:`record_from`, so ``getmany()`` returns Records. All the
rest stays aiokafka's: CRC checks, transactions, control batches, positions,
pause and seek.

It is private API, so it is guarded. The fetcher must look as expected (else
nothing changes and :func:`as_records` copies aiokafka's records as before), a
buffer with deserializers is left alone, and ``tests/runtime/kafka/test_direct_records.py``
checks, against a real broker and the pinned aiokafka, that it is in use and
yields the same records as aiokafka's own path.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from functools import partial
from typing import Any

import structlog
from aiokafka.consumer.fetcher import PartitionRecords

from fairstream.runtime._record import record_from

__all__ = ["build_records_directly"]

log = structlog.get_logger(__name__)


class _Buffers(OrderedDict[Any, Any]):
    """aiokafka's fetched buffers by partition; points each new one at ``record_from``."""

    def __init__(self, buffers: Mapping[Any, Any], replay: bool) -> None:
        self._build = partial(record_from, replay)
        super().__init__()
        for tp, result in buffers.items():
            self[tp] = result

    def __setitem__(self, tp: Any, result: Any) -> None:
        records: Any = getattr(result, "_partition_records", None)
        if (
            type(records) is PartitionRecords
            and records._key_deserializer is None
            and records._value_deserializer is None
        ):
            records._consumer_record = self._build
        super().__setitem__(tp, result)


def build_records_directly(consumer: Any, *, replay: bool = False) -> bool:
    """Make a started aiokafka ``consumer`` return Records; ``False`` if it cannot.

    ``replay`` marks them as read by a KIP-333 shadow task.
    """
    fetcher: Any = getattr(consumer, "_fetcher", None)
    buffers = getattr(fetcher, "_records", None)
    if type(buffers) is not OrderedDict or not callable(
        getattr(PartitionRecords, "_consumer_record", None)
    ):
        log.info(
            "direct_records_unavailable",
            reason="aiokafka's fetcher is not the one this fairstream knows; "
            "records are copied from aiokafka's",
        )
        return False
    fetcher._records = _Buffers(buffers, replay)
    return True
