"""User handlers in the executors: load ``module:func``, feed it records, sync or async.

A handler gets one :class:`BackfillRecord` per Kafka record, in offset order
within each chunk. An ``async def`` handler is awaited record by record in an
event loop that lives as long as the Spark task, so it may keep clients (HTTP,
database) per loop. Records of a task are handled in the order they are read;
different tasks run in parallel.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import NamedTuple, TypeAlias, cast

from fairstream.errors import ConfigError
from fairstream.spark._extra import missing_extra

try:
    import pyarrow as pa
    from pyspark import cloudpickle
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = [
    "COUNTS",
    "BackfillRecord",
    "Handler",
    "decode_handler",
    "encode_handler",
    "handle_batches",
    "load_handler",
]

Headers: TypeAlias = tuple[tuple[str, bytes | None], ...]


class BackfillRecord(NamedTuple):
    """One Kafka record as a backfill handler receives it.

    The fields mirror the runtime's record (``timestamp`` in epoch milliseconds,
    ``-1`` when the record has none) so one function can serve both, but the value
    is the raw bytes: a backfill decodes in the handler. A NamedTuple because one
    is built per record.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


Handler: TypeAlias = Callable[[BackfillRecord], None] | Callable[[BackfillRecord], Awaitable[None]]
"""``def handle(record)`` or ``async def handle(record)``; its return value is ignored."""

COUNTS = pa.schema([pa.field("records", pa.int64(), False)])
"""What the handler stage yields per Arrow batch: how many records it handled."""


def load_handler(ref: str) -> Handler:
    """Import ``module:func`` and make it travel to the executors by value.

    Like uvicorn's ``--app-dir``, the current directory is importable, so
    ``examples.backfill_handler:handle`` works from a checkout. The module is
    registered with cloudpickle to be pickled by value, so executors on a cluster
    need its dependencies but not the module file itself.

    :raises ConfigError: the reference is malformed, the module cannot be imported,
        or the attribute is missing or not callable.
    """
    module_name, colon, attr = ref.partition(":")
    if not colon or not module_name or not attr:
        raise ConfigError("handler", ref, "expected MODULE:FUNCTION", "e.g. myjobs.backfill:handle")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            "handler", ref, f"cannot import {module_name!r} ({exc})", "check the module path"
        ) from exc
    handler = getattr(module, attr, None)
    if not callable(handler):
        raise ConfigError(
            "handler", ref, f"{module_name!r} has no function {attr!r}", "name a callable"
        )
    if not module_name.startswith("fairstream."):
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    return cast(Handler, handler)


def encode_handler(handler: Handler) -> str:
    """``handler`` pickled for a data source option (closures and lambdas too)."""
    pickled: bytes = cloudpickle.dumps(handler)  # type: ignore[no-untyped-call]
    return base64.b64encode(pickled).decode("ascii")


def decode_handler(text: str) -> Handler:
    """The handler :func:`encode_handler` packed, unpickled in the executor."""
    return cast(Handler, cloudpickle.loads(base64.b64decode(text)))


def is_async(handler: Handler) -> bool:
    """Whether calling ``handler`` returns a coroutine to await."""
    call = getattr(handler, "__call__", None)  # noqa: B004 - async callable objects count too
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def records_of(batch: pa.RecordBatch) -> list[BackfillRecord]:
    """The batch's rows as records (columns as in :data:`fairstream.spark.columns.SCHEMA`)."""
    millis = batch.column("timestamp").cast(pa.int64()).to_pylist()
    headers = batch.column("headers").to_pylist()
    return [
        BackfillRecord(topic, partition, offset, key, value, hs, -1 if us is None else us // 1000)
        for topic, partition, offset, key, value, hs, us in zip(
            batch.column("topic").to_pylist(),
            batch.column("partition").to_pylist(),
            batch.column("offset").to_pylist(),
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            [tuple((h["key"], h["value"]) for h in hs or ()) for hs in headers],
            millis,
            strict=True,
        )
    ]


async def _await_each(
    handler: Callable[[BackfillRecord], Awaitable[None]], records: Sequence[BackfillRecord]
) -> None:
    for record in records:
        await handler(record)


def handle_batches(
    handler: Handler,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function that runs ``handler`` on every record of a task's Arrow batches.

    It yields one row per batch with the number of records handled
    (:data:`.columns.COUNT_SCHEMA`). An exception from the handler fails the task, and so
    the job, and nothing gets committed.
    """
    awaiting = is_async(handler)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with contextlib.ExitStack() as stack:
            runner = stack.enter_context(asyncio.Runner()) if awaiting else None
            for batch in batches:
                records = records_of(batch)
                if runner is None:
                    for record in records:
                        handler(record)
                else:
                    async_handler = cast(Callable[[BackfillRecord], Awaitable[None]], handler)
                    runner.run(_await_each(async_handler, records))
                yield pa.RecordBatch.from_arrays(
                    [pa.array([len(records)], pa.int64())], schema=COUNTS
                )

    return run
