"""What the benchmark scripts share: the cluster they run on and the raw aiokafka loop.

Scripts run as ``python benchmarks/<name>.py``, so this module is importable as
``_common`` from their own directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterator

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from fairstream.testing import EmbeddedBroker


@contextlib.contextmanager
def cluster(bootstrap: str | None) -> Iterator[str]:
    """The given cluster, or an embedded noida broker for the length of the block."""
    if bootstrap:
        yield bootstrap
        return
    with EmbeddedBroker("noida") as broker:
        yield broker.bootstrap


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("FAIRSTREAM_BOOTSTRAP"),
        help="a cluster to use instead of an embedded noida broker (from $FAIRSTREAM_BOOTSTRAP)",
    )


async def raw_aiokafka_loop(
    *,
    bootstrap: str,
    topic: str,
    group_id: str,
    handle: Callable[[ConsumerRecord[bytes, bytes]], Awaitable[None]],
    until: asyncio.Event,
    max_records: int | None = None,
) -> None:
    """What a user writes without a framework: getmany, a handler per record, commit per batch.

    ``max_records`` bounds each ``getmany`` (aiokafka's own option; unbounded by default).
    """
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        while not until.is_set():
            batches = await consumer.getmany(timeout_ms=200, max_records=max_records)
            for records in batches.values():
                for record in records:
                    await handle(record)
            if batches:
                await consumer.commit()
    finally:
        await consumer.stop()
