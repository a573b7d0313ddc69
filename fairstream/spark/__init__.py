"""Kafka on Spark: backfills of offset ranges, and a streaming source with fair admission.

An optional extra (``pip install 'fairstream[spark]'``: pyspark, pyarrow,
confluent-kafka). Layout and import rules:

- ``planning`` is pure (ranges, chunks, placement, commits) and imports only
  ``fairstream.assign``, ``fairstream.ranges`` and ``fairstream.errors``.
- ``source`` is the PySpark Python data source named ``fairstream``; it runs in the
  executors, so it imports nothing from fairstream beyond those leaves.
- ``stream`` is the Structured Streaming side of the same source (``readStream``),
  ``streamplan`` its pure offsets and fair admission.
- ``cluster`` is the driver's Kafka I/O (partition states, the final commit),
  ``handlers`` loads and runs user handlers, ``backfill`` drives a job.
- Nothing here imports ``fairstream.runtime``; the runtime calls
  :func:`submit_shadow_backfill` instead.

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
