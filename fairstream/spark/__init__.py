"""Kafka on Spark: backfills of offset ranges, and a streaming source with fair admission.

An optional extra (``pip install 'fairstream[spark]'``: pyspark, pyarrow,
confluent-kafka). Layout and import rules:

- From the rest of fairstream, modules here import only the leaves
  ``fairstream.errors`` and ``fairstream.ranges``, and ``planning`` also the pure
  planner ``fairstream.assign``; never ``fairstream.runtime``, ``testing`` or ``cli``.
  A Spark executor therefore loads neither aiokafka nor anyio
  (``tests/test_architecture.py`` checks both).
- ``planning`` (ranges, chunks, placement, commits), ``streamplan`` (a stream's
  offsets and fair admission), ``offsetspec`` and ``streamoptions`` are pure (no
  Kafka or Spark I/O).
- ``cluster`` is the driver's Kafka I/O (partition states, commits); ``reading``
  reads one task's chunks on an executor with confluent-kafka; ``handlers`` loads
  and runs user handlers.
- ``source`` is the PySpark Python data source named ``fairstream`` (also found by
  PySpark itself through the top-level ``pyspark_fairstream`` module); its readers
  run in the executors. It makes ``stream``'s reader for ``spark.readStream``,
  ``batchread`` plans a ``spark.read`` with Spark's options, and ``sink`` writes to
  Kafka. ``columns`` holds what the batch and stream readers share, so ``stream``
  never imports ``source``: imports among these modules go one way
  (``tests/test_architecture.py`` checks it, lazy imports counted).
- ``backfill`` drives a batch job and ``streamjob`` a streaming one; ``listener``
  commits a stream's progress after each batch. ``handoff`` builds a
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
    from fairstream.spark.source import FairstreamDataSource, read_chunks, register

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
    "register": "source",
    "run_backfill": "backfill",
    "submit_shadow_backfill": "backfill",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fairstream.spark' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fairstream.spark.{home}"), name)
