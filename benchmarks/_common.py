"""What the benchmark scripts share: the cluster they run on and the raw aiokafka loop.

Scripts run as ``python benchmarks/<name>.py``, so this module is importable as
``_common`` from their own directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Literal

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord

import fairstream
from fairstream.testing import EmbeddedBroker


def fairstream_in_use() -> str:
    """Which fairstream this run imports: a script's ``sys.path[0]`` is ``benchmarks/``,
    so the package comes from ``PYTHONPATH`` or the venv's install, which may point at
    another checkout (an editable install of a clone once made a "final code" row
    measure an older commit)."""
    return f"fairstream from {os.path.dirname(fairstream.__file__)}"


@contextlib.contextmanager
def cluster(bootstrap: str | None, engine: str = "noida") -> Iterator[str]:
    """The given cluster, or an embedded broker (noida unless ``engine`` says) for the block."""
    if bootstrap:
        yield bootstrap
        return
    with EmbeddedBroker(engine) as broker:
        yield broker.bootstrap


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions, replication 1."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("FAIRSTREAM_BOOTSTRAP"),
        help="a cluster to use instead of an embedded noida broker (from $FAIRSTREAM_BOOTSTRAP)",
    )


def add_scheduler_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scheduler",
        nargs="+",
        default=[],
        metavar="FIELD=N",
        help="SchedulerConfig fields for every fairstream way, e.g. max_buffered_records=4000 "
        "queue_target_records=400 fetch_linger=0 (the defaults otherwise)",
    )


def scheduler_fields(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, float]:
    """``--scheduler`` as ``SchedulerConfig`` keyword arguments (counts are ints, seconds
    may have a fraction); a field or value it refuses stops the command with its error."""
    from fairstream import FairstreamError, SchedulerConfig

    try:
        fields: dict[str, float] = {
            name: float(value) if "." in value else int(value)
            for name, value in (item.split("=", 1) for item in items)
        }
        SchedulerConfig(**fields)
    except (ValueError, TypeError, FairstreamError) as exc:
        parser.error(f"--scheduler: {exc}")
    return fields


Commits = Literal["batch", "interval", "auto"]
"""How the raw loop commits: after every batch; after handling, at most once a second;
or aiokafka's auto-commit (its default), which commits what ``getmany`` returned on a
timer, so a crash can lose records that were returned but not yet handled."""


async def raw_aiokafka_loop(
    *,
    bootstrap: str,
    topic: str,
    group_id: str,
    handle: Callable[[ConsumerRecord[bytes, bytes]], Awaitable[None]],
    until: asyncio.Event,
    max_records: int | None = None,
    commits: Commits = "batch",
) -> None:
    """What a user writes without a framework: getmany and a handler per record.

    ``max_records`` bounds each ``getmany`` (aiokafka's own option; unbounded by default).
    """
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=commits == "auto",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    committed_at = time.monotonic()
    try:
        while not until.is_set():
            batches = await consumer.getmany(timeout_ms=200, max_records=max_records)
            for records in batches.values():
                for record in records:
                    await handle(record)
            if not batches or commits == "auto":
                continue
            if commits == "batch" or time.monotonic() - committed_at >= 1.0:
                await consumer.commit()
                committed_at = time.monotonic()
        if commits == "interval":
            await consumer.commit()
    finally:
        await consumer.stop()
