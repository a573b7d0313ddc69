"""Kafka on Spark: backfills of offset ranges, and a streaming source with fair admission.

An optional extra (``pip install 'fairstream[spark]'``: pyspark, pyarrow,
confluent-kafka). Layout and import rules:

- From the rest of fairstream, modules here import only the leaves
  ``fairstream.errors`` and ``fairstream.ranges``, and ``planning`` also the pure
  planner ``fairstream.assign``; never ``fairstream.runtime``, ``testing`` or ``cli``.
  A Spark executor therefore loads neither aiokafka nor anyio
  (``tests/test_architecture.py`` checks both).
- ``planning`` (ranges, chunks, placement, commits) and ``streamplan`` (a stream's
  offsets and fair admission) are pure.
- ``cluster`` is the driver's Kafka I/O (partition states, the final commit);
  ``reading`` reads one task's chunks on an executor with confluent-kafka;
  ``handlers`` loads and runs user handlers.
- ``source`` is the PySpark Python data source named ``fairstream``; ``batchread``
  plans its batch reads, ``stream`` is its Structured Streaming side
  (``readStream``), ``sink`` its writer, ``streamoptions`` the options both read.
  ``source`` imports ``stream`` late (inside the method that needs it) because
  ``stream`` imports ``source``: the one import circle left in fairstream, which
  the architecture test lists as known until it is broken.
- ``backfill`` drives a batch job and ``streamjob`` a streaming one; ``listener``
  commits a stream's progress. ``handoff`` builds a
  ``ParallelRebalance(handoff=...)`` callable around
  :func:`submit_shadow_backfill`: the runtime takes any such callable and never
  imports this package.

Names are loaded lazily, so ``import fairstream.spark`` is cheap and a missing
extra raises an :class:`ImportError` that names the install command only when a
name that needs it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fairstream.spark.backfill import (
        BackfillJob,
        BackfillResult,
        build_session,
        run_backfill,
        submit_shadow_backfill,
    )
    from fairstream.spark.handlers import BackfillRecord, Handler
    from fairstream.spark.listener import GroupCommitter
    from fairstream.spark.source import FairstreamDataSource, read_chunks
    from fairstream.spark.stream import register

__all__ = [
    "BackfillJob",
    "BackfillRecord",
    "BackfillResult",
    "FairstreamDataSource",
    "GroupCommitter",
    "Handler",
    "build_session",
    "read_chunks",
    "register",
    "run_backfill",
    "submit_shadow_backfill",
]

_HOMES = {
    "BackfillJob": "backfill",
    "BackfillRecord": "handlers",
    "BackfillResult": "backfill",
    "FairstreamDataSource": "source",
    "GroupCommitter": "listener",
    "Handler": "handlers",
    "build_session": "backfill",
    "read_chunks": "source",
    "register": "stream",
    "run_backfill": "backfill",
    "submit_shadow_backfill": "backfill",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fairstream.spark' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fairstream.spark.{home}"), name)
